package test

// The cluster end to end: several real agents on this host, one etcd, asserting
// from the agents' HTTP API (/v1/jobs, /v1/assignment, /v1/members,
// /v1/agent) and from /proc.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berthd/berth/api"
	"github.com/berthd/berth/internal/testutil"
)

// settle bounds every wait for the cluster to converge: a few session TTLs
// plus agent start-up on a loaded two-core machine.
const settle = 30 * time.Second

// Scenario 1: declared jobs land on their declarers. Two agents declare
// different connectors and tasks (one declares a task of the other's
// connector, one declares a task that does not exist, both declare one
// task: a conflict won by the lowest ID); a connector nobody declares stays
// unassigned with no standby. Run against the embedded etcd
// and against Debian's etcd-server.
func TestClusterDeclaredJobsLandOnDeclarers(t *testing.T) {
	t.Run("embedded", func(t *testing.T) { declaredJobs(t, embeddedEtcd(t)) })
	t.Run("external", func(t *testing.T) { declaredJobs(t, externalEtcd(t)) })
}

func declaredJobs(t *testing.T, endpoints []string) {
	c := clusterSpec{name: clusterName(), endpoints: endpoints}
	workload := sleeperConnector("alpha", 3) + sleeperConnector("beta", 2) + sleeperConnector("orphan", 0)
	a, b := newAgent(t, "a"), newAgent(t, "b")
	a.configure(c, staticTable([]string{"alpha"}, []string{"alpha-0", "alpha-1", "nosuch-7"})+workload)
	// Both declare alpha-1: rule 4 gives it to the lowest member ID, a.
	b.configure(c, staticTable([]string{"beta"}, []string{"beta-0", "beta-1", "alpha-2", "alpha-1"})+workload)
	wantA := []string{"alpha", "alpha-0", "alpha-1"}
	wantB := []string{"beta", "beta-0", "beta-1", "alpha-2"}

	start := time.Now()
	a.start()
	b.start()
	ja := a.waitExactly(settle, wantA...)
	jb := b.waitExactly(settle, wantB...)
	t.Logf("both agents running their declared jobs %s after start", time.Since(start).Round(time.Millisecond))
	a.checkOnProc(ja)
	b.checkOnProc(jb)
	// The leader logs each generation it publishes.
	if !strings.Contains(a.out.String()+b.out.String(), "published an assignment as leader") {
		t.Errorf("no agent logged a published generation:\n%s\n%s", a.out, b.out)
	}

	// Every agent shows the same published assignment, generation and
	// membership; exactly one is leader.
	var gen int64
	testutil.Eventually(t, settle, "the same assignment on both agents", func() bool {
		gen = -1
		for _, x := range []*agent{a, b} {
			as, err := x.assignment()
			ai, err2 := x.info()
			if err != nil || err2 != nil || ai.State != "member" || ai.Generation != as.Generation {
				return false
			}
			if !sameSet(as.Members["a"], wantA) || !sameSet(as.Members["b"], wantB) || as.Unassigned["orphan"] == "" {
				return false
			}
			if gen != -1 && gen != as.Generation {
				return false
			}
			gen = as.Generation
		}
		return true
	})
	as, _ := a.assignment()
	if len(as.Conflicts) != 1 || as.Conflicts[0].Job != "alpha-1" || as.Conflicts[0].Winner != "a" || !sameSet(as.Conflicts[0].Members, []string{"a", "b"}) {
		t.Errorf("conflicts = %+v, want alpha-1 declared by a and b, won by a", as.Conflicts)
	}
	if _, ok := as.Unassigned["nosuch-7"]; ok {
		t.Errorf("a declared job that does not exist is reported unassigned (rule 3 says ignore): %v", as.Unassigned)
	}
	for m, js := range as.Members {
		for _, j := range js {
			if j == "orphan" || j == "nosuch-7" {
				t.Errorf("job %s assigned to %s; want it nowhere", j, m)
			}
		}
	}
	leaders := 0
	for _, x := range []*agent{a, b} {
		ai, err := x.info()
		if err != nil {
			t.Fatal(err)
		}
		if ai.ID != x.id {
			t.Errorf("/v1/agent of %s says id %q", x.id, ai.ID)
		}
		if ai.Leader {
			leaders++
		}
	}
	if leaders != 1 {
		t.Errorf("%d leaders, want 1", leaders)
	}
	ms, err := b.members()
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]api.Member{}
	for _, m := range ms {
		byID[m.ID] = m
	}
	if len(ms) != 2 || !sameSet(byID["a"].Tasks, []string{"alpha-0", "alpha-1", "nosuch-7"}) ||
		!sameSet(byID["b"].Connectors, []string{"beta"}) || byID["a"].Addr != a.addr || byID["b"].Addr != b.addr {
		t.Errorf("/v1/members = %+v", ms)
	}
	// Any agent answers the Connect-shaped status of any connector, with the
	// state its owner reports and the owner as worker_id.
	var st struct {
		Connector struct{ State, WorkerID string } `json:"connector"`
		Tasks     []struct {
			ID       int    `json:"id"`
			State    string `json:"state"`
			WorkerID string `json:"worker_id"`
		} `json:"tasks"`
	}
	if err := getAPI("http://"+a.addr, "/connectors/beta/status", &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Tasks) != 2 || st.Tasks[0].State != "RUNNING" || st.Tasks[0].WorkerID != "b" || st.Tasks[1].WorkerID != "b" {
		t.Errorf("a's /connectors/beta/status = %+v, want both tasks RUNNING on b", st)
	}
	if err := getAPI("http://"+b.addr, "/connectors/alpha/status", &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Tasks) != 3 || st.Tasks[1].WorkerID != "a" || st.Tasks[2].WorkerID != "b" || st.Tasks[2].State != "RUNNING" || st.Tasks[1].State != "RUNNING" {
		t.Errorf("b's /connectors/alpha/status = %+v, want alpha-1 on a and alpha-2 on b, RUNNING", st)
	}
	// Still exactly the declared jobs, the same processes, once the
	// assignment is known to be stable.
	for _, x := range []struct {
		a    *agent
		want []string
		was  map[string]api.Job
	}{{a, wantA, ja}, {b, wantB, jb}} {
		now := x.a.waitExactly(settle, x.want...)
		for id, j := range now {
			if j.PID != x.was[id].PID {
				t.Errorf("agent %s: job %s pid %d -> %d with no change to the cluster", x.a.id, id, x.was[id].PID, j.PID)
			}
		}
	}
}

