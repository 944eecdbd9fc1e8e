package guard

import (
	"encoding/json"
	"fmt"
	"net"
	"path/filepath"
	"sync"
	"time"

	"github.com/berthd/berth/worker"
	"golang.org/x/sys/unix"
)

// RunsSocketPath is the guard's socket for the jobs it starts and holds
// for agents: <data_dir>/guard-runs.sock (beside SocketPath, which
// carries the deadlines).
func RunsSocketPath(dataDir string) string { return filepath.Join(dataDir, "guard-runs.sock") }

// maxRunMsg is the largest message on the runs socket, bytes: one
// SOCK_SEQPACKET packet each, JSON. A spawn request carries the job's
// argv and environment.
const maxRunMsg = 128 << 10

// Operations on the runs socket. Descriptors travel as SCM_RIGHTS
// (unix(7)) with the message that names them.
const (
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
	// opList (agent): send every run held.
	opList = "list"
	// opHeld (guard): one run held, Exited and Status if it has ended;
	// descriptor: its log pipe's read end. opListed ends the list.
	opHeld   = "held"
	opListed = "listed"
)

// runMsg is one message on the runs socket.
type runMsg struct {
	Op     string       `json:"op"`
	Seq    uint64       `json:"seq,omitempty"`
	Exec   *worker.Exec `json:"exec,omitempty"`
	Run    *worker.Run  `json:"run,omitempty"`
	Exited bool         `json:"exited,omitempty"`
	Status uint32       `json:"status,omitempty"`
	Error  string       `json:"error,omitempty"`
}

// msgConn is one end of a runs connection: whole messages with their
// descriptors; writes are serialised.
type msgConn struct {
	c  *net.UnixConn
	mu sync.Mutex // writes
}

// send writes m with fds (duplicated into the peer by the kernel; the
// caller keeps its own). Errors: a message over maxRunMsg; the write's.
func (mc *msgConn) send(m runMsg, fds ...int) error {
	b, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("guard protocol: encode %s: %w", m.Op, err)
	}
	if len(b) > maxRunMsg {
		return fmt.Errorf("guard protocol: %s of %d bytes exceeds %d (the job's argv and environment)", m.Op, len(b), maxRunMsg)
	}
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	mc.mu.Lock()
	defer mc.mu.Unlock()
	_ = mc.c.SetWriteDeadline(time.Now().Add(answerTimeout))
	if _, _, err := mc.c.WriteMsgUnix(b, oob, nil); err != nil {
		return fmt.Errorf("guard protocol: send %s: %w", m.Op, err)
	}
	return nil
}

// recv reads one message and the descriptors that came with it (each
// close-on-exec, owned by the caller; raw, so that no os.File changes
// their blocking mode, which the log pipe's readers share). Only one
// goroutine reads.
func (mc *msgConn) recv(buf, oob []byte) (runMsg, []int, error) {
	n, oobn, _, _, err := mc.c.ReadMsgUnix(buf, oob)
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
	var m runMsg
	if err := json.Unmarshal(buf[:n], &m); err != nil {
		closeAll(files)
		return runMsg{}, nil, fmt.Errorf("guard protocol: decode a message of %d bytes: %w", n, err)
	}
	return m, files, nil
}

func closeAll(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// newRecvBuffers returns a message buffer and a control buffer for recv
// (room for 4 descriptors).
func newRecvBuffers() ([]byte, []byte) {
	return make([]byte, maxRunMsg+1), make([]byte, unix.CmsgSpace(4*4))
}
