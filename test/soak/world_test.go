//go:build soak

package soak

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/berthd/berth/api"
	"github.com/berthd/berth/internal/testutil"
	"github.com/berthd/berth/worker"
)

// world is a cluster under test: a network, three etcd members on its
// store bridge, and agents each in its own network namespace running the
// stamping workload. Agent "a" declares connector P (its own job and two
// tasks), "b" declares connector Q, "c" is a standby: whoever is cut, the
// others can take over.
type world struct {
	t      *testing.T
	net    *network
	etcd   *etcdCluster
	tag    string
	stamps string // the stamp files, <job>.log
	ttl    time.Duration
	load   workload
	jobs   []string // every job
	agents []*member
	// crashes are the agents SIGKILLed and not started again before
	// their lease could expire (TestSoakPartitions' kill rounds).
	crashes []crash
}

// member is one agent of the world.
type member struct {
	w       *world
	id      string
	host    *nsHost
	file    agentFile
	config  string
	static  string // the [static] table of its file
	logFile string
	proc    *agentProc   // the agent running now (or the last one)
	procs   []*agentProc // every run of its agent, oldest first
	addr    string       // API, on the management bridge
	home    []string     // the jobs it declares
	poller  *poller
}

// workload is what a world's agents run: the [[connector]] blocks of
// every agent's file, and whether a job's worker has started working.
type workload struct {
	defs    func(w *world) string
	started func(w *world, m *member, job string, pid int) bool
}

// stamping is the stamper (stamper_test.go) as both connectors' jobs.
var stamping = workload{
	defs: func(w *world) string {
		var wl strings.Builder
		for _, c := range w.connectors() {
			cmd := stamperCommand(w.stamps, 5)
			fmt.Fprintf(&wl, "[[connector]]\nname = %q\ntasks = 2\n  [connector.run]\n  %s\n  [connector.task]\n  %s\n\n", c, cmd, cmd)
		}
		return wl.String()
	},
	started: func(w *world, _ *member, job string, pid int) bool {
		return stampedBy(filepath.Join(w.stamps, job+".log"), pid)
	},
}

// connectors are the world's two connectors, P (declared by agent a) and
// Q (by b), each a job and two tasks.
func (w *world) connectors() []string { return []string{w.tag + "-p", w.tag + "-q"} }

// newWorld builds the world with session TTL ttl (whole seconds, at least
// 2 s) running the stamping workload and starts its agents; it returns
// once each runs its own jobs.
func newWorld(t *testing.T, ttl time.Duration) *world { return newWorldOf(t, ttl, stamping) }

// newWorldOf is newWorld with workload load.
func newWorldOf(t *testing.T, ttl time.Duration, load workload) *world {
	t.Helper()
	testutil.NeedRoot(t)
	w := &world{t: t, net: newNetwork(t), tag: randHex(3), stamps: t.TempDir(), ttl: ttl, load: load}
	w.etcd = startEtcd(t, 3, w.net.store.ip(1).String())
	p, q := w.connectors()[0], w.connectors()[1]
	decl := map[string][]string{
		"a": {p, p + "-0", p + "-1"},
		"b": {q, q + "-0", q + "-1"},
		"c": nil,
	}
	w.jobs = append(append([]string{}, decl["a"]...), decl["b"]...)
	wl := load.defs(w)
	for i, id := range []string{"a", "b", "c"} {
		m := &member{w: w, id: id, host: w.net.addHost(i), home: decl[id]}
		dir := t.TempDir()
		m.addr = net.JoinHostPort(m.host.mgmtIP.String(), "9750")
		m.logFile = filepath.Join(dir, "agent.log")
		var conns, tasks []string
		for _, j := range decl[id] {
			if strings.Count(j, "-") == 1 {
				conns = append(conns, j)
			} else {
				tasks = append(tasks, j)
			}
		}
		m.static = fmt.Sprintf("[static]\nconnectors = [%s]\ntasks = [%s]\n\n", quoteAll(conns), quoteAll(tasks))
		m.file = agentFile{id: id, dir: dir, listen: m.addr, root: fmt.Sprintf("berth-soak-%s-%s", w.tag, id),
			cluster: "soak-" + w.tag, endpoints: w.etcd.endpoints(), ttl: w.ttl.String(), stopTimeout: "2s",
			body: m.static + wl}
		m.config = m.file.write(t)
		testutil.TrackCgroupRoot(t, m.file.root)
		w.agents = append(w.agents, m)
	}
	for _, m := range w.agents {
		m.start()
	}
	w.settle(90 * time.Second)
	return w
}