// sleeperConnector is a [[connector]] whose connector job and tasks sleep.
func sleeperConnector(name string, tasks int) string {
	s := fmt.Sprintf(`
[[connector]]
name = %q
tasks = %d
  [connector.run]
  command = ["sleep", "infinity"]
`, name, tasks)
	if tasks > 0 {
		s += `  [connector.task]
  command = ["sleep", "infinity"]
`
	}
	return s
}

// Scenario 2: a standby (empty [static]) takes the jobs of a declarer that
// leaves (SIGTERM) and gives them back when it returns; the returning
// declarer waits, visibly, on the standby's claims; no job ever has two
// workers — not in the agents' /v1/jobs, not in /proc, not in the stamps the
// workers write themselves.
func TestClusterStandbyTakesOverAndGivesBack(t *testing.T) {
	eps := embeddedEtcd(t)
	c := clusterSpec{name: clusterName(), endpoints: eps, rebalanceDelay: "0s"}
	stamps := t.TempDir()
	// Each worker lingers ~0.5 s after SIGTERM: the next holder must wait.
	workload := fmt.Sprintf(`
[[connector]]
name = "s"
tasks = 2
  [connector.run]
  command = %[1]s
  [connector.task]
  command = %[1]s
`, stampCommand(stamps, 25))
	a, b := newAgent(t, "a"), newAgent(t, "b")
	a.configure(c, staticTable([]string{"s"}, []string{"s-0", "s-1"})+workload)
	b.configure(c, staticTable(nil, nil)+workload)
	jobs := []string{"s", "s-0", "s-1"}

	a.start()
	a.waitExactly(settle, jobs...)
	b.start()
	b.waitMember(settle)
	b.waitExactly(settle)

	w := watchTwo(t, jobs, a, b)
	left := time.Now()
	if err := a.stop(syscall.SIGTERM); err != nil {
		t.Fatalf("declarer exit on SIGTERM: %v\n%s", err, a.out)
	}
	stopped := time.Since(left)
	jb := b.waitExactly(settle, jobs...)
	tookOver := time.Since(left)
	b.checkOnProc(jb)
	if as, err := b.assignment(); err != nil || !sameSet(as.Members["b"], jobs) {
		t.Errorf("standby's view of the assignment after the declarer left: %+v, %v", as, err)
	}

	back := time.Now()
	a.start()
	ja := a.waitExactly(settle, jobs...)
	b.waitExactly(settle)
	returned := time.Since(back)
	a.checkOnProc(ja)
	waitStamped(t, stamps, ja)
	res := w.finish()

	t.Logf("declarer stopped in %s; standby running its jobs %s after SIGTERM; declarer running them again %s after its restart; %d samples",
		stopped.Round(time.Millisecond), tookOver.Round(time.Millisecond), returned.Round(time.Millisecond), res.samples)
	for _, o := range res.overlaps {
		t.Errorf("two workers at once: %s", o)
	}
	if res.samples < 20 {
		t.Errorf("only %d overlap samples taken", res.samples)
	}
	sawWait := false
	for job, reason := range res.waiting["a"] {
		t.Logf("returning declarer waited on %s: %q", job, reason)
		sawWait = sawWait || strings.Contains(reason, "b")
	}
	if !sawWait {
		t.Errorf(`the returning declarer never showed a job "waiting" on a claim held by b (standby workers linger 0.5 s after SIGTERM); waiting seen: %v`, res.waiting)
	}

	for _, job := range jobs {
		ivs := stampIntervals(t, filepath.Join(stamps, job+".log"))
		for _, o := range testutil.Overlaps(ivs) {
			t.Errorf("job %s: workers overlap: %s (%s) and %s (%s)", job, o[0], owner(o[0].Worker, a, b), o[1], owner(o[1].Worker, a, b))
		}
		var seq []string
		for _, iv := range ivs {
			seq = append(seq, owner(iv.Worker, a, b))
		}
		if strings.Join(seq, ",") != "a,b,a" {
			t.Errorf("job %s ran on %v; want a, then b, then a", job, seq)
		}
		for i := 1; i < len(ivs); i++ {
			t.Logf("job %s: %s -> %s handoff gap %s", job, owner(ivs[i-1].Worker, a, b), owner(ivs[i].Worker, a, b),
				time.Duration(ivs[i].First-ivs[i-1].Last).Round(time.Millisecond))
		}
	}
}

