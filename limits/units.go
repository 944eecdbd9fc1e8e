package limits

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"strings"
)

// byteUnits maps every accepted unit suffix to its multiplier in bytes.
// Units are case-sensitive: "MiB" and "MB" are accepted, "mib", "mb", "KB"
// (JEDEC 1024 or SI 1000?) and "Mi" are rejected as ambiguous.
var byteUnits = map[string]int64{
	"":    1,
	"B":   1,
	"K":   1000,
	"kB":  1000,
	"M":   1000 * 1000,
	"MB":  1000 * 1000,
	"G":   1000 * 1000 * 1000,
	"GB":  1000 * 1000 * 1000,
	"T":   1000 * 1000 * 1000 * 1000,
	"TB":  1000 * 1000 * 1000 * 1000,
	"KiB": 1 << 10,
	"MiB": 1 << 20,
	"GiB": 1 << 30,
	"TiB": 1 << 40,
}

// unitList is the accepted units in the order error messages list them.
const unitList = "B, K, kB, M, MB, G, GB, T, TB (powers of 1000), KiB, MiB, GiB, TiB (powers of 1024)"

// ParseBytes parses a byte size as operators write it in berth's TOML and
// returns it in bytes.
//
// Accepted form: an unsigned decimal number with an optional fraction
// ("512", "1.5"), optionally followed by spaces and one case-sensitive unit:
// "B" (bytes), "K", "kB", "M", "MB", "G", "GB", "T", "TB" (powers of 1000,
// SI) or "KiB", "MiB", "GiB", "TiB" (powers of 1024, IEC). A bare number is
// bytes. A fraction is allowed when the result is a whole number of bytes
// ("1.5KiB" = 1536, "0.5B" is an error).
//
// It returns an error for an empty string, a sign ("-1MiB", "+1MiB"), more
// than one decimal point ("1.5.2MiB"), a missing digit before or after the
// point (".5MiB", "1.MiB"), an unknown or ambiguous unit ("1mb", "1KB",
// "1Mi"), a fractional byte count, and a value above math.MaxInt64 bytes (the
// largest limit the kernel interfaces and runtime-spec's int64 fields hold).
func ParseBytes(s string) (int64, error) {
	if s == "" {
		return 0, errors.New("empty byte size")
	}
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	whole := s[:i]
	if whole == "" {
		return 0, fmt.Errorf("byte size %q must start with a digit", s)
	}
	frac := ""
	if i < len(s) && s[i] == '.' {
		j := i + 1
		for j < len(s) && s[j] >= '0' && s[j] <= '9' {
			j++
		}
		frac = s[i+1 : j]
		if frac == "" {
			return 0, fmt.Errorf("byte size %q has no digit after the decimal point", s)
		}
		i = j
	}
	if i < len(s) && s[i] == '.' {
		return 0, fmt.Errorf("byte size %q has more than one decimal point", s)
	}
	unit := strings.TrimLeft(s[i:], " ")
	mult, ok := byteUnits[unit]
	if !ok || (unit == "" && i != len(s)) {
		return 0, fmt.Errorf("byte size %q has an unknown unit %q (accepted, case-sensitive: %s)", s, unit, unitList)
	}
	// value = (whole.frac) * mult, computed exactly.
	r, ok := new(big.Rat).SetString(whole + "." + frac + "0")
	if !ok {
		return 0, fmt.Errorf("byte size %q is not a number", s)
	}
	r.Mul(r, new(big.Rat).SetInt64(mult))
	if !r.IsInt() {
		return 0, fmt.Errorf("byte size %q is not a whole number of bytes", s)
	}
	n := r.Num()
	if !n.IsInt64() {
		return 0, fmt.Errorf("byte size %q is too large (max %d bytes)", s, int64(math.MaxInt64))
	}
	return n.Int64(), nil
}
