package limits

import "fmt"

// FormatBytes is n bytes for a person to read, in binary units as limits
// are written: "512B", "1.5KiB", "32.0MiB" (one decimal, rounded), with
// sep between the number and the unit ("" as in a config file, which
// ParseBytes reads back within the rounding; " " in prose, as the status
// page shows it). Sizes from 1 PiB on are shown in PiB.
func FormatBytes(n uint64, sep string) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d%sB", n, sep)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f%s%ciB", float64(n)/float64(div), sep, "KMGTP"[exp])
}