// stampIntervals reads a stamp log into per-process intervals.
func stampIntervals(t *testing.T, file string) []testutil.Interval {
	t.Helper()
	ss, err := testutil.ReadStamps(file)
	if err != nil {
		t.Fatal(err)
	}
	return testutil.Intervals(ss)
}

// twoWatch samples two agents until finish and records every moment at
// which one job has a live worker on both, and the "waiting" reasons seen.
type twoWatch struct {
	stop, done chan struct{}
	res        watchResult
}

type watchResult struct {
	samples  int
	overlaps []string
	waiting  map[string]map[string]string // agent -> job -> reason
}

// watchTwo starts sampling x and y. An overlap is recorded only when it is
// certain despite the reads not being simultaneous: x's process is seen
// before and after y's (the same PID, alive and in x's cgroup of the job
// both times), and y's after that too.
func watchTwo(t *testing.T, jobs []string, x, y *agent) *twoWatch {
	w := &twoWatch{stop: make(chan struct{}), done: make(chan struct{}),
		res: watchResult{waiting: map[string]map[string]string{}}}
	liveIn := func(a *agent, job string) map[int]bool {
		out := map[int]bool{}
		for _, p := range a.jobProcs(job) {
			if testutil.Alive(p) {
				out[p] = true
			}
		}
		return out
	}
	both := func(m1, m2 map[int]bool) bool {
		for p := range m1 {
			if m2[p] {
				return true
			}
		}
		return false
	}
	go func() {
		defer close(w.done)
		for {
			select {
			case <-w.stop:
				return
			default:
			}
			// From the API: running on x, then on y, then x's PID still alive
			// in x's cgroup, then y's still alive.
			jx, errx := x.tryJobs()
			jy, erry := y.tryJobs()
			for _, pair := range []struct {
				a  *agent
				js map[string]api.Job
			}{{x, jx}, {y, jy}} {
				for id, j := range pair.js {
					if j.State == "waiting" {
						if w.res.waiting[pair.a.id] == nil {
							w.res.waiting[pair.a.id] = map[string]string{}
						}
						w.res.waiting[pair.a.id][id] = j.Reason
					}
				}
			}
			if errx == nil && erry == nil {
				for _, job := range jobs {
					p, q := jx[job], jy[job]
					if p.State != "running" || q.State != "running" || p.PID == 0 || q.PID == 0 {
						continue
					}
					okP, _ := x.inJobCgroup(p.PID, job)
					if okP && testutil.Alive(p.PID) && testutil.Alive(q.PID) {
						w.res.overlaps = append(w.res.overlaps, fmt.Sprintf("%s: /v1/jobs running on %s (pid %d) and %s (pid %d)", job, x.id, p.PID, y.id, q.PID))
					}
				}
			}
			// From /proc: the job's cgroup on x, on y, on x, on y.
			for _, job := range jobs {
				px := liveIn(x, job)
				if len(px) == 0 {
					continue
				}
				py := liveIn(y, job)
				if len(py) == 0 {
					continue
				}
				if both(px, liveIn(x, job)) && both(py, liveIn(y, job)) {
					w.res.overlaps = append(w.res.overlaps, fmt.Sprintf("%s: processes in the job cgroups of %s %v and %s %v", job, x.id, px, y.id, py))
				}
			}
			w.res.samples++
			time.Sleep(20 * time.Millisecond)
		}
	}()
	t.Cleanup(func() {
		select {
		case <-w.done:
		default:
			close(w.stop)
			<-w.done
		}
	})
	return w
}

