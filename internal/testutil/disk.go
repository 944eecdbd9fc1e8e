package testutil

import (
	"os"
	"testing"
)

// RootDisk returns /dev/vda, the block device the example configuration's
// io limits name, or skips the test when this host has none.
func RootDisk(t testing.TB) string {
	t.Helper()
	if fi, err := os.Stat("/dev/vda"); err == nil && fi.Mode()&os.ModeDevice != 0 {
		return "/dev/vda"
	}
	t.Skip("skip: /dev/vda (the example's device) does not exist on this host")
	return ""
}