// start runs the member's agent in its namespace and polls its API.
func (m *member) start() {
	m.proc = startAgent(m.w.t, m.config, m.addr, m.logFile, m.host.ns)
	m.procs = append(m.procs, m.proc)
	if m.poller == nil {
		m.poller = startPoller(m.w.t, m.addr)
	}
}

// settled reports whether every agent is a member and runs exactly its own
// jobs, each with a stamp from its current worker; when not, it says why.
func (w *world) settled() (bool, string) {
	for _, m := range w.agents {
		var a api.Agent
		if err := get(m.addr, "/v1/agent", &a); err != nil || a.State != "member" {
			return false, fmt.Sprintf("%s: not a member (%q, %v)", m.id, a.State, err)
		}
		js, err := jobsOf(m.addr)
		if err != nil {
			return false, fmt.Sprintf("%s: %v", m.id, err)
		}
		if len(js) != len(m.home) {
			return false, fmt.Sprintf("%s runs %s, want %v", m.id, describe(js), m.home)
		}
		for _, id := range m.home {
			j, ok := js[id]
			if !ok || j.State != worker.Running || j.PID == 0 {
				return false, fmt.Sprintf("%s runs %s, want %v", m.id, describe(js), m.home)
			}
			if !w.load.started(w, m, id, j.PID) {
				return false, fmt.Sprintf("%s: job %s pid %d has not written yet", m.id, id, j.PID)
			}
		}
	}
	return true, ""
}

// settle waits until settled, failing the test with the reason after
// timeout.
func (w *world) settle(timeout time.Duration) time.Duration {
	w.t.Helper()
	start := time.Now()
	var why string
	if !testutil.Poll(timeout, func() bool {
		var ok bool
		ok, why = w.settled()
		return ok
	}) {
		w.t.Fatalf("not settled after %s: %s\n%s", timeout, why, w.tails(nil))
	}
	return time.Since(start)
}

// tails is the last lines of every agent's output, and of the lease
// guard's log of agent also (nil: none), for a failure message.
func (w *world) tails(also *member) string {
	var tails []string
	for _, m := range w.agents {
		tails = append(tails, fmt.Sprintf("--- agent %s:\n%s", m.id, m.proc.out.tail(25)))
	}
	if also != nil {
		b, _ := os.ReadFile(string(guardLogOf(filepath.Join(also.file.dir, "data"))))
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		tails = append(tails, fmt.Sprintf("--- lease guard of %s:\n%s", also.id, strings.Join(lines[max(0, len(lines)-15):], "\n")))
	}
	return strings.Join(tails, "\n")
}

// stop stops every agent with SIGTERM and the pollers, and fails the test
// when an agent does not exit 0.
func (w *world) stop() {
	w.t.Helper()
	for _, m := range w.agents {
		if m.proc.running() {
			m.proc.signal(syscall.SIGTERM)
		}
	}
	for _, m := range w.agents {
		if err := m.proc.waitExit(60 * time.Second); err != nil {
			w.t.Errorf("agent %s: exit after SIGTERM: %v\n%s", m.id, err, m.proc.out.tail(30))
		}
		m.poller.stop()
	}
}

