package guard

import (
	"encoding/binary"
	"fmt"
)

// Version is the protocol version every message carries. A peer that
// reads another version closes the connection.
const Version = 1

// msgSize is the size of every message, bytes: one SOCK_SEQPACKET packet
// each (unix(7): a packet is read whole or not at all).
const msgSize = 16

// kind is a message's type.
type kind uint8

// Message kinds. Each is [version u8, kind u8, 6 zero bytes, value u64
// little-endian].
const (
	// kindHello opens a connection both ways: the agent sends its pid,
	// the guard answers with its own.
	kindHello kind = 1
	// kindDeadline is the agent's fencing deadline, CLOCK_BOOTTIME of the
	// initial time namespace, nanoseconds (internal/boottime): the guard
	// kills every job once it passes without a later one. The guard
	// answers kindAck.
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

// message is one packet.
type message struct {
	kind  kind
	value uint64
}

func (m message) encode() []byte {
	b := make([]byte, msgSize)
	b[0], b[1] = Version, byte(m.kind)
	binary.LittleEndian.PutUint64(b[8:], m.value)
	return b
}

// decode parses one packet. Errors: a packet of another size, version or
// kind.
func decode(b []byte) (message, error) {
	if len(b) != msgSize {
		return message{}, fmt.Errorf("guard protocol: packet of %d bytes, want %d", len(b), msgSize)
	}
	if b[0] != Version {
		return message{}, fmt.Errorf("guard protocol: version %d, this side speaks %d", b[0], Version)
	}
	m := message{kind: kind(b[1]), value: binary.LittleEndian.Uint64(b[8:])}
	if m.kind < kindHello || m.kind > kindAck {
		return message{}, fmt.Errorf("guard protocol: unknown message %s", m.kind)
	}
	return m, nil
}
