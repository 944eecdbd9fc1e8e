package guard

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/berthd/berth/worker"
	"golang.org/x/sys/unix"
)

// SocketPath is the guard's one socket for data_dir: <data_dir>/guard.sock.
func SocketPath(dataDir string) string { return filepath.Join(dataDir, "guard.sock") }

// Version is the protocol version both sides put in their hello. A guard
// closes a connection whose hello carries another.
const Version = 2

// maxRunMsg is the largest message sent as one SOCK_SEQPACKET packet,
// bytes; a larger one (a spawn with a long argv or environment) travels
// in a memfd (memfd_create(2)) sent with an opMemfd packet. maxMemfdMsg
// bounds that.
const (
	maxRunMsg   = 64 << 10
	maxMemfdMsg = 64 << 20
)

// Operations on the socket. Descriptors travel as SCM_RIGHTS (unix(7))
// with the message that names them. A request that is answered carries a
// Seq, which its answer repeats.
const (
	// opHello (agent) opens every connection: Version and the agent's
	// PID. The guard answers opHello with its own; the newest connection
	// that said hello is the agent's, and a guard closes an older one
	// after opReplaced. Nothing else is accepted before it.
	opHello = "hello"
	// opReplaced (guard): a newer connection said hello; this one is
	// closed.
	opReplaced = "replaced"
	// opDeadline (agent): the fencing deadline, Deadline: the guard kills
	// every job once it passes without a later one. Answered by opAck.
	opDeadline = "deadline"
	// opRelease (agent): the agent stopped every job; the guard answers
	// opAck and exits without killing anything.
	opRelease = "release"
	// opAck (guard) answers opDeadline and opRelease, with their Deadline.
	opAck = "ack"
	// opSpawn (agent): start Exec for Run in Run.Cgroup; descriptors: the
	// log pipe's write end (the job's stdout and stderr) and read end
	// (kept for a later agent). Answered by opSpawned with the same Seq.
	opSpawn = "spawn"
	// opSpawned (guard): Run filled in (ID, PID, StartTicks, Leaf), or
	// Error.
	opSpawned = "spawned"
	// opExited (guard): run Run.ID's main process ended with Status (a
	// wait(2) status). Sent to the connected agent; kept until forgotten.
	opExited = "exited"
	// opForget (agent): the exit of Run.ID was handled, or the run is not
	// adopted: the guard drops its record and its log pipe.
	opForget = "forget"
	// opList (agent): send every run held. Batch, when set, is the most
	// runs the agent takes in one opHeldBatch; a guard of a release
	// before it ignores the field and answers with opHeld only.
	opList = "list"
	// opHeld (guard): one run held, Exited and Status if it has ended;
	// descriptor: its log pipe's read end. opListed ends the list.
	opHeld   = "held"
	opListed = "listed"
	// opHeldBatch (guard, to an opList with Batch): Held, at most Batch
	// runs; descriptors: their log pipes' read ends, in Held's order.
	opHeldBatch = "held-batch"
	// opMemfd (either side): the message is in the first descriptor, a
	// memfd; the other descriptors are the message's own.
	opMemfd = "memfd"
)

// runMsg is one message on the socket.
type runMsg struct {
	Op  string `json:"op"`
	Seq uint64 `json:"seq,omitempty"`
	// Version and PID, in a hello: the protocol and the sender's pid.
	Version int `json:"version,omitempty"`
	PID     int `json:"pid,omitempty"`
	// Deadline, in a deadline and its ack: CLOCK_BOOTTIME of the initial
	// time namespace, nanoseconds (package internal/boottime), a clock
	// domain the agent and the guard share in whatever time namespace
	// each runs.
	Deadline int64        `json:"deadline_boottime_ns,omitempty"`
	Exec     *worker.Exec `json:"exec,omitempty"`
	Run      *worker.Run  `json:"run,omitempty"`
	Exited   bool         `json:"exited,omitempty"`
	Status   uint32       `json:"status,omitempty"`
	Error    string       `json:"error,omitempty"`
	// Transient, with Error on a spawn's answer: the start failed for a
	// reason that passes (worker.TransientStart), and may be tried again.
	Transient bool `json:"transient,omitempty"`
	// Batch, in a list: the most runs the agent takes in one opHeldBatch
	// (at most maxHeldBatch); Held, in an opHeldBatch: the runs.
	Batch int         `json:"batch,omitempty"`
	Held  []heldEntry `json:"held,omitempty"`
}

