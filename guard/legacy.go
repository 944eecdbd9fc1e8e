package guard

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"
)

// A guard of the previous release serves two sockets and two protocols:
// the deadlines on <data_dir>/guard.sock in 16-byte packets (version 1,
// below), the runs on <data_dir>/guard-runs.sock in this protocol's JSON
// messages without hello, deadline and release. It is not re-executed on
// an upgrade, so an agent of this release that finds one (something
// listens on its runs socket, where a guard of this release never
// listens) talks to it that way until it exits: the agent's side only,
// which goes when no such guard can run any more.

// legacyRunsSocketPath is the runs socket of a guard of the previous
// release: <data_dir>/guard-runs.sock.
func legacyRunsSocketPath(dataDir string) string { return filepath.Join(dataDir, "guard-runs.sock") }

// v1Version is the version every packet of the previous release's
// deadline protocol carries.
const v1Version = 1

// v1Size is the size of every packet, bytes: one SOCK_SEQPACKET packet
// each (unix(7): a packet is read whole or not at all).
const v1Size = 16

// kind is a version 1 packet's type.
type kind uint8

// Version 1 kinds. Each packet is [version u8, kind u8, 6 zero bytes,
// value u64 little-endian].
const (
	// kindHello opens a connection both ways: the agent sends its pid,
	// the guard answers with its own.
	kindHello kind = 1
	// kindDeadline is the agent's fencing deadline, CLOCK_BOOTTIME
	// nanoseconds as the guard reads that clock (in its own time
	// namespace). The guard answers kindAck.
	kindDeadline kind = 2
	// kindRelease says the agent stopped every job: the guard answers
	// kindAck and exits without killing anything.
	kindRelease kind = 3
	// kindAck answers kindDeadline and kindRelease with their value.
	kindAck kind = 4
)

func (k kind) String() string {
	switch k {
	case kindHello:
		return "hello"
	case kindDeadline:
		return "deadline"
	case kindRelease:
		return "release"
	case kindAck:
		return "ack"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// message is one version 1 packet.
type message struct {
	kind  kind
	value uint64
}

func (m message) encode() []byte {
	b := make([]byte, v1Size)
	b[0], b[1] = v1Version, byte(m.kind)
	binary.LittleEndian.PutUint64(b[8:], m.value)
	return b
}

// decode parses one packet. Errors: a packet of another size, version or
// kind.
func decode(b []byte) (message, error) {
	if len(b) != v1Size {
		return message{}, fmt.Errorf("guard protocol 1: packet of %d bytes, want %d", len(b), v1Size)
	}
	if b[0] != v1Version {
		return message{}, fmt.Errorf("guard protocol 1: version %d, this side speaks %d", b[0], v1Version)
	}
	m := message{kind: kind(b[1]), value: binary.LittleEndian.Uint64(b[8:])}
	if m.kind < kindHello || m.kind > kindAck {
		return message{}, fmt.Errorf("guard protocol 1: unknown message %s", m.kind)
	}
	return m, nil
}

// dialV1 connects to the deadline socket of a guard of the previous
// release and exchanges hellos within answerTimeout; it returns the
// connection and the guard's pid. Errors: no guard listens, its peer is
// not root, or it does not answer (errHung).
func dialV1(path string) (*net.UnixConn, int, error) {
	nc, err := net.DialTimeout("unixpacket", path, answerTimeout)
	if err != nil {
		return nil, 0, fmt.Errorf("connect to the lease guard: %w", err)
	}
	conn := nc.(*net.UnixConn)
	if uid, err := peerUID(conn); err != nil || uid != 0 {
		conn.Close()
		return nil, 0, fmt.Errorf("connect to the lease guard %s: its peer is uid %d, not root (%v)", path, uid, err)
	}
	m, err := exchangeV1(conn, message{kind: kindHello, value: uint64(os.Getpid())}, kindHello, false)
	if err != nil {
		conn.Close()
		return nil, 0, fmt.Errorf("connect to the lease guard %s: %w: %w", path, errHung, err)
	}
	return conn, int(m.value), nil
}

// exchangeV1 sends m and waits, within answerTimeout, for an answer of
// kind want (with m's value when same). An answer to an earlier message
// that came too late is skipped. Errors: the write or read fails, or
// errNoAnswer when none came in time.
func exchangeV1(conn *net.UnixConn, m message, want kind, same bool) (message, error) {
	_ = conn.SetDeadline(time.Now().Add(answerTimeout))
	if _, err := conn.Write(m.encode()); err != nil {
		return message{}, fmt.Errorf("send %s: %w", m.kind, err)
	}
	buf := make([]byte, v1Size+1)
	for {
		n, err := conn.Read(buf)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return message{}, fmt.Errorf("%s: %w", m.kind, errNoAnswer)
		}
		if err != nil {
			return message{}, fmt.Errorf("wait for the answer to %s: %w", m.kind, err)
		}
		a, err := decode(buf[:n])
		if err != nil {
			return message{}, err
		}
		if a.kind == want && (!same || a.value == m.value) {
			return a, nil
		}
	}
}
