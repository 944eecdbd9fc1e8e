//go:build soak

package soak

import (
	"crypto/rand"
	"encoding/hex"
	"net"
	"os"
	"testing"
	"time"
)

// needRoot skips t when the test does not run as root: the soaks make
// cgroups, network namespaces and mounts.
func needRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the soak makes cgroups, network namespaces and mounts")
	}
}

// poll calls cond every 20 ms until it holds (true) or timeout passes
// (false).
func poll(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// eventually is poll that fails the test, naming what it waited for.
func eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	if !poll(timeout, cond) {
		t.Fatalf("timed out after %s waiting for %s", timeout, what)
	}
}

// freePort returns host:port of a TCP port free on host right now.
func freePort(t testing.TB, host string) string {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatalf("free port on %s: %v", host, err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// randHex is n random bytes in hex: unique names for cgroups, clusters,
// links and namespaces of one run.
func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