// heldEntry is one run of an opHeldBatch: what an opHeld carries.
type heldEntry struct {
	Run    worker.Run `json:"run"`
	Exited bool       `json:"exited,omitempty"`
	Status uint32     `json:"status,omitempty"`
}

// maxHeldBatch is the most runs an opHeldBatch carries, and so the most
// descriptors a message brings besides a memfd: a list of 10,000 runs
// is 157 packets instead of 10,000. The kernel takes at most 253
// descriptors in one SCM_RIGHTS message (SCM_MAX_FD, unix(7)).
const maxHeldBatch = 64

// msgConn is one end of a connection: whole messages with their
// descriptors; writes are serialised.
type msgConn struct {
	c *net.UnixConn
	// timeout bounds one write (a peer that does not read); 0:
	// answerTimeout.
	timeout time.Duration
	mu      sync.Mutex // writes
	// received counts the packets the reader found on the socket, each
	// before it reads it (await); handled those it has handled. Only the
	// guard's reader keeps them (pending).
	received, handled atomic.Uint64
}

// await waits until a packet (or the end of the connection) is there to
// be read, without reading it (recvmsg(2) MSG_PEEK). Errors: the socket's.
func (mc *msgConn) await() error {
	raw, err := mc.c.SyscallConn()
	if err != nil {
		return err
	}
	var perr error
	err = raw.Read(func(fd uintptr) bool {
		var b [1]byte
		for {
			_, _, _, _, perr = unix.Recvmsg(int(fd), b[:], nil, unix.MSG_PEEK|unix.MSG_DONTWAIT)
			if perr != unix.EINTR {
				return perr != unix.EAGAIN
			}
		}
	})
	if err != nil {
		return err
	}
	return perr
}

// pending reports whether the peer sent a message that the reader has
// not handled yet: one still queued on the socket (SIOCINQ, unix(7): the
// size of the next packet), or one read and not yet handled. The queue
// is read before the counts, and the reader counts a packet before it
// takes it off the queue (await), so no message is missed between the
// two.
func (mc *msgConn) pending() bool {
	raw, err := mc.c.SyscallConn()
	if err != nil {
		return false
	}
	inq := 0
	if raw.Control(func(fd uintptr) { inq, _ = unix.IoctlGetInt(int(fd), unix.SIOCINQ) }) != nil {
		return false
	}
	return inq > 0 || mc.received.Load() != mc.handled.Load()
}

// localError is a send that failed on this side, before anything was
// written: the connection is as good as before.
type localError struct{ error }

func (e localError) Unwrap() error { return e.error }

// send writes m with fds (duplicated into the peer by the kernel; the
// caller keeps its own); a message over maxRunMsg goes in a memfd.
// Errors: a localError when m cannot be encoded or put in a memfd; the
// write's otherwise (the connection is broken).
func (mc *msgConn) send(m runMsg, fds ...int) error {
	b, err := json.Marshal(m)
	if err != nil {
		return localError{fmt.Errorf("guard protocol: encode %s: %w", m.Op, err)}
	}
	if len(b) > maxRunMsg {
		if len(b) > maxMemfdMsg {
			return localError{fmt.Errorf("guard protocol: %s of %d bytes exceeds %d (the job's argv and environment)", m.Op, len(b), maxMemfdMsg)}
		}
		mfd, err := memfdOf(b)
		if err != nil {
			return localError{fmt.Errorf("guard protocol: %s of %d bytes: %w", m.Op, len(b), err)}
		}
		defer unix.Close(mfd)
		b, _ = json.Marshal(runMsg{Op: opMemfd})
		fds = append([]int{mfd}, fds...)
	}
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	timeout := mc.timeout
	if timeout == 0 {
		timeout = answerTimeout
	}
	mc.mu.Lock()
	defer mc.mu.Unlock()
	_ = mc.c.SetWriteDeadline(time.Now().Add(timeout))
	if _, _, err := mc.c.WriteMsgUnix(b, oob, nil); err != nil {
		return fmt.Errorf("guard protocol: send %s: %w", m.Op, err)
	}
	return nil
}

