//go:build soak

package soak

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/berthd/berth/api"
	"github.com/berthd/berth/internal/testutil"
	"github.com/vishvananda/netns"
)

// agentProc is one run of `berth agent` as a child of the test: its output
// kept line by line (and copied to a file for the record), lines it can be
// told to wait for, and its exit.
type agentProc struct {
	t      testing.TB
	cmd    *exec.Cmd
	pid    int
	start  time.Time
	addr   string // its API address, host:port
	out    *lineLog
	exited chan struct{}
	err    error // set before exited closes
}

// startAgent runs `berth agent --config config` — inside the network
// namespace ns when ns is open (netns.None() for the host's) — with its
// output appended to logFile. It does not wait for the agent to be ready.
func startAgent(t testing.TB, config, addr, logFile string, ns netns.NsHandle) *agentProc {
	t.Helper()
	f, err := os.OpenFile(logFile, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	a := &agentProc{t: t, addr: addr, out: newLineLog(f), exited: make(chan struct{})}
	a.cmd = exec.Command(berthBin, "agent", "--config", config)
	a.cmd.Stdout, a.cmd.Stderr = pw, pw
	if err := startIn(ns, a.cmd); err != nil {
		pr.Close()
		pw.Close()
		f.Close()
		t.Fatalf("start agent: %v", err)
	}
	pw.Close()
	a.pid, a.start = a.cmd.Process.Pid, time.Now()
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		a.out.read(pr)
		pr.Close()
		f.Close()
	}()
	go func() {
		a.err = a.cmd.Wait()
		<-copied // every line it wrote is in out
		close(a.exited)
	}()
	t.Cleanup(func() { a.kill() })
	return a
}

// startIn starts cmd from a thread that has entered ns, so that the child
// is born in that network namespace.
func startIn(ns netns.NsHandle, cmd *exec.Cmd) error {
	if !ns.IsOpen() {
		return cmd.Start()
	}
	return inNS(ns, cmd.Start)
}

// kill SIGKILLs the agent (if it still runs) and waits for its exit.
func (a *agentProc) kill() {
	select {
	case <-a.exited:
		return
	default:
	}
	_ = a.cmd.Process.Signal(syscall.SIGKILL)
	<-a.exited
}

// signal sends sig to the agent; an agent that already exited is no error.
func (a *agentProc) signal(sig syscall.Signal) {
	if err := a.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		a.t.Fatalf("signal %v to agent %d: %v", sig, a.pid, err)
	}
}

// running reports whether the agent has not exited.
func (a *agentProc) running() bool {
	select {
	case <-a.exited:
		return false
	default:
		return true
	}
}

// waitExit waits up to timeout for the agent to exit and returns its exit
// error; it fails the test when the agent does not exit.
func (a *agentProc) waitExit(timeout time.Duration) error {
	a.t.Helper()
	select {
	case <-a.exited:
		return a.err
	case <-time.After(testutil.Deadline(timeout)):
		a.t.Fatalf("agent %d did not exit within %s\n%s", a.pid, testutil.Deadline(timeout), a.out.tail(40))
		return nil
	}
}

// ---- the agent's output ----

// lineLog is an agent's output, kept in memory line by line and copied to
// a file, with waiters for lines that contain a given text.
type lineLog struct {
	mu      sync.Mutex
	file    io.Writer
	lines   []string
	waiters []*lineWaiter
}

type lineWaiter struct {
	text string
	seen chan time.Time // receives when the first matching line was read
}

func newLineLog(file io.Writer) *lineLog { return &lineLog{file: file} }

func (l *lineLog) read(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		now := time.Now()
		l.mu.Lock()
		_, _ = fmt.Fprintln(l.file, line)
		l.lines = append(l.lines, line)
		keep := l.waiters[:0]
		for _, w := range l.waiters {
			if strings.Contains(line, w.text) {
				w.seen <- now
				continue
			}
			keep = append(keep, w)
		}
		l.waiters = keep
		l.mu.Unlock()
	}
}

// next returns a channel that receives the time at which the first line
// containing text is read from now on.
func (l *lineLog) next(text string) <-chan time.Time {
	w := &lineWaiter{text: text, seen: make(chan time.Time, 1)}
	l.mu.Lock()
	l.waiters = append(l.waiters, w)
	l.mu.Unlock()
	return w.seen
}

// count is how many lines so far contain text.
func (l *lineLog) count(text string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, line := range l.lines {
		if strings.Contains(line, text) {
			n++
		}
	}
	return n
}

// matching returns the lines so far that contain text.
func (l *lineLog) matching(text string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range l.lines {
		if strings.Contains(line, text) {
			out = append(out, line)
		}
	}
	return out
}

// tail is the last n lines, for failure messages.
func (l *lineLog) tail(n int) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	from := max(0, len(l.lines)-n)
	return strings.Join(l.lines[from:], "\n")
}

// ---- its API ----

// apiClient never keeps a connection open: an idle keep-alive connection
// would count among the agent's open files.
var apiClient = &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

// get decodes the JSON answer of GET http://addr+path into v; a transport
// error or a status other than 200 is an error.
func get(addr, path string, v any) error {
	resp, err := apiClient.Get("http://" + addr + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("GET %s: %s %s", path, resp.Status, strings.TrimSpace(string(b)))
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// jobs is GET /v1/jobs by job ID.
func jobsOf(addr string) (map[string]api.Job, error) {
	var js []api.Job
	if err := get(addr, "/v1/jobs", &js); err != nil {
		return nil, err
	}
	out := make(map[string]api.Job, len(js))
	for _, j := range js {
		out[j.ID] = j
	}
	return out, nil
}

// healthy reports whether GET /healthz answers 200.
func healthy(addr string) bool {
	var v map[string]string
	return get(addr, "/healthz", &v) == nil
}

// agentFile is the text of an agent's configuration file.
type agentFile struct {
	id, dir, listen, root string
	stopTimeout           string   // "" : 2s
	cluster               string   // cluster name
	endpoints             []string // none: the embedded etcd
	ttl                   string   // session_ttl; "" : 2s
	logDir, dataDir       string   // "" : <dir>/log, <dir>/data
	body                  string   // [static], [[group]], [[connector]] ...
}

func (f agentFile) String() string {
	q := func(xs []string) string {
		out := make([]string, len(xs))
		for i, x := range xs {
			out[i] = fmt.Sprintf("%q", x)
		}
		return "[" + strings.Join(out, ", ") + "]"
	}
	or := func(s, def string) string {
		if s == "" {
			return def
		}
		return s
	}
	var b strings.Builder
	fmt.Fprintf(&b, "[agent]\nid = %q\ndata_dir = %q\nlog_dir = %q\nlisten = %q\ncgroup_root = %q\nstop_timeout = %q\n\n",
		f.id, or(f.dataDir, filepath.Join(f.dir, "data")), or(f.logDir, filepath.Join(f.dir, "log")), f.listen, f.root, or(f.stopTimeout, "2s"))
	fmt.Fprintf(&b, "[cluster]\nname = %q\nsession_ttl = %q\n", f.cluster, or(f.ttl, "2s"))
	if len(f.endpoints) > 0 {
		fmt.Fprintf(&b, "endpoints = %s\n", q(f.endpoints))
	}
	b.WriteString("\n")
	b.WriteString(f.body)
	return b.String()
}

// write writes the file to <dir>/berth.toml and returns its path.
func (f agentFile) write(t testing.TB) string {
	t.Helper()
	p := filepath.Join(f.dir, "berth.toml")
	if err := os.WriteFile(p, []byte(f.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