func (w *twoWatch) finish() watchResult {
	close(w.stop)
	<-w.done
	return w.res
}

// Scenario 3: with one member speaking "balanced", static declarations are
// ignored and every job is balanced over all members (ungrouped jobs:
// counts differ by at most 1). When a member leaves, only its jobs move.
func TestClusterOneBalancedMemberBalancesAll(t *testing.T) {
	eps := embeddedEtcd(t)
	name := clusterName()
	workload := sleeperConnector("bal", 6) + sleeperConnector("solo", 0)
	all := []string{"bal", "bal-0", "bal-1", "bal-2", "bal-3", "bal-4", "bal-5", "solo"}
	a, b, c := newAgent(t, "a"), newAgent(t, "b"), newAgent(t, "c")
	a.configure(clusterSpec{name: name, endpoints: eps, protocol: "balanced"}, staticTable(nil, nil)+workload)
	// Under the static protocol b would run everything.
	b.configure(clusterSpec{name: name, endpoints: eps}, staticTable([]string{"bal", "solo"}, all[1:7])+workload)
	c.configure(clusterSpec{name: name, endpoints: eps}, staticTable(nil, nil)+workload)
	for _, x := range []*agent{a, b, c} {
		x.start()
	}
	first := waitBalanced(t, all, a, b, c)
	counts := map[string]int{}
	for id, js := range first {
		counts[id] = len(js)
	}
	t.Logf("balanced over 3 members: %v", counts)

	if err := c.stop(syscall.SIGTERM); err != nil {
		t.Fatalf("c exit on SIGTERM: %v", err)
	}
	second := waitBalanced(t, all, a, b)
	for _, x := range []*agent{a, b} {
		for id, j := range first[x.id] {
			if j2, ok := second[x.id][id]; !ok || j2.PID != j.PID {
				t.Errorf("job %s moved or restarted on %s (pid %d -> %+v) although only c's jobs had to move", id, x.id, j.PID, j2)
			}
		}
	}
}

