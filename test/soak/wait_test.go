//go:build soak

package soak

import (
	"crypto/rand"
	"encoding/hex"
	"net"
	"testing"
)

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
