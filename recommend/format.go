package recommend

import "strconv"

// formatBytes is b in the largest IEC unit that divides it ("80MiB",
// "3392KiB"), or its digits.
func formatBytes(b int64) string {
	for _, u := range []struct {
		name string
		size int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if b >= u.size && b%u.size == 0 {
			return strconv.FormatInt(b/u.size, 10) + u.name
		}
	}
	return strconv.FormatInt(b, 10)
}

// human is b bytes for a reader: three significant digits and an IEC
// unit ("71.3MiB").
func human(b float64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	i := 0
	for i < len(units)-1 && b >= 1024 {
		b /= 1024
		i++
	}
	switch {
	case i == 0:
		return strconv.FormatFloat(b, 'f', 0, 64) + "B"
	case b >= 100:
		return strconv.FormatFloat(b, 'f', 0, 64) + units[i]
	case b >= 10:
		return strconv.FormatFloat(b, 'f', 1, 64) + units[i]
	}
	return strconv.FormatFloat(b, 'f', 2, 64) + units[i]
}
