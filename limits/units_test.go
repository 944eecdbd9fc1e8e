package limits

import (
	"math"
	"strings"
	"testing"
)

func TestParseBytes(t *testing.T) {
	good := []struct {
		in   string
		want int64
	}{
		{"0", 0},
		{"1", 1},
		{"512B", 512},
		{"1K", 1000},
		{"1kB", 1000},
		{"1KiB", 1024},
		{"1.5KiB", 1536},
		{"1M", 1000000},
		{"1MB", 1000000},
		{"512MiB", 512 << 20},
		{"512 MiB", 512 << 20},
		{"1G", 1e9},
		{"1GB", 1e9},
		{"1GiB", 1 << 30},
		{"0.5GiB", 1 << 29},
		{"2T", 2e12},
		{"2TB", 2e12},
		{"3TiB", 3 << 40},
		{"0.001K", 1},
		{"9223372036854775807", math.MaxInt64},
		{"9223372036854775807B", math.MaxInt64},
	}
	for _, c := range good {
		got, err := ParseBytes(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d", c.in, got, err, c.want)
		}
	}
	bad := []struct{ in, msg string }{
		{"", "empty"},
		{"-1", "must start with a digit"},
		{"+1MiB", "must start with a digit"},
		{" 1MiB", "must start with a digit"},
		{".5MiB", "must start with a digit"},
		{"1.MiB", "no digit after the decimal point"},
		{"1.5.2MiB", "more than one decimal point"},
		{"1mb", `unknown unit "mb"`},
		{"1KB", `unknown unit "KB"`},
		{"1Mi", `unknown unit "Mi"`},
		{"1k", `unknown unit "k"`},
		{"1MiB ", `unknown unit "MiB "`},
		{"1 ", "unknown unit"},
		{"0.5B", "not a whole number of bytes"},
		{"0.3KiB", "not a whole number of bytes"},
		{"9223372036854775808", "too large"},
		{"8EiB", "unknown unit"},
		{"9000000TiB", "too large"},
		{"1e6", `unknown unit "e6"`},
	}
	for _, c := range bad {
		got, err := ParseBytes(c.in)
		if err == nil || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("ParseBytes(%q) = %d, %v; want error containing %q", c.in, got, err, c.msg)
		}
	}
}

func TestParseCPUList(t *testing.T) {
	got, err := ParseCPUList("3,0-1,1,6-6")
	if err != nil || FormatCPUList(got) != "0-1,3,6" {
		t.Fatalf("ParseCPUList = %v, %v; want 0-1,3,6", got, err)
	}
	for _, in := range []string{"", "1-", "-1", "a", "3-1", "0,,1", "4096", "1 -2"} {
		if _, err := ParseCPUList(in); err == nil {
			t.Errorf("ParseCPUList(%q): no error", in)
		}
	}
}
