package test

// Harness for the cluster end-to-end tests: an etcd per test
// (embedded in the test process, or Debian's etcd-server as a child), agents
// that are cluster members, readers of the cluster API, /proc checks, and
// the job that stamps its own lifetime into a file.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berthd/berth/api"
	"github.com/berthd/berth/cluster/embedetcd"
	"github.com/berthd/berth/internal/testutil"
)

// sessionTTL is the session lease TTL every test agent uses: the smallest
// the agent accepts (limits.MinSessionTTL, whole seconds).
const sessionTTL = 2 * time.Second

// externalEtcdBin is the server binary of Debian's etcd-server package
// (`apt-get install -y etcd-server`, done by .ci/run).
const externalEtcdBin = "/usr/bin/etcd"

// embeddedEtcd starts a single-node etcd inside the test process, data in a
// temporary directory, closed in Cleanup, and returns its client URLs.
func embeddedEtcd(t testing.TB) []string {
	t.Helper()
	testutil.NeedRoot(t)
	em, err := embedetcd.Start(t.TempDir())
	if err != nil {
		t.Fatalf("start embedded etcd: %v", err)
	}
	t.Cleanup(em.Close)
	return em.Endpoints()
}

// externalEtcd runs /usr/bin/etcd as a child process on free loopback ports
// in a temporary directory and returns its client URL once /health answers.
// The process is killed by PID in Cleanup. It skips the test when the binary
// is not installed.
func externalEtcd(t testing.TB) []string {
	t.Helper()
	return externalEtcdOn(t, testutil.FreePort(t))
}

// externalEtcdOn is externalEtcd serving its clients on addr (host:port).
func externalEtcdOn(t testing.TB, addr string) []string {
	t.Helper()
	client := "http://" + addr
	out := &testutil.SyncBuffer{}
	exited := runEtcd(t, "berth-e2e", client, out)
	testutil.Eventually(t, 20*time.Second, "external etcd /health", func() bool {
		checkRunning(t, exited, out)
		var h struct {
			Health string `json:"health"`
		}
		return getAPI(client, "/health", &h) == nil && h.Health == "true"
	})
	return []string{client}
}

// runEtcd starts /usr/bin/etcd as a child process, member name, serving
// clients at the URL client (more: further flags) with its data in a
// temporary directory and its peer URL on a free loopback port, output to
// out, and returns at once; the channel receives its exit. Cleanup kills
// it by PID (and logs out when the test failed). It skips the test when
// the binary is not installed.
func runEtcd(t testing.TB, name, client string, out *testutil.SyncBuffer, more ...string) chan error {
	t.Helper()
	testutil.NeedRoot(t)
	if _, err := os.Stat(externalEtcdBin); err != nil {
		t.Skipf("%s not installed (apt-get install -y etcd-server): %v", externalEtcdBin, err)
	}
	peer := "http://" + testutil.FreePort(t)
	cmd := exec.Command(externalEtcdBin, append([]string{
		"--name", name, "--data-dir", filepath.Join(t.TempDir(), "data"),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", name + "=" + peer, "--log-level", "error"}, more...)...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", externalEtcdBin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("etcd (%s) output:\n%s", externalEtcdBin, out)
		}
	})
	return exited
}

// checkRunning fails the test when the etcd of runEtcd whose exit exited
// receives has exited (leaving the exit for the next look).
func checkRunning(t testing.TB, exited chan error, out *testutil.SyncBuffer) {
	t.Helper()
	select {
	case err := <-exited:
		exited <- err
		t.Fatalf("%s exited early: %v\n%s", externalEtcdBin, err, out)
	default:
	}
}

// clusterName is a cluster name unique to one test run (key prefix
// /berth/<name>/), so that tests never see each other's members.
func clusterName() string {
	return "e2e-" + randSuffix()
}

// clusterSpec is the [cluster] table of one agent.
type clusterSpec struct {
	name           string
	endpoints      []string
	protocol       string // "" leaves the default (static)
	rebalanceDelay string // "" leaves the default (0s)
}

// agent is one cluster member under test: its own config file, data and log
// directories, listen address and cgroup root (from newEnv).
type agent struct {
	*env
	id string
	// agentKeys are more lines of its [agent] table (web_config_file).
	agentKeys string
}

func newAgent(t testing.TB, id string) *agent {
	return &agent{env: newEnv(t), id: id}
}

