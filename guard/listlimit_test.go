package guard

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/berthd/berth/internal/testutil"
	"golang.org/x/sys/unix"
)

// A guard near its RLIMIT_NOFILE (one descriptor per run held, room for
// fewer than one more per run) still lists every run it holds: the list
// copies the runs' log pipes a batch at a time. Before, it copied them
// all at once, left the runs past the limit out (EMFILE), and the next
// agent started those jobs again beside them (seen at 10,000 jobs under
// a limit of 20,000).
func TestListNearTheDescriptorLimitHoldsEveryRun(t *testing.T) {
	w := newWorld(t)
	c, _ := w.connect()
	c.Deadline(time.Now().Add(time.Minute))
	w.acked(c)
	const n = 200
	for i := range n {
		if _, err := spawnSleeper(w, c, fmt.Sprintf("j%d", i)); err != nil {
			t.Fatalf("spawn %d: %v", i, err)
		}
	}
	// Room for half a copy per run beyond what the guard holds now.
	fds, err := os.ReadDir("/proc/" + strconv.Itoa(c.PID()) + "/fd")
	if err != nil {
		t.Fatal(err)
	}
	lim := unix.Rlimit{Cur: uint64(len(fds) + n/2), Max: uint64(len(fds) + n/2)}
	if err := unix.Prlimit(c.PID(), unix.RLIMIT_NOFILE, &lim, nil); err != nil {
		t.Fatalf("prlimit of the guard: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	held, err := c.Held(ctx)
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	for _, h := range held {
		h.Logr.Close()
	}
	if len(held) != n {
		t.Fatalf("the guard listed %d of the %d runs it holds, with %d descriptors open and a limit of %d", len(held), n, len(fds), lim.Cur)
	}
}

// The guard lists its runs in batches to an agent that asks for them
// (opList with Batch: opHeldBatch packets, each with its runs' log pipes
// in order) and one run a packet to an agent of an earlier release (no
// Batch: opHeld), and both lists name the same runs; a client lists
// them all, each with its log pipe. At 10,000 runs the list was 10,000
// packets, half a second of an adoption.
func TestListBatchedAndRunByRun(t *testing.T) {
	w := newWorld(t)
	c, _ := w.connect()
	c.Deadline(time.Now().Add(time.Minute))
	w.acked(c)
	const n = maxHeldBatch + 6 // two batches
	for i := range n {
		if _, err := spawnSleeper(w, c, fmt.Sprintf("j%d", i)); err != nil {
			t.Fatalf("spawn %d: %v", i, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	held, err := c.Held(ctx)
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	want := map[string]bool{}
	for _, h := range held {
		var st unix.Stat_t
		if err := unix.Fstat(int(h.Logr.Fd()), &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFIFO {
			t.Errorf("run %s: its log pipe is not a pipe (mode %o): %v", h.ID, st.Mode, err)
		}
		h.Logr.Close()
		want[h.ID] = true
	}
	if len(want) != n {
		t.Fatalf("the client listed %d distinct runs of %d", len(want), n)
	}

	for _, batch := range []int{0, maxHeldBatch} {
		conn, err := net.Dial("unixpacket", SocketPath(w.dataDir))
		if err != nil {
			t.Fatal(err)
		}
		mc := &msgConn{c: conn.(*net.UnixConn)}
		_ = conn.SetReadDeadline(time.Now().Add(testutil.Deadline(20 * time.Second)))
		buf, oob := newRecvBuffers()
		if err := mc.send(runMsg{Op: opHello, Version: Version, PID: os.Getpid()}); err != nil {
			t.Fatal(err)
		}
		if a, _, err := mc.recv(buf, oob); err != nil || a.Op != opHello || a.Error != "" {
			t.Fatalf("hello answered %+v, %v", a, err)
		}
		if err := mc.send(runMsg{Op: opList, Batch: batch}); err != nil {
			t.Fatal(err)
		}
		got, packets := map[string]bool{}, 0
		for {
			m, fds, err := mc.recv(buf, oob)
			if err != nil {
				t.Fatalf("batch %d: after %d packets: %v", batch, packets, err)
			}
			closeAll(fds)
			if m.Op == opListed {
				break
			}
			packets++
			var runs []heldEntry
			switch {
			case batch == 0 && m.Op == opHeld && m.Run != nil:
				runs = []heldEntry{{Run: *m.Run}}
			case batch > 0 && m.Op == opHeldBatch:
				runs = m.Held
			default:
				t.Fatalf("batch %d: packet %d is %q (run %v, %d runs)", batch, packets, m.Op, m.Run, len(m.Held))
			}
			if len(fds) != len(runs) || len(runs) > maxHeldBatch {
				t.Fatalf("batch %d: packet %d: %d runs with %d descriptors", batch, packets, len(runs), len(fds))
			}
			for _, r := range runs {
				got[r.Run.ID] = true
			}
		}
		conn.Close()
		if len(got) != n || packets != map[int]int{0: n, maxHeldBatch: 2}[batch] {
			t.Errorf("batch %d: %d runs in %d packets, want %d", batch, len(got), packets, n)
		}
		for id := range want {
			if !got[id] {
				t.Errorf("batch %d: run %s not listed", batch, id)
			}
		}
	}
}
