package test

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berthd/berth/api"
	"github.com/berthd/berth/fencing"
	"github.com/berthd/berth/internal/testutil"
)

var berthBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "berth-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	berthBin = filepath.Join(dir, "berth")
	if prebuilt := os.Getenv("BERTH_TEST_BIN"); prebuilt != "" {
		// A machine without Go (the cgroup v2 lane's guest) runs a binary
		// built beforehand.
		berthBin = prebuilt
	} else {
		build := exec.Command("go", "build", "-o", berthBin, "../cmd/berth")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "build berth:", err)
			os.Exit(1)
		}
	}
	// No test leaves a cgroup directory or cgroup-root lock file of its
	// own behind (testutil.TrackCgroupRoot in newEnv).
	code := testutil.CheckLeftBehind(m.Run())
	os.RemoveAll(dir)
	os.Exit(code)
}

func randSuffix() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// env is one agent's world: its config file, directories, cgroup root and
// address, all unique to one test.
type env struct {
	t      testing.TB
	dir    string
	config string
	root   string // cgroup_root
	addr   string
	cmd    *exec.Cmd
	out    *testutil.SyncBuffer
	waited chan error
	bin    string // the agent's program; "": berthBin
	// wrap, when set, is the command the agent's program runs under (its
	// arguments before the program: unshare --time ...), which execs it.
	wrap []string
	// args are more arguments of `berth agent` (--pprof ADDR), after
	// --config.
	args []string
}

