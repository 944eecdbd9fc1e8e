package guard

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

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
