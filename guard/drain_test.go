package guard

import (
	"net"
	"os"
	"testing"
	"time"

	"github.com/berthd/berth/internal/boottime"
	"github.com/berthd/berth/internal/testutil"
	"golang.org/x/sys/unix"
)

// A guard stopped past its deadline and then resumed reads what the agent
// sent meanwhile before it kills: a newer deadline waiting on its socket
// is held, and no job is killed.
func TestResumedGuardReadsNewerDeadlineBeforeKilling(t *testing.T) {
	w := newWorld(t)
	c, exited := w.connect() // starts the guard; replaced by the raw agent below
	defer c.Close()
	j := w.startJob("jobs/held", "exec sleep 1000")
	testutil.Eventually(t, 20*time.Second, "the job in its cgroup", func() bool { return len(w.pids(j)) == 1 })

	nc, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: SocketPath(w.dataDir), Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	agent := &msgConn{c: nc, timeout: 20 * time.Second}
	defer nc.Close()
	buf, oob := newRecvBuffers()
	recv := func(op string) runMsg {
		t.Helper()
		_ = nc.SetReadDeadline(time.Now().Add(testutil.Deadline(20 * time.Second)))
		for {
			m, fds, err := agent.recv(buf, oob)
			closeAll(fds)
			if err != nil {
				t.Fatalf("waiting for %s: %v", op, err)
			}
			if m.Op == op {
				return m
			}
		}
	}
	if err := agent.send(runMsg{Op: opHello, Seq: 1, Version: Version, PID: os.Getpid()}); err != nil {
		t.Fatal(err)
	}
	pid := recv(opHello).PID
	first := boottime.Now() + int64(time.Second)
	if err := agent.send(runMsg{Op: opDeadline, Seq: 2, Deadline: first}); err != nil {
		t.Fatal(err)
	}
	recv(opAck)

	stopGuard(t, pid)
	resumed := false
	defer func() {
		if !resumed {
			_ = unix.Kill(pid, unix.SIGCONT)
		}
	}()
	newer := boottime.Now() + int64(time.Hour)
	if err := agent.send(runMsg{Op: opDeadline, Seq: 3, Deadline: newer}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "the first deadline passed while the guard is stopped", func() bool {
		return boottime.Now() > first+int64(500*time.Millisecond)
	})
	if err := unix.Kill(pid, unix.SIGCONT); err != nil {
		t.Fatal(err)
	}
	resumed = true
	if a := recv(opAck); a.Deadline != newer {
		t.Fatalf("the resumed guard acknowledged deadline %d, want the newer %d", a.Deadline, newer)
	}
	// The guard's kill would have come before that answer; to be sure,
	// the guard's next look at its clock (maxWait) finds the newer one.
	if err := agent.send(runMsg{Op: opDeadline, Seq: 4, Deadline: newer}); err != nil {
		t.Fatal(err)
	}
	recv(opAck)
	select {
	case <-exited:
		t.Fatal("the resumed guard exited")
	default:
	}
	if left := alive(w.pids(j)); len(left) != 1 {
		t.Fatalf("job processes alive after the resume: %v, want its one", left)
	}
	if err := agent.send(runMsg{Op: opRelease, Seq: 5}); err != nil {
		t.Fatal(err)
	}
	recv(opAck)
	select {
	case <-exited:
	case <-time.After(testutil.Deadline(20 * time.Second)):
		t.Fatal("the released guard did not exit")
	}
}