func newEnv(t testing.TB) *env {
	testutil.NeedRoot(t)
	e := &env{
		t:    t,
		dir:  t.TempDir(),
		root: testutil.TrackCgroupRoot(t, "berth-e2e-"+strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-"))+"-"+randSuffix()),
		addr: testutil.FreePort(t),
	}
	e.config = filepath.Join(e.dir, "berth.toml")
	t.Cleanup(e.cleanup)
	return e
}

// header is the [agent] table every test config starts with.
func (e *env) header(stopTimeout string) string {
	return fmt.Sprintf(`[agent]
id = "e2e"
data_dir = %q
log_dir = %q
listen = %q
cgroup_root = %q
stop_timeout = %q
`, filepath.Join(e.dir, "data"), filepath.Join(e.dir, "log"), e.addr, e.root, stopTimeout)
}

func (e *env) write(body string) {
	e.t.Helper()
	if err := os.WriteFile(e.config, []byte(body), 0o644); err != nil {
		e.t.Fatal(err)
	}
}

// start runs the agent and waits until it answers /healthz.
func (e *env) start() {
	e.t.Helper()
	e.startWith(http.DefaultClient, "http://"+e.addr)
}

// startWith runs the agent and waits until it answers GET base/healthz
// through c (an agent that serves TLS and asks for credentials).
func (e *env) startWith(c *http.Client, base string) {
	e.t.Helper()
	e.launch()
	// Ready can take a session TTL (10 s) when the agent restarts before its
	// previous session's lease expired, and longer on a loaded machine.
	testutil.Eventually(e.t, 60*time.Second, "agent /healthz", func() bool {
		select {
		case err := <-e.waited:
			e.waited <- err
			e.t.Fatalf("agent exited early: %v\n%s", err, e.out)
		default:
		}
		resp, err := c.Get(base + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// launch runs the agent (e.bin, else berthBin) with e's file, its output
// in e.out, and returns at once; e.waited receives its exit.
func (e *env) launch() {
	e.t.Helper()
	bin := berthBin
	if e.bin != "" {
		bin = e.bin
	}
	argv := append(append([]string(nil), e.wrap...), bin, "agent", "--config", e.config)
	argv = append(argv, e.args...)
	e.run(exec.Command(argv[0], argv[1:]...))
}

// run starts cmd as e's agent (e.cmd), as launch does.
func (e *env) run(cmd *exec.Cmd) {
	e.t.Helper()
	e.cmd = cmd
	e.out = &testutil.SyncBuffer{}
	e.cmd.Stdout, e.cmd.Stderr = e.out, e.out
	if err := e.cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	e.waited = make(chan error, 1)
	go func(c *exec.Cmd, ch chan error) { ch <- c.Wait() }(e.cmd, e.waited)
}

// signal sends sig to the agent and, for TERM/INT/KILL, waits for its exit.
func (e *env) stop(sig syscall.Signal) error {
	e.t.Helper()
	if err := e.cmd.Process.Signal(sig); err != nil {
		e.t.Fatal(err)
	}
	select {
	case err := <-e.waited:
		return err
	case <-time.After(testutil.Deadline(60 * time.Second)):
		e.t.Fatalf("agent did not exit within 60s of %v\n%s", sig, e.out)
	}
	return nil
}

// cleanup kills a still-running agent and everything left in its cgroups.
func (e *env) cleanup() {
	if e.cmd != nil && e.cmd.ProcessState == nil {
		_ = e.cmd.Process.Kill()
		<-e.waited
	}
	// Kill what is left in the test's cgroups and remove them, with the
	// cgroup-root lock file an agent killed here had no chance to remove.
	testutil.RemoveCgroupRoot(e.root)
	// A lease guard the agent was starting when it was killed may still
	// enter the root: wait until no guard holds the data_dir's guard lock
	// (a guard that starts later finds the root gone and exits), then
	// remove the root again.
	if f, err := os.OpenFile(filepath.Join(e.dir, "data", "guard.lock"), os.O_RDWR|os.O_CREATE, 0o600); err == nil {
		testutil.Poll(60*time.Second, func() bool {
			return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil
		})
		testutil.RemoveCgroupRoot(e.root)
		f.Close()
	}
	// The claim file of an agent killed here (a clean stop removes it),
	// and its temporary file, when it was killed while writing it.
	claim := fencing.ClaimFilePath(filepath.Join(e.dir, "data"))
	_ = os.Remove(claim)
	_ = os.Remove(claim + ".tmp")
	if e.t.Failed() && e.out != nil {
		e.t.Logf("agent output:\n%s", e.out)
	}
}

// cgroupLock is the lock file of this test's cgroup root.
func (e *env) cgroupLock() string {
	return filepath.Join("/run/lock/berth", "cgroup-"+e.root+".lock")
}

// dataLock is the lock file of this test's data_dir (with its agent's PID).
func (e *env) dataLock() string { return filepath.Join(e.dir, "data", "agent.lock") }

// cgroupDirs lists the root of this test's cgroups in every hierarchy.
func (e *env) cgroupDirs() []string {
	var dirs []string
	entries, _ := os.ReadDir("/sys/fs/cgroup")
	for _, en := range entries {
		d := filepath.Join("/sys/fs/cgroup", en.Name(), e.root)
		if _, err := os.Stat(d); err == nil {
			dirs = append(dirs, d)
		}
	}
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		d := filepath.Join("/sys/fs/cgroup", e.root)
		if _, err := os.Stat(d); err == nil {
			dirs = append(dirs, d)
		}
	}
	return dirs
}

// getJSON GETs rawURL with the API's client (api.Client) and decodes a
// 2xx JSON answer into v (nil: the body is not decoded); it returns the
// status code, and fails the test when the agent cannot be reached.
func getJSON(t testing.TB, rawURL string, v any) int {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	if v == nil {
		v = new(json.RawMessage)
	}
	err = api.NewClient(u.Scheme+"://"+u.Host).Get(context.Background(), u.RequestURI(), v)
	var apiErr *api.Error
	switch {
	case errors.As(err, &apiErr):
		return apiErr.Code
	case err != nil:
		t.Fatal(err)
	}
	return http.StatusOK
}

func (e *env) jobs() map[string]api.Job {
	e.t.Helper()
	var js []api.Job
	getJSON(e.t, "http://"+e.addr+"/v1/jobs", &js)
	out := map[string]api.Job{}
	for _, j := range js {
		out[j.ID] = j
	}
	return out
}

// waitRunning waits until every named job is running and returns the jobs.
func (e *env) waitRunning(ids ...string) map[string]api.Job {
	e.t.Helper()
	var js map[string]api.Job
	testutil.Eventually(e.t, 20*time.Second, fmt.Sprintf("jobs %v running", ids), func() bool {
		js = e.jobs()
		for _, id := range ids {
			if j, ok := js[id]; !ok || j.State != "running" || j.PID == 0 {
				return false
			}
		}
		return true
	})
	return js
}

// metrics returns the sample values of the agent's /metrics, keyed by the
// series as exposed ("name{labels}").
func (e *env) metrics() map[string]float64 {
	e.t.Helper()
	resp, err := http.Get("http://" + e.addr + "/metrics")
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		e.t.Fatalf("GET /metrics: %s\n%s", resp.Status, b)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			e.t.Fatalf("bad metrics line %q", line)
		}
		out[line[:i]] = v
	}
	return out
}

// metric finds one series by name and a substring of its labels.
func metric(m map[string]float64, name, labels string) (float64, bool) {
	for k, v := range m {
		if strings.HasPrefix(k, name+"{") && strings.Contains(k, labels) {
			return v, true
		}
	}
	return 0, false
}
