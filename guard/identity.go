package guard

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/berthd/berth/cgroup"
)

// ErrForeign marks a lease guard that serves another data_dir or
// cgroup_root than the agent's: its runs live in another cgroup root, or
// its deadline would kill the agent's jobs (docs/live-restart.md, "One
// agent per data_dir and cgroup_root").
var ErrForeign = errors.New("one agent per data_dir and cgroup_root")

// served is what a guard process serves: the --data-dir and
// --cgroup-root its agent started it with (spawn), read from its argv.
type served struct {
	pid                 int
	dataDir, cgroupRoot string
}

// servedBy reads what the guard pid serves from /proc/PID/cmdline (the
// argument vector spawn gave it, of any release); ok is false when the
// process is gone or is no guard (no --data-dir: a guard run in a test's
// own process, or another program).
func servedBy(pid int) (served, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return served{}, false
	}
	return parseServed(pid, b)
}

// parseServed is servedBy of the NUL-separated argv b of process pid.
func parseServed(pid int, b []byte) (served, bool) {
	s := served{pid: pid}
	found := false
	args := strings.Split(string(bytes.TrimRight(b, "\x00")), "\x00")
	for i := 0; i < len(args); i++ {
		name, value, eq := strings.Cut(args[i], "=")
		if name != "--data-dir" && name != "--cgroup-root" {
			continue
		}
		if !eq {
			if i+1 >= len(args) {
				break
			}
			i++
			value = args[i]
		}
		if name == "--data-dir" {
			s.dataDir, found = value, true
		} else {
			s.cgroupRoot = value
		}
	}
	return s, found
}

// sameDir reports whether the paths a and b name the same directory
// (cleaned, or the same inode).
func sameDir(a, b string) bool {
	if filepath.Clean(a) == filepath.Clean(b) {
		return true
	}
	sa, err1 := os.Stat(a)
	sb, err2 := os.Stat(b)
	return err1 == nil && err2 == nil && os.SameFile(sa, sb)
}

// sameRoot reports whether two cgroup_root values name the same cgroup
// ("a", "/a" and "a/" do).
func sameRoot(a, b string) bool { return filepath.Clean("/"+a) == filepath.Clean("/"+b) }

// checkServes refuses the guard pid that listens on the agent's socket
// when it serves another cgroup_root (an agent started with a new
// cgroup_root while the guard of its data_dir holds the earlier agent's
// runs in the old one: docs/cases.md C31). Adopting those runs would
// report cgroups where they are not, and starting new ones would run
// them twice. Errors: ErrForeign, wrapped with what to do.
func (o Options) checkServes(pid int) error {
	s, ok := servedBy(pid)
	if !ok || sameRoot(s.cgroupRoot, o.CgroupRoot) {
		return nil
	}
	return fmt.Errorf("the lease guard of data_dir %s (pid %d) serves cgroup_root %q, not this agent's cgroup_root %q: "+
		"the runs it holds live there. Start the agent with cgroup_root %q to take them over (and stop it cleanly before changing cgroup_root), "+
		"or let that guard kill them at its deadline (one session_ttl after the last agent's death) and start again: %w",
		o.DataDir, pid, s.cgroupRoot, o.CgroupRoot, s.cgroupRoot, ErrForeign)
}

// CheckRoot refuses a cgroup root whose guard leaf (<root>/guard) holds
// a guard of another data_dir than dataDir: that guard's agent was
// killed and its jobs still run under the root, and at its deadline it
// kills every job under <root>/jobs and <root>/groups, this agent's
// too (docs/cases.md C32). A leaf that does not exist, is empty, or
// holds only guards of dataDir passes. The agent calls it before it
// touches the root; the guard before it enters the leaf.
//
// Errors: ErrForeign, wrapped with both data_dirs and what to do.
func CheckRoot(h *cgroup.Hierarchy, dataDir string) error {
	g, err := h.Load(CgroupLeaf)
	if err != nil {
		return nil // no leaf: no guard
	}
	pids, err := g.Pids()
	if err != nil {
		return nil // gone meanwhile
	}
	for _, pid := range pids {
		s, ok := servedBy(pid)
		if !ok || pid == os.Getpid() || sameDir(s.dataDir, dataDir) {
			continue
		}
		return fmt.Errorf("cgroup_root %q holds the lease guard (pid %d) of data_dir %s, not this agent's data_dir %s: "+
			"that agent's jobs still run under the root, and its guard kills every job there at its deadline. "+
			"Start the agent of data_dir %s again to take its jobs over, give this agent another cgroup_root, "+
			"or let that guard kill its jobs (one session_ttl after its agent's death) and start again: %w",
			h.Root(), pid, s.dataDir, dataDir, s.dataDir, ErrForeign)
	}
	return nil
}

// Check refuses, before the agent touches its cgroup root, a lease guard
// that listens on opts.DataDir's socket, guard.sock (a guard of this
// release or the previous one: both listen there), and serves another
// cgroup_root (checkServes). It only connects and reads the listener's
// credentials: the guard, which hears no hello, keeps its agent and its
// deadline. No guard listening passes. Errors: ErrForeign, wrapped with
// what to do.
func Check(ctx context.Context, opts Options) error {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unixpacket", SocketPath(opts.DataDir))
	if err != nil {
		return nil // no guard listens: nothing is held
	}
	cred, err := peerCred(nc.(*net.UnixConn))
	nc.Close()
	if err != nil {
		return nil // dial's own checks tell the rest
	}
	return opts.checkServes(int(cred.Pid))
}
