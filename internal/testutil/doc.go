// Package testutil holds the helpers berth's tests share across packages.
//
// Among them: skipping without root, polling a condition with a deadline, a free
// loopback port, a goroutine-safe buffer, the host's disk for io tests,
// loop devices, a TCP proxy that can cut a connection, and a certificate
// authority that issues server and client certificates. It is imported by
// _test.go files only.
package testutil
