package replay

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berthd/berth/internal/testutil"
)

// followEnv names the shape, duration and seed a re-executed test binary
// follows (TestMain), "step,4s,1".
const followEnv = "BERTH_REPLAY_FOLLOW"

func TestMain(m *testing.M) {
	if v := os.Getenv(followEnv); v != "" {
		os.Exit(followChild(v))
	}
	os.Exit(testutil.CheckLeftBehind(m.Run()))
}

// followChild waits for a line on stdin (its parent has moved it into
// its cgroup by then), then follows the shape v names.
func followChild(v string) int {
	f := strings.Split(v, ",")
	d, err1 := time.ParseDuration(f[1])
	seed, err2 := strconv.ParseUint(f[2], 10, 64)
	s, err3 := New(f[0], d, seed)
	if err1 != nil || err2 != nil || err3 != nil {
		fmt.Fprintln(os.Stderr, v, err1, err2, err3)
		return 2
	}
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		return 2
	}
	if err := Follow(s, d); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// cgroupFiles is where a cgroup at rel keeps the figures the test reads:
// its processes, its memory watermark and its CPU time (ns or µs).
type cgroupFiles struct {
	dirs                  []string
	peak, cpu             string
	cpuInNanos, isUnified bool
}

// makeCgroup makes rel in the memory and CPU accounting hierarchies
// (v1 memory and cpuacct, or the cgroup2 tree with memory enabled).
func makeCgroup(t *testing.T, rel string) cgroupFiles {
	t.Helper()
	testutil.TrackCgroupRoot(t, rel)
	root := testutil.CgroupMount
	if _, err := os.Stat(filepath.Join(root, "cgroup.controllers")); err == nil {
		b, _ := os.ReadFile(filepath.Join(root, "cgroup.subtree_control"))
		if !strings.Contains(string(b), "memory") {
			t.Skip("cgroup2 root does not delegate the memory controller")
		}
		dir := filepath.Join(root, rel)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		return cgroupFiles{dirs: []string{dir}, peak: filepath.Join(dir, "memory.peak"), cpu: filepath.Join(dir, "cpu.stat"), isUnified: true}
	}
	mem, acct := filepath.Join(root, "memory", rel), filepath.Join(root, "cpuacct", rel)
	for _, d := range []string{mem, acct} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Skipf("no v1 memory and cpuacct hierarchies: %v", err)
		}
	}
	return cgroupFiles{dirs: []string{mem, acct}, peak: filepath.Join(mem, "memory.max_usage_in_bytes"), cpu: filepath.Join(acct, "cpuacct.usage"), cpuInNanos: true}
}

func (c cgroupFiles) cpuSeconds(t *testing.T) float64 {
	b, err := os.ReadFile(c.cpu)
	if err != nil {
		t.Fatal(err)
	}
	s := strings.TrimSpace(string(b))
	if c.isUnified {
		f := strings.Fields(s)
		s = f[1] // usage_usec is the first line
		v, _ := strconv.ParseFloat(s, 64)
		return v / 1e6
	}
	v, _ := strconv.ParseFloat(s, 64)
	return v / 1e9
}

// A process following a shape is seen by the kernel as the shape: its
// cgroup's watermark is the shape's peak (plus the Go runtime's few MiB)
// and its CPU time the shape's work.
func TestFollowInCgroup(t *testing.T) {
	testutil.NeedRoot(t)
	const d = 4 * time.Second
	s, _ := New("step", d, 1)
	cg := makeCgroup(t, fmt.Sprintf("berth-test-follow-%d", os.Getpid()))
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), followEnv+"=step,"+d.String()+",1")
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for _, dir := range cg.dirs {
		if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0); err != nil {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatal(err)
		}
	}
	in.Write([]byte("go\n"))
	if err := cmd.Wait(); err != nil {
		t.Fatalf("follower: %v", err)
	}
	b, err := os.ReadFile(cg.peak)
	if err != nil {
		t.Fatal(err)
	}
	peak, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	t.Logf("watermark %.1f MiB for a shape of %.1f MiB", float64(peak)/mib, float64(s.MaxMemory(d))/mib)
	if want := s.MaxMemory(d); peak < want || peak > want+24<<20 {
		t.Errorf("watermark %.1f MiB, want the shape's %.1f MiB plus at most 24 MiB of runtime", float64(peak)/mib, float64(want)/mib)
	}
	// Work: 0.1 core for 2 s, then 0.4 core for 2 s. A loaded host may
	// leave some of it undone at the end, never add to it (beyond the
	// runtime's own threads).
	work := 0.0
	for tt := time.Duration(0); tt < d; tt += slice {
		work += s.CPU(tt) * slice.Seconds()
	}
	got := cg.cpuSeconds(t)
	t.Logf("CPU time %.3f s for %.3f s of work", got, work)
	if got < 0.6*work || got > work+0.3 {
		t.Errorf("CPU time %.2f s, want about the shape's %.2f s", got, work)
	}
}