// configure writes the agent's file: [agent] (stop_timeout 5 s), [cluster]
// from c with session_ttl 2 s, then body ([static], [[connector]], ...).
func (a *agent) configure(c clusterSpec, body string) {
	a.t.Helper()
	eps := make([]string, len(c.endpoints))
	for i, ep := range c.endpoints {
		eps[i] = strconv.Quote(ep)
	}
	var b strings.Builder
	fmt.Fprintf(&b, `[agent]
id = %q
data_dir = %q
log_dir = %q
listen = %q
cgroup_root = %q
stop_timeout = "5s"
%s
[cluster]
name = %q
endpoints = [%s]
session_ttl = %q
`, a.id, filepath.Join(a.dir, "data"), filepath.Join(a.dir, "log"), a.addr, a.root, a.agentKeys,
		c.name, strings.Join(eps, ", "), sessionTTL.String())
	if c.protocol != "" {
		fmt.Fprintf(&b, "protocol = %q\n", c.protocol)
	}
	if c.rebalanceDelay != "" {
		fmt.Fprintf(&b, "rebalance_delay = %q\n", c.rebalanceDelay)
	}
	b.WriteString("\n")
	b.WriteString(body)
	a.write(b.String())
}

// staticTable is a [static] table; no names makes the agent a standby.
func staticTable(connectors, tasks []string) string {
	q := func(xs []string) string {
		out := make([]string, len(xs))
		for i, x := range xs {
			out[i] = strconv.Quote(x)
		}
		return "[" + strings.Join(out, ", ") + "]"
	}
	return fmt.Sprintf("[static]\nconnectors = %s\ntasks = %s\n\n", q(connectors), q(tasks))
}

// ---- the cluster API of an agent ----

// getAPI decodes the JSON answer of GET base+path into v with the API's own
// client (api.Client, 3 s per request); any transport error or non-2xx
// status is an error (tests poll through these).
func getAPI(base, path string, v any) error {
	c := api.NewClient(base)
	c.HTTP.Timeout = 3 * time.Second
	return c.Get(context.Background(), path, v)
}

func (a *agent) tryJobs() (map[string]api.Job, error) {
	var js []api.Job
	if err := getAPI(a.addr, "/v1/jobs", &js); err != nil {
		return nil, err
	}
	out := make(map[string]api.Job, len(js))
	for _, j := range js {
		out[j.ID] = j
	}
	return out, nil
}

func (a *agent) info() (api.Agent, error) {
	var ai api.Agent
	return ai, getAPI(a.addr, "/v1/agent", &ai)
}

func (a *agent) assignment() (api.Assignment, error) {
	var as api.Assignment
	return as, getAPI(a.addr, "/v1/assignment", &as)
}

func (a *agent) members() ([]api.Member, error) {
	var ms []api.Member
	return ms, getAPI(a.addr, "/v1/members", &ms)
}

