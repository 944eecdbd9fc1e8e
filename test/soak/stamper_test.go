//go:build soak

package soak

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The stamper is this test binary run as a job (TestMain sees stamperEnv):
// every stampEvery it appends "<BERTH_CGROUP> <pid> <unix-ns>" to
// <dir>/<BERTH_JOB_ID>.log with one write(2) in O_APPEND, so lines of
// several workers never interleave. <BERTH_CGROUP> names the agent (each
// agent has its own cgroup_root). On SIGTERM it writes lingerEnv more
// stamps, then exits 0: a graceful stop takes visible time in which no
// other worker of the job may run. SIGKILL (fencing) stops it at once.
const (
	stamperEnv = "SOAK_STAMPER"      // the directory of the stamp files
	lingerEnv  = "SOAK_STAMP_LINGER" // stamps written after SIGTERM
	stampEvery = 10 * time.Millisecond
)

func runStamper() int {
	dir, job, cg := os.Getenv(stamperEnv), os.Getenv("BERTH_JOB_ID"), os.Getenv("BERTH_CGROUP")
	linger, _ := strconv.Atoi(os.Getenv(lingerEnv))
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	f, err := os.OpenFile(filepath.Join(dir, job+".log"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, "stamper:", err)
		return 1
	}
	pid := os.Getpid()
	stamp := func() {
		_, _ = f.Write([]byte(fmt.Sprintf("%s %d %d\n", cg, pid, time.Now().UnixNano())))
	}
	tick := time.NewTicker(stampEvery)
	for {
		stamp()
		select {
		case <-tick.C:
		case <-term:
			for i := 0; i < linger; i++ {
				<-tick.C
				stamp()
			}
			return 0
		}
	}
}

// stamperCommand is the TOML command and env of a stamping job writing to
// dir, lingering linger stamps after SIGTERM.
func stamperCommand(dir string, linger int) string {
	return fmt.Sprintf("command = [%q]\n  env = { %s = %q, %s = \"%d\" }", selfBin, stamperEnv, dir, lingerEnv, linger)
}

// stamp is one line of a stamp file.
type stamp struct {
	cgroup string // BERTH_CGROUP of the worker: names its agent
	pid    int
	ns     int64 // unix nanoseconds
}

// readStamps parses a stamp file; a malformed line is an error, except a
// last line without its newline (a worker killed mid-write).
func readStamps(file string) ([]stamp, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []stamp
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		fs := strings.Fields(sc.Text())
		if len(fs) != 3 {
			return nil, fmt.Errorf("%s:%d: malformed stamp %q", file, n, sc.Text())
		}
		pid, err1 := strconv.Atoi(fs[1])
		ns, err2 := strconv.ParseInt(fs[2], 10, 64)
		if err := errors.Join(err1, err2); err != nil {
			return nil, fmt.Errorf("%s:%d: malformed stamp %q: %w", file, n, sc.Text(), err)
		}
		out = append(out, stamp{cgroup: fs[0], pid: pid, ns: ns})
	}
	return out, sc.Err()
}

// interval is the life of one worker process as its own stamps show it.
type interval struct {
	cgroup      string
	pid         int
	first, last int64 // unix ns
	n           int
}

func (iv interval) String() string {
	return fmt.Sprintf("%s pid %d [%s .. %s] (%d stamps)", iv.cgroup, iv.pid,
		time.Unix(0, iv.first).Format("15:04:05.000000"), time.Unix(0, iv.last).Format("15:04:05.000000"), iv.n)
}

// intervalsOf groups stamps by worker (cgroup, pid) into [first, last]
// intervals sorted by first stamp.
func intervalsOf(ss []stamp) []interval {
	type key struct {
		cg  string
		pid int
	}
	m := map[key]*interval{}
	for _, s := range ss {
		k := key{s.cgroup, s.pid}
		iv, ok := m[k]
		if !ok {
			m[k] = &interval{cgroup: s.cgroup, pid: s.pid, first: s.ns, last: s.ns, n: 1}
			continue
		}
		iv.first, iv.last, iv.n = min(iv.first, s.ns), max(iv.last, s.ns), iv.n+1
	}
	out := make([]interval, 0, len(m))
	for _, iv := range m {
		out = append(out, *iv)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].first < out[j].first })
	return out
}

// overlaps returns every pair of intervals of different workers that share
// a moment (touching counts).
func overlaps(ivs []interval) [][2]interval {
	var out [][2]interval
	for i := range ivs {
		for j := i + 1; j < len(ivs); j++ {
			if ivs[j].first <= ivs[i].last {
				out = append(out, [2]interval{ivs[i], ivs[j]})
			}
		}
	}
	return out
}