// memfdOf returns a memfd (close-on-exec) holding b, read from offset 0.
func memfdOf(b []byte) (int, error) {
	fd, err := unix.MemfdCreate("berth-guard-message", unix.MFD_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("memfd_create: %w", err)
	}
	for off := 0; off < len(b); {
		n, err := unix.Pwrite(fd, b[off:], int64(off))
		if err != nil {
			unix.Close(fd)
			return -1, fmt.Errorf("write memfd: %w", err)
		}
		off += n
	}
	return fd, nil
}

// readMemfd reads the whole message a memfd holds, at most maxMemfdMsg.
func readMemfd(fd int) ([]byte, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, err
	}
	if st.Size > maxMemfdMsg {
		return nil, fmt.Errorf("memfd message of %d bytes exceeds %d", st.Size, maxMemfdMsg)
	}
	b := make([]byte, st.Size)
	for off := 0; off < len(b); {
		n, err := unix.Pread(fd, b[off:], int64(off))
		if err != nil {
			return nil, err
		}
		if n == 0 {
			return nil, fmt.Errorf("memfd message: %d of %d bytes", off, len(b))
		}
		off += n
	}
	return b, nil
}

// recv reads one message and the descriptors that came with it (each
// close-on-exec, owned by the caller; raw, so that no os.File changes
// their blocking mode, which the log pipe's readers share). Only one
// goroutine reads.
func (mc *msgConn) recv(buf, oob []byte) (runMsg, []int, error) {
	n, oobn, flags, _, err := mc.c.ReadMsgUnix(buf, oob)
	if err != nil {
		return runMsg{}, nil, err
	}
	var files []int
	if oobn > 0 {
		scms, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil {
			return runMsg{}, nil, fmt.Errorf("guard protocol: control message: %w", err)
		}
		for _, scm := range scms {
			fds, err := unix.ParseUnixRights(&scm)
			if err != nil {
				continue
			}
			for _, fd := range fds {
				unix.CloseOnExec(fd)
				files = append(files, fd)
			}
		}
	}
	if flags&unix.MSG_CTRUNC != 0 {
		closeAll(files)
		return runMsg{}, nil, fmt.Errorf("guard protocol: a message brought more descriptors than the %d bytes of control buffer hold (MSG_CTRUNC)", len(oob))
	}
	var m runMsg
	if err := json.Unmarshal(buf[:n], &m); err != nil {
		closeAll(files)
		return runMsg{}, nil, fmt.Errorf("guard protocol: decode a message of %d bytes: %w", n, err)
	}
	if m.Op == opMemfd {
		if len(files) == 0 {
			return runMsg{}, nil, errors.New("guard protocol: memfd message without its memfd")
		}
		b, err := readMemfd(files[0])
		unix.Close(files[0])
		files = files[1:]
		if err == nil {
			m = runMsg{}
			err = json.Unmarshal(b, &m)
		}
		if err != nil {
			closeAll(files)
			return runMsg{}, nil, fmt.Errorf("guard protocol: memfd message: %w", err)
		}
	}
	return m, files, nil
}

func closeAll(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// newRecvBuffers returns a message buffer and a control buffer for recv
// (room for an opHeldBatch's descriptors and a memfd: a control message
// cut short, MSG_CTRUNC, would lose descriptors).
func newRecvBuffers() ([]byte, []byte) {
	return make([]byte, maxRunMsg+1), make([]byte, unix.CmsgSpace((maxHeldBatch+1)*4))
}