// waitBalanced waits until the running jobs of the agents are exactly all,
// each once, counts within 1, and equal to the published assignment that
// every agent reports (same generation); it returns each agent's jobs.
func waitBalanced(t *testing.T, all []string, agents ...*agent) map[string]map[string]api.Job {
	t.Helper()
	var got map[string]map[string]api.Job
	var last string
	deadline := time.Now().Add(testutil.Deadline(settle))
	for {
		got = map[string]map[string]api.Job{}
		ok := true
		var seen []string
		lo, hi := len(all), 0
		gen := int64(-1)
		for _, x := range agents {
			js, err := x.tryJobs()
			as, err2 := x.assignment()
			if err != nil || err2 != nil {
				ok = false
				last = fmt.Sprint(err, err2)
				break
			}
			run := runningIDs(js)
			if len(run) != len(js) || !sameSet(run, as.Members[x.id]) || (gen != -1 && gen != as.Generation) || len(as.Members) != len(agents) {
				ok = false
				last = fmt.Sprintf("%s: jobs %s, assignment gen %d %v", x.id, describeJobs(js), as.Generation, as.Members)
				break
			}
			gen = as.Generation
			got[x.id] = js
			seen = append(seen, run...)
			lo, hi = min(lo, len(run)), max(hi, len(run))
		}
		if ok && sameSet(seen, all) && hi-lo <= 1 {
			for _, x := range agents {
				x.checkOnProc(got[x.id])
			}
			return got
		}
		if ok {
			last = fmt.Sprintf("running %v (counts %d..%d)", sorted(seen), lo, hi)
		}
		if time.Now().After(deadline) {
			t.Fatalf("not balanced after %s: %s", testutil.Deadline(settle), last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Scenario 4: changing one connector (through `berth apply`, or through an
// agent's own file and SIGHUP) touches only that connector's jobs: a limits
// change updates its tasks in place (same PIDs, new memory limit in the
// cgroup), a command change restarts them; every other job keeps its
// process, on both agents.
func TestClusterApplyChangesOnlyThatConnector(t *testing.T) {
	t.Run("apply", func(t *testing.T) {
		out, _ := exec.Command(berthBin, "apply", "-h").CombinedOutput()
		if strings.Contains(string(out), "unknown command") {
			t.Skip("this berth binary has no apply command yet")
		}
		applyScenario(t, func(t *testing.T, via *applyAgent, workload string) {
			f := filepath.Join(t.TempDir(), "connectors.toml")
			if err := os.WriteFile(f, []byte(workload), 0o644); err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command(berthBin, "apply", "--config", via.config, "-f", f).CombinedOutput()
			if err != nil {
				t.Fatalf("berth apply: %v\n%s", err, out)
			}
		})
	})
	t.Run("sighup", func(t *testing.T) {
		applyScenario(t, func(t *testing.T, via *applyAgent, workload string) {
			via.configure(via.spec, via.body+workload)
			if err := via.cmd.Process.Signal(syscall.SIGHUP); err != nil {
				t.Fatal(err)
			}
		})
	})
}

// applyAgent is an agent that remembers its [cluster] and [static] so that
// its file can be rewritten with another workload.
type applyAgent struct {
	*agent
	spec clusterSpec
	body string
}

func applyWorkload(yMemory, yMode string) string {
	return sleeperConnector("x", 2) + sleeperConnector("z", 1) + fmt.Sprintf(`
[[connector]]
name = "y"
tasks = 2
  [connector.run]
  command = ["sleep", "infinity"]
  [connector.task]
  command = ["sleep", "infinity"]
  env = { MODE = %q }
  limits = { memory = %q }
`, yMode, yMemory)
}

func applyScenario(t *testing.T, change func(t *testing.T, via *applyAgent, workload string)) {
	eps := embeddedEtcd(t)
	spec := clusterSpec{name: clusterName(), endpoints: eps}
	a := &applyAgent{agent: newAgent(t, "a"), spec: spec,
		body: staticTable([]string{"x", "y"}, []string{"x-0", "x-1", "y-0", "y-1"})}
	b := &applyAgent{agent: newAgent(t, "b"), spec: spec, body: staticTable([]string{"z"}, []string{"z-0"})}
	a.configure(spec, a.body+applyWorkload("128MiB", "1"))
	b.configure(spec, b.body+applyWorkload("128MiB", "1"))
	a.start()
	b.start()
	wantA := []string{"x", "x-0", "x-1", "y", "y-0", "y-1"}
	before := map[string]api.Job{}
	for id, j := range a.waitExactly(settle, wantA...) {
		before[id] = j
	}
	for id, j := range b.waitExactly(settle, "z", "z-0") {
		before[id] = j
	}
	for _, id := range []string{"y-0", "y-1"} {
		if m, ok := a.memoryLimit(id); !ok || m != 128<<20 {
			t.Fatalf("job %s memory limit %d (%v), want 128MiB", id, m, ok)
		}
	}

	// 1. Limits only: y's tasks are updated in place. The change goes in
	// through b, the agent that does not run y.
	change(t, b, applyWorkload("64MiB", "1"))
	testutil.Eventually(t, settle, "y-0 and y-1 limited to 64MiB", func() bool {
		for _, id := range []string{"y-0", "y-1"} {
			if m, ok := a.memoryLimit(id); !ok || m != 64<<20 {
				return false
			}
		}
		return true
	})
	after := allJobs(t, a, b, wantA)
	for id, j := range before {
		if after[id].PID != j.PID {
			t.Errorf("limits change of y: job %s pid %d -> %d; want every process kept", id, j.PID, after[id].PID)
		}
	}

	// 2. Command (env) change: y's tasks restart, nothing else does.
	change(t, b, applyWorkload("64MiB", "2"))
	testutil.Eventually(t, settle, "y-0 and y-1 restarted with MODE=2", func() bool {
		js, err := a.tryJobs()
		if err != nil {
			return false
		}
		for _, id := range []string{"y-0", "y-1"} {
			j := js[id]
			if j.State != "running" || j.PID == before[id].PID || environOf(j.PID, "MODE") != "2" {
				return false
			}
		}
		return true
	})
	after = allJobs(t, a, b, wantA)
	for id, j := range after {
		if id == "y-0" || id == "y-1" {
			a.checkOnProc(map[string]api.Job{id: j})
		}
	}
	for id, j := range before {
		restarted := after[id].PID != j.PID
		if want := id == "y-0" || id == "y-1"; restarted != want {
			t.Errorf("command change of y's tasks: job %s restarted = %v, want %v", id, restarted, want)
		}
	}
}

// allJobs is the running jobs of a (exactly wantA) and b (exactly z, z-0).
func allJobs(t *testing.T, a, b *applyAgent, wantA []string) map[string]api.Job {
	t.Helper()
	out := map[string]api.Job{}
	for id, j := range a.waitExactly(settle, wantA...) {
		out[id] = j
	}
	for id, j := range b.waitExactly(settle, "z", "z-0") {
		out[id] = j
	}
	return out
}

// memoryLimit reads the memory limit of the agent's cgroup of job, bytes:
// v1 memory.limit_in_bytes, else v2 memory.max ("max" is not a limit).
func (a *agent) memoryLimit(job string) (int64, bool) {
	for _, f := range []string{
		filepath.Join("/sys/fs/cgroup/memory", a.root, "jobs", job, "memory.limit_in_bytes"),
		filepath.Join("/sys/fs/cgroup", a.root, "jobs", job, "memory.max"),
	} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		return n, err == nil
	}
	return 0, false
}

// Rule 5: a departed member's jobs stay unassigned for rebalance_delay. A
// declarer that restarts within the delay gets its jobs back without the
// standby ever running them; one that stays away loses them to the standby
// only once the delay has passed.
func TestClusterRebalanceDelayHoldsJobs(t *testing.T) {
	const delay = 3 * time.Second
	eps := embeddedEtcd(t)
	c := clusterSpec{name: clusterName(), endpoints: eps, rebalanceDelay: delay.String()}
	stamps := t.TempDir()
	workload := fmt.Sprintf(`
[[connector]]
name = "d"
tasks = 1
  [connector.run]
  command = %[1]s
  [connector.task]
  command = %[1]s
`, stampCommand(stamps, 0))
	jobs := []string{"d", "d-0"}
	a, b := newAgent(t, "a"), newAgent(t, "b")
	a.configure(c, staticTable([]string{"d"}, []string{"d-0"})+workload)
	b.configure(c, staticTable(nil, nil)+workload)
	a.start()
	a.waitExactly(settle, jobs...)
	b.start()
	b.waitMember(settle)
	b.waitExactly(settle)

	// 1. Away for less than the delay: held, then back to a.
	if err := a.stop(syscall.SIGTERM); err != nil {
		t.Fatalf("a exit on SIGTERM: %v", err)
	}
	left := time.Now()
	testutil.Eventually(t, settle, "a's jobs unassigned, held for a", func() bool {
		as, err := b.assignment()
		return err == nil && as.Unassigned["d"] != "" && as.Unassigned["d-0"] != ""
	})
	as, _ := b.assignment()
	t.Logf("while a is away: unassigned %v", as.Unassigned)
	a.start()
	ja := a.waitExactly(settle, jobs...)
	if away := time.Since(left); away >= delay {
		t.Fatalf("a was away %s, not less than the %s delay; the test cannot show the hold", away, delay)
	}
	waitStamped(t, stamps, ja)
	js, err := b.tryJobs()
	if err != nil || len(js) != 0 {
		t.Errorf("standby lists jobs %s (%v) after a came back within the delay", describeJobs(js), err)
	}
	for _, job := range jobs {
		for _, iv := range stampIntervals(t, filepath.Join(stamps, job+".log")) {
			if owner(iv.Worker, a, b) != "a" {
				t.Errorf("job %s ran on %s (%s) although a came back within the delay", job, owner(iv.Worker, a, b), iv)
			}
		}
	}

	// 2. Away for good: the standby takes the jobs, not before the delay.
	// a leaves (its lease is revoked) between the signal and its exit:
	// measured from the signal, the standby's start is never early when
	// the delay is kept, whatever the load does to a's exit.
	left = time.Now()
	if err := a.stop(syscall.SIGTERM); err != nil {
		t.Fatalf("a exit on SIGTERM: %v", err)
	}
	b.waitExactly(settle, jobs...)
	took := time.Since(left)
	t.Logf("standby running a's jobs %s after a was told to stop (rebalance_delay %s)", took.Round(time.Millisecond), delay)
	if took < delay {
		t.Errorf("standby took a's jobs %s after a was told to stop, before the %s rebalance_delay", took, delay)
	}
}