// runningIDs is the sorted IDs of the jobs the agent reports running with
// a PID; nil when it does not answer.
func runningIDs(js map[string]api.Job) []string {
	var ids []string
	for id, j := range js {
		if j.State == "running" && j.PID > 0 {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	return ids
}

func sameSet(a, b []string) bool {
	a, b = sorted(a), sorted(b)
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func sorted(xs []string) []string {
	out := append([]string(nil), xs...)
	sort.Strings(out)
	return out
}

// waitExactly waits until the agent lists exactly the jobs want in
// /v1/jobs, every one running with a PID, and returns them.
func (a *agent) waitExactly(timeout time.Duration, want ...string) map[string]api.Job {
	a.t.Helper()
	var js map[string]api.Job
	var err error
	deadline := time.Now().Add(testutil.Deadline(timeout))
	for {
		js, err = a.tryJobs()
		if err == nil && len(js) == len(want) && sameSet(runningIDs(js), want) {
			return js
		}
		if time.Now().After(deadline) {
			a.t.Fatalf("agent %s: after %s /v1/jobs = %s (err %v), want exactly %v running", a.id, timeout, describeJobs(js), err, sorted(want))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func describeJobs(js map[string]api.Job) string {
	ids := make([]string, 0, len(js))
	for id := range js {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var parts []string
	for _, id := range ids {
		j := js[id]
		s := fmt.Sprintf("%s:%s/%d", id, j.State, j.PID)
		if j.Reason != "" {
			s += "(" + j.Reason + ")"
		}
		parts = append(parts, s)
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// waitMember waits until the agent reports state "member".
func (a *agent) waitMember(timeout time.Duration) api.Agent {
	a.t.Helper()
	var ai api.Agent
	testutil.Eventually(a.t, timeout, "agent "+a.id+" state member", func() bool {
		var err error
		ai, err = a.info()
		return err == nil && ai.State == "member"
	})
	return ai
}

// counter reads an unlabelled counter or gauge from /metrics.
func (a *agent) counter(name string) (float64, bool) {
	a.t.Helper()
	m := a.metrics()
	if v, ok := m[name]; ok {
		return v, true
	}
	return metric(m, name, "")
}

// ---- /proc ----

// jobCgroupSuffix is the path of a job's cgroup below the hierarchy root,
// as /proc/PID/cgroup shows it for an ungrouped job.
func (a *agent) jobCgroupSuffix(job string) string {
	return "/" + a.root + "/jobs/" + job
}

// inJobCgroup reports whether /proc/pid/cgroup puts pid in this agent's
// cgroup of job (on at least one hierarchy, and on none outside it except
// hierarchies the agent does not use). It returns the lines read for the
// failure message.
func (a *agent) inJobCgroup(pid int, job string) (bool, string) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return false, err.Error()
	}
	want := a.jobCgroupSuffix(job)
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) == 3 && (parts[2] == want || strings.HasPrefix(parts[2], want+"/")) {
			return true, string(b)
		}
	}
	return false, string(b)
}

// environOf returns one variable of /proc/pid/environ.
func environOf(pid int, name string) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		return ""
	}
	for _, kv := range strings.Split(string(b), "\x00") {
		if v, ok := strings.CutPrefix(kv, name+"="); ok {
			return v
		}
	}
	return ""
}

// jobProcs is every PID in this agent's cgroup of job, in any hierarchy.
func (a *agent) jobProcs(job string) []int {
	var pids []int
	for _, d := range a.cgroupDirs() {
		pids = append(pids, testutil.ProcsUnder(filepath.Join(d, "jobs", job))...)
	}
	return uniq(pids)
}

// checkOnProc asserts that every running job of js is a live process in
// this agent's cgroup of that job, started for that job (BERTH_JOB_ID).
func (a *agent) checkOnProc(js map[string]api.Job) {
	a.t.Helper()
	for id, j := range js {
		if !testutil.Alive(j.PID) {
			a.t.Errorf("agent %s: job %s pid %d is not alive", a.id, id, j.PID)
			continue
		}
		if ok, cg := a.inJobCgroup(j.PID, id); !ok {
			a.t.Errorf("agent %s: job %s pid %d is not in %s:\n%s", a.id, id, j.PID, a.jobCgroupSuffix(id), cg)
		}
		if got := environOf(j.PID, "BERTH_JOB_ID"); got != id {
			a.t.Errorf("agent %s: pid %d of job %s has BERTH_JOB_ID=%q", a.id, j.PID, id, got)
		}
		found := false
		for _, p := range a.jobProcs(id) {
			found = found || p == j.PID
		}
		if !found {
			a.t.Errorf("agent %s: pid %d of job %s not in the cgroup.procs of %s", a.id, j.PID, id, a.jobCgroupSuffix(id))
		}
	}
}

// ---- the stamping job ----

// stampCommand is the TOML command array of a job that appends a line
// "<cgroup> <pid> <unix-nanos>" to <dir>/<job-id>.log every 20 ms, where
// <cgroup> is $BERTH_CGROUP, "/<cgroup_root>/jobs/<job>": it names the
// agent that runs the worker (the command itself comes from the cluster's
// workload, the same text on every agent). On SIGTERM it goes on stamping
// for lingerStamps more lines (≈ lingerStamps × 20 ms) before it exits 0, so
// that a graceful stop takes visible time during which no other worker of
// the job may run. SIGKILL (fencing) stops it at once. The agent expands
// ${BERTH_JOB_ID} and turns "$$" into "$". The pid stamped is the shell's
// as the host sees it, the one /v1/jobs shows (/proc/self/stat, read by a
// builtin: /proc is the host's), not $$, its number in the guard's jobs
// PID namespace.
//
// A stop signals every process of the job's cgroup (kill_mode
// control-group), /bin/date and /bin/sleep too: a stamp is written only
// when its time was read, so a date killed mid-stamp leaves no half line.
func stampCommand(dir string, lingerStamps int) string {
	script := fmt.Sprintf(`f=%s/${BERTH_JOB_ID}.log
read -r me _ < /proc/self/stat
stamp() { t=$(/bin/date +%%s%%N) && [ -n "$t" ] && echo "$BERTH_CGROUP $me $t" >> "$f"; }
trap 'n=0; while [ $n -lt %d ]; do stamp; /bin/sleep 0.02; n=$((n+1)); done; exit 0' TERM
while :; do stamp; /bin/sleep 0.02; done`, dir, lingerStamps)
	script = strings.ReplaceAll(script, "$$", "$$$$")
	return fmt.Sprintf("[%q, %q, %s]", "/bin/sh", "-c", strconv.Quote(script))
}

// owner names the agent whose cgroup root appears in a stamp's cgroup.
func owner(cg string, agents ...*agent) string {
	for _, a := range agents {
		if strings.HasPrefix(cg, "/"+a.root+"/") {
			return a.id
		}
	}
	return cg
}

// waitStamped waits until each running job of js has written at least one
// stamp from its current PID to <dir>/<job>.log: "running" in /v1/jobs
// comes before the worker's shell has stamped its first line.
func waitStamped(t testing.TB, dir string, js map[string]api.Job) {
	t.Helper()
	for id, j := range js {
		testutil.Eventually(t, 10*time.Second, fmt.Sprintf("a stamp of job %s from pid %d", id, j.PID), func() bool {
			ss, err := testutil.ReadStamps(filepath.Join(dir, id+".log"))
			if err != nil {
				return false
			}
			for i := len(ss) - 1; i >= 0; i-- {
				if ss[i].PID == j.PID {
					return true
				}
			}
			return false
		})
	}
}