func describe(js map[string]api.Job) string {
	ids := sortedKeys(js)
	var parts []string
	for _, id := range ids {
		parts = append(parts, fmt.Sprintf("%s:%s/%d", id, js[id].State, js[id].PID))
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// stampedBy reports whether file holds a stamp of pid.
func stampedBy(file string, pid int) bool {
	ss, err := testutil.ReadStamps(file)
	if err != nil {
		return false
	}
	for i := len(ss) - 1; i >= 0; i-- {
		if ss[i].PID == pid {
			return true
		}
	}
	return false
}

// ---- the agents as members, over time ----

// sample is one answer of GET /v1/agent.
type sample struct {
	at          time.Time // when the answer arrived
	pid         int       // the agent's process
	state       string
	lastRenewal time.Time // zero: no session
}

// poller reads an agent's /v1/agent every 20 ms until stopped, keeping
// every answer: the record of its sessions and their last renewals.
type poller struct {
	mu      sync.Mutex
	samples []sample
	quit    chan struct{}
	done    chan struct{}
}

func startPoller(t testing.TB, addr string) *poller {
	p := &poller{quit: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		for {
			select {
			case <-p.quit:
				return
			case <-time.After(20 * time.Millisecond):
			}
			var a api.Agent
			if err := get(addr, "/v1/agent", &a); err != nil {
				continue
			}
			s := sample{at: time.Now(), pid: a.PID, state: a.State}
			if a.LastRenewal != nil {
				s.lastRenewal = *a.LastRenewal
			}
			p.mu.Lock()
			p.samples = append(p.samples, s)
			p.mu.Unlock()
		}
	}()
	t.Cleanup(p.stop)
	return p
}

// stop ends the poller and waits for it; it may be called twice.
func (p *poller) stop() {
	select {
	case <-p.quit:
	default:
		close(p.quit)
	}
	<-p.done
}

// all returns the samples so far, oldest first.
func (p *poller) all() []sample {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]sample(nil), p.samples...)
}

// sessionLoss is one session an agent lost, as its samples show it.
type sessionLoss struct {
	agent       string
	lastRenewal time.Time // of the lost session, as last seen
	lastSeen    time.Time // the last sample in which it was a member with that session
	lostSeen    time.Time // the first sample after, in which it was not
}

// losses finds every session the agent lost: a sample as member followed
// by one of the same agent process that is not a member (fenced, or
// joining again). A new process (a killed agent started again) is not a
// loss seen: it may resume the session.
func (p *poller) losses(agent string) []sessionLoss {
	ss := p.all()
	var out []sessionLoss
	for i := 1; i < len(ss); i++ {
		prev, cur := ss[i-1], ss[i]
		if prev.state == "member" && cur.state != "member" && prev.pid == cur.pid {
			out = append(out, sessionLoss{agent: agent, lastRenewal: prev.lastRenewal, lastSeen: prev.at, lostSeen: cur.at})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].lostSeen.Before(out[j].lostSeen) })
	return out
}

// renewalAt is the last renewal the agent reported at or after t and
// before until (the first answer in that window), or zero.
func (p *poller) renewalAt(t, until time.Time) (time.Time, bool) {
	for _, s := range p.all() {
		if !s.at.Before(t) && s.at.Before(until) && s.state == "member" {
			return s.lastRenewal, true
		}
	}
	return time.Time{}, false
}

// next waits up to timeout for an answer that arrives after t and returns
// it; ok is false when none came.
func (p *poller) next(t time.Time, timeout time.Duration) (s sample, ok bool) {
	ok = testutil.Poll(timeout, func() bool {
		ss := p.all()
		if len(ss) == 0 || !ss[len(ss)-1].at.After(t) {
			return false
		}
		s = ss[len(ss)-1]
		return true
	})
	return s, ok
}

// of returns the samples of the agent process pid, oldest first.
func (p *poller) of(pid int) []sample {
	var out []sample
	for _, s := range p.all() {
		if s.pid == pid {
			out = append(out, s)
		}
	}
	return out
}
