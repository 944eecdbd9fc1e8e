package limits

import (
	"math"
	"testing"
)

func TestFormatBytes(t *testing.T) {
	for _, c := range []struct {
		n         uint64
		tight, sp string
	}{
		{0, "0B", "0 B"},
		{1023, "1023B", "1023 B"},
		{1024, "1.0KiB", "1.0 KiB"},
		{1536, "1.5KiB", "1.5 KiB"},
		{32 << 20, "32.0MiB", "32.0 MiB"},
		{2 << 30, "2.0GiB", "2.0 GiB"},
		{3 << 40, "3.0TiB", "3.0 TiB"},
		{5 << 50, "5.0PiB", "5.0 PiB"},
		{math.MaxUint64, "16384.0PiB", "16384.0 PiB"},
	} {
		if got := FormatBytes(c.n, ""); got != c.tight {
			t.Errorf("FormatBytes(%d, \"\") = %q, want %q", c.n, got, c.tight)
		}
		if got := FormatBytes(c.n, " "); got != c.sp {
			t.Errorf("FormatBytes(%d, \" \") = %q, want %q", c.n, got, c.sp)
		}
	}
	// Without a separator it is a byte size ParseBytes reads.
	if n, err := ParseBytes(FormatBytes(1536, "")); err != nil || n != 1536 {
		t.Errorf("ParseBytes(FormatBytes(1536)) = %d, %v", n, err)
	}
}
