package test

import (
	"context"
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
	"github.com/berthd/berth/fencing"
	"github.com/berthd/berth/internal/testutil"
	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sys/unix"
)

// tokenWorld is one agent (session TTL 30 s, for the restarts in it) with
// a connector "tok" whose own job and one task sleep, restarted always.
const tokenWorld = `
[cluster]
session_ttl = "30s"

[static]
connectors = ["tok"]
tasks = ["tok-0"]

[[connector]]
name = "tok"
tasks = 1
  [connector.run]
  command = ["sleep", "1000"]
  restart = "always"
  [connector.task]
  command = ["sleep", "1001"]
  restart = "always"
`

// tokenOf is the fencing token in the environment of process pid. A
// process's environment reads empty for a moment after its exec began
// (its descriptors are closed on exec, so the start is reported, before
// the kernel has set up its new stack): it is read again until it is not.
func tokenOf(t *testing.T, pid int) uint64 {
	t.Helper()
	var v string
	testutil.Eventually(t, 10*time.Second, fmt.Sprintf("the environment of pid %d", pid), func() bool {
		v = environOf(pid, "BERTH_FENCING_TOKEN")
		return v != "" || !testutil.Alive(pid)
	})
	tok, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		t.Fatalf("pid %d: BERTH_FENCING_TOKEN %q: %v", pid, v, err)
	}
	return tok
}

// checkTokens checks that every job of js runs with the token /v1/jobs
// shows, and returns them.
func checkTokens(t *testing.T, js map[string]api.Job, ids ...string) map[string]uint64 {
	t.Helper()
	out := map[string]uint64{}
	for _, id := range ids {
		j := js[id]
		if tok := tokenOf(t, j.PID); j.FencingToken == 0 || tok != j.FencingToken {
			t.Fatalf("%s (pid %d): BERTH_FENCING_TOKEN %d, /v1/jobs says %d", id, j.PID, tok, j.FencingToken)
		}
		out[id] = j.FencingToken
	}
	return out
}

// waitRestarted waits until job id runs with another pid than old.
func (e *env) waitRestarted(id string, old int) api.Job {
	e.t.Helper()
	var j api.Job
	testutil.Eventually(e.t, 30*time.Second, id+" restarted", func() bool {
		j = e.jobs()[id]
		return j.State == "running" && j.PID != 0 && j.PID != old
	})
	return j
}

func boottime(t *testing.T) int64 {
	t.Helper()
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		t.Fatal(err)
	}
	return ts.Nano()
}

// Every run gets a fencing token (BERTH_FENCING_TOKEN) that /v1/jobs, the
// Connect status, berth status --wide, the "job running" line and the
// record show; a restart by the policy, a requested restart and a reload
// that restarts a job each give a greater one; a run adopted after the
// agent was SIGKILLed, or after berth upgrade, keeps its own; every run
// reads the claim file, whose deadline is the session's expiry, and a
// clean stop removes it.
func TestFencingTokenEveryRun(t *testing.T) {
	e := newEnv(t)
	e.bin = filepath.Join(e.dir, "berth")
	copyFile(t, berthBin, e.bin)
	e.write(e.header("2s") + tokenWorld)
	e.start()
	js := e.waitRunning("tok", "tok-0")
	tok := checkTokens(t, js, "tok", "tok-0")

	// The claim file: the same for every run, the session's expiry on
	// the job's clock, in the next 30 s.
	claimPath := fencing.ClaimFilePath(filepath.Join(e.dir, "data"))
	if got := environOf(js["tok"].PID, "BERTH_CLAIM_FILE"); got != claimPath {
		t.Fatalf("BERTH_CLAIM_FILE %q, want %s", got, claimPath)
	}
	now := boottime(t)
	deadline, member, _, err := fencing.ReadClaim(claimPath)
	if err != nil || member != "e2e" || deadline <= now || deadline > now+int64(31*time.Second) {
		t.Fatalf("claim file: deadline %d (now %d), member %q, %v", deadline, now, member, err)
	}
	testutil.Eventually(t, 30*time.Second, "the claim file's deadline moves on with the renewals", func() bool {
		d, _, _, err := fencing.ReadClaim(claimPath)
		return err == nil && d > deadline
	})

	// Where the token shows.
	var cs api.ConnectorStatus
	getJSON(t, "http://"+e.addr+"/connectors/tok/status", &cs)
	if cs.Connector.FencingToken != tok["tok"] || len(cs.Tasks) != 1 || cs.Tasks[0].FencingToken != tok["tok-0"] {
		t.Errorf("Connect status %+v, want tokens %v", cs, tok)
	}
	wide := e.berth("status", "--wide")
	if !strings.Contains(wide, "TOKEN") || !strings.Contains(wide, " "+strconv.FormatUint(tok["tok"], 10)+" ") {
		t.Errorf("berth status --wide shows no token %d:\n%s", tok["tok"], wide)
	}
	line := fmt.Sprintf(`msg="job running" job_id=tok pid=%d restarts=0 fencing_token=%d`, js["tok"].PID, tok["tok"])
	if !strings.Contains(e.out.String(), line) {
		t.Errorf("no %s in the agent's log", line)
	}
	record, err := os.ReadFile(fencing.RecordPath(filepath.Join(e.dir, "data")))
	if err != nil || !strings.Contains(string(record), fmt.Sprintf("token tok %d\n", tok["tok"])) {
		t.Errorf("fencing record (%v):\n%s", err, record)
	}

	// A restart by the restart policy: a greater token.
	if err := syscall.Kill(js["tok"].PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	j := e.waitRestarted("tok", js["tok"].PID)
	if got := tokenOf(t, j.PID); got <= tok["tok"] || got != j.FencingToken {
		t.Fatalf("after a restart by the policy: token %d (shown %d), before %d", got, j.FencingToken, tok["tok"])
	}
	tok["tok"] = j.FencingToken

	// A requested restart: a greater token.
	e.berth("restart", "tok-0")
	j = e.waitRestarted("tok-0", js["tok-0"].PID)
	if got := tokenOf(t, j.PID); got <= tok["tok-0"] {
		t.Fatalf("after a requested restart: token %d, before %d", got, tok["tok-0"])
	}
	tok["tok-0"] = j.FencingToken

	// A reload that restarts the task (its command changed): greater.
	e.write(e.header("2s") + strings.Replace(tokenWorld, `["sleep", "1001"]`, `["sleep", "1002"]`, 1))
	e.berth("reload")
	j = e.waitRestarted("tok-0", j.PID)
	if got := tokenOf(t, j.PID); got <= tok["tok-0"] {
		t.Fatalf("after a reload restarted it: token %d, before %d", got, tok["tok-0"])
	}
	tok["tok-0"] = j.FencingToken

	// Live restart: the agent SIGKILLed and started again adopts each
	// run with its token.
	before := e.waitRunning("tok", "tok-0")
	if err := e.stop(syscall.SIGKILL); err == nil {
		t.Fatal("agent killed by SIGKILL reported success")
	}
	e.start()
	after := e.waitRunning("tok", "tok-0")
	for _, id := range []string{"tok", "tok-0"} {
		if after[id].PID != before[id].PID || after[id].FencingToken != tok[id] {
			t.Errorf("%s after the crash: pid %d token %d, before pid %d token %d", id, after[id].PID, after[id].FencingToken, before[id].PID, tok[id])
		}
	}

	// berth upgrade: the same runs, the same tokens.
	if out, err := exec.Command(berthBin, "upgrade", "--config", e.config).CombinedOutput(); err != nil {
		t.Fatalf("berth upgrade: %v\n%s", err, out)
	}
	after = e.waitRunning("tok", "tok-0")
	for _, id := range []string{"tok", "tok-0"} {
		if after[id].PID != before[id].PID || after[id].FencingToken != tok[id] {
			t.Errorf("%s after berth upgrade: pid %d token %d, before pid %d token %d", id, after[id].PID, after[id].FencingToken, before[id].PID, tok[id])
		}
	}
	// And the next run of an adopted job still gets a greater token.
	if err := syscall.Kill(after["tok"].PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if j := e.waitRestarted("tok", after["tok"].PID); j.FencingToken <= tok["tok"] {
		t.Fatalf("the adopted job's next run: token %d, before %d", j.FencingToken, tok["tok"])
	}

	if err := e.stop(syscall.SIGTERM); err != nil {
		t.Fatalf("clean stop: %v", err)
	}
	if _, err := os.Stat(claimPath); !os.IsNotExist(err) {
		t.Errorf("claim file after a clean stop: %v", err)
	}
}

// The embedded store's data lost (<data_dir>/etcd deleted while the agent
// was stopped): its revisions start again from 1, below the tokens the
// record holds. The job is refused, with an ERROR naming it, both numbers
// and what to do, its state says why, and the agent runs on; once the
// record is moved aside (no resource checks the job's tokens) it starts.
func TestFencingRefusesTokenBelowTheRecord(t *testing.T) {
	e := newEnv(t)
	e.write(e.header("2s") + `
[static]
connectors = ["orders"]

[[connector]]
name = "orders"
  [connector.run]
  command = ["sleep", "1000"]
`)
	e.start()
	// A few requested restarts: the store's revisions (and the tokens)
	// well past where a new store's first claim lands.
	j := e.waitRunning("orders")["orders"]
	for range 3 {
		e.berth("restart", "orders")
		j = e.waitRestarted("orders", j.PID)
	}
	first := j.FencingToken
	if err := e.stop(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(e.dir, "data")
	if err := os.RemoveAll(filepath.Join(data, "etcd")); err != nil {
		t.Fatal(err)
	}

	e.start()
	testutil.Eventually(t, 30*time.Second, "the job refused", func() bool {
		j = e.jobs()["orders"]
		return j.State == "backoff" && strings.Contains(j.Reason, "refused to start")
	})
	if j.PID != 0 || !strings.Contains(j.Reason, fmt.Sprintf("would not exceed %d, the highest berth handed out for it", first)) ||
		!strings.Contains(j.Reason, "job orders") || !strings.Contains(j.Reason, "--bump-revision") {
		t.Errorf("refused job: %+v", j)
	}
	log := e.out.String()
	if !strings.Contains(log, `level=ERROR msg="job refused to start: its fencing token would not exceed the tokens handed out before" job_id=orders`) ||
		!strings.Contains(log, fmt.Sprintf("highest=%d", first)) || !strings.Contains(log, "move "+fencing.RecordPath(data)+" aside") {
		t.Errorf("no ERROR naming the job, the numbers and the remedy:\n%s", log)
	}
	if jobs := e.jobs(); len(jobs) != 1 {
		t.Errorf("jobs %v", jobs)
	}

	// What to do, when no resource checks the tokens: the record aside.
	if err := e.stop(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(fencing.RecordPath(data), fencing.RecordPath(data)+".old"); err != nil {
		t.Fatal(err)
	}
	e.start()
	if j := e.waitRunning("orders")["orders"]; j.FencingToken == 0 {
		t.Errorf("after the record was moved aside: %+v", j)
	}
}

// A run whose token cannot be written (the record cannot be replaced, as
// on a read-only or full data_dir) does not start: its state says why,
// the log has an ERROR; it starts with a greater token once the record
// can be written. The same for a claim file a renewal cannot write.
func TestFencingRecordUnwritable(t *testing.T) {
	e := newEnv(t)
	e.write(e.header("2s") + `
[static]
connectors = ["w"]

[[connector]]
name = "w"
  [connector.run]
  command = ["sleep", "1000"]
  restart = "always"
`)
	e.start()
	j := e.waitRunning("w")["w"]
	record := fencing.RecordPath(filepath.Join(e.dir, "data"))
	// A directory in its place: the atomic rename over it fails.
	if err := os.Remove(record); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(record, "in-the-way"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(j.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var w api.Job
	testutil.Eventually(t, 30*time.Second, "the restart held back", func() bool {
		w = e.jobs()["w"]
		return w.State == "backoff" && strings.Contains(w.Reason, "cannot be recorded")
	})
	if w.PID != 0 || !strings.Contains(w.Reason, record) {
		t.Errorf("job without a recorded token: %+v", w)
	}
	if !strings.Contains(e.out.String(), `level=ERROR msg="job not started: its run has no fencing token; trying again with backoff" job_id=w`) {
		t.Errorf("no ERROR for the unrecorded token:\n%s", e.out)
	}
	if err := os.RemoveAll(record); err != nil {
		t.Fatal(err)
	}
	w = e.waitRestarted("w", j.PID)
	if w.FencingToken <= j.FencingToken || tokenOf(t, w.PID) != w.FencingToken {
		t.Fatalf("after the record came back: token %d, before %d", w.FencingToken, j.FencingToken)
	}
	if b, err := os.ReadFile(record); err != nil || !strings.Contains(string(b), fmt.Sprintf("token w %d\n", w.FencingToken)) {
		t.Errorf("record (%v):\n%s", err, b)
	}

	// The same for the claim file: once a renewal cannot write it, no
	// run starts until one can.
	claim := fencing.ClaimFilePath(filepath.Join(e.dir, "data"))
	if err := os.Remove(claim); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(claim, "in-the-way"), 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(claim) })
	testutil.Eventually(t, 30*time.Second, "a renewal that cannot write the claim file", func() bool {
		return strings.Contains(e.out.String(), `level=ERROR msg="the claim file cannot be written: no run starts until it is" path=`+claim)
	})
	if err := syscall.Kill(w.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "the restart held back for the claim file", func() bool {
		w = e.jobs()["w"]
		return w.State == "backoff" && strings.Contains(w.Reason, "claim file "+claim)
	})
	if err := os.RemoveAll(claim); err != nil {
		t.Fatal(err)
	}
	e.waitRestarted("w", 0)
	if _, _, _, err := fencing.ReadClaim(claim); err != nil {
		t.Errorf("the claim file after it could be written again: %v", err)
	}
}

// exampleScript is the worked example of docs/fencing.md: a job that writes
// to an etcd of its own only through a fence on its token.
const exampleScript = "../packaging/examples/fenced-writer.sh"

// docs/fencing.md quotes the example the test below runs, as it is.
func TestFencingDocQuotesTheExample(t *testing.T) {
	script, err := os.ReadFile(exampleScript)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile("../docs/fencing.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), "```sh\n"+string(script)+"```\n") {
		t.Errorf("docs/fencing.md does not quote %s as it is", exampleScript)
	}
}

// stopAll sends SIGSTOP to pids() until every process it lists is
// stopped (a job forks while it is being stopped) and returns them.
func stopAll(t *testing.T, pids func() []int) []int {
	t.Helper()
	var got []int
	testutil.Eventually(t, 10*time.Second, "every process stopped", func() bool {
		got = pids()
		all := true
		for _, pid := range got {
			_ = syscall.Kill(pid, syscall.SIGSTOP)
			if st, ok := procState(pid); ok && st != 'T' && st != 't' {
				all = false
			}
		}
		return all
	})
	return got
}

// procState is field 3 of /proc/PID/stat; false when the process is gone.
func procState(pid int) (byte, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 || i+2 >= len(b) {
		return 0, false
	}
	return b[i+2], true
}

// fenceHistory is every accepted write of the example's job to store, in
// the store's order: the token each carried (the value's second word),
// read from the store's history with a watch from revision 1.
func fenceHistory(t *testing.T, store, job string) []uint64 {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{store}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Deadline(20*time.Second))
	defer cancel()
	now, err := c.Get(ctx, "data/"+job)
	if err != nil {
		t.Fatal(err)
	}
	var out []uint64
	for wr := range c.Watch(ctx, "data/"+job, clientv3.WithRev(1)) {
		if err := wr.Err(); err != nil {
			t.Fatal(err)
		}
		for _, ev := range wr.Events {
			f := strings.Fields(string(ev.Kv.Value))
			tok, err := strconv.ParseUint(f[1], 10, 64)
			if err != nil || f[0] != "token" {
				t.Fatalf("a write of %s: %q", job, ev.Kv.Value)
			}
			out = append(out, tok)
			if ev.Kv.ModRevision >= now.Header.Revision {
				return out
			}
		}
	}
	t.Fatalf("the history of %s ended before revision %d", job, now.Header.Revision)
	return nil
}

// count is how many lines of file contain every one of subs.
func count(file string, subs ...string) int {
	b, _ := os.ReadFile(file)
	n := 0
	for _, line := range strings.Split(string(b), "\n") {
		all := true
		for _, s := range subs {
			all = all && strings.Contains(line, s)
		}
		if all {
			n++
		}
	}
	return n
}

// The worked example of docs/fencing.md, on the real binary: two agents
// (a declares the jobs, b is the standby) on an etcd, each job writing
// through the example script into a second etcd, its resource, that
// fences on the token. Agent a's whole tree (agent, guard, jobs) is
// stopped past the session TTL, as a paused host: b takes the jobs over
// with greater tokens. Then a's jobs run again while a's agent and guard
// stay stopped (the hung guard, or the first moment of a resumed host):
// two runs of each job at once. The run that checks its claim deadline
// does not try to write; the one that does not check is refused by the
// fence at every write; the resource's history never accepts a write of
// the older token after the newer's first.
func TestFencingWorkedExample(t *testing.T) {
	if _, err := exec.LookPath("etcdctl"); err != nil {
		t.Skip("etcdctl not installed (apt-get install etcd-client):", err)
	}
	script, err := filepath.Abs(exampleScript)
	if err != nil {
		t.Fatal(err)
	}
	store := externalEtcd(t)[0] // the jobs' resource, apart from berth's
	out := t.TempDir()
	c := clusterSpec{name: clusterName(), endpoints: embeddedEtcd(t), rebalanceDelay: "0s"}
	job := func(name, check string) string {
		return fmt.Sprintf(`
[[connector]]
name = %q
  [connector.run]
  command = ["/bin/sh", "-c", "exec /bin/sh %s >> %s/${BERTH_JOB_ID}.out 2>&1"]
  env = { STORE = %q, CHECK_DEADLINE = %q }
`, name, script, out, store, check)
	}
	workload := job("fenced", "yes") + job("unchecked", "no")
	jobs := []string{"fenced", "unchecked"}
	a, b := newAgent(t, "a"), newAgent(t, "b")
	a.configure(c, staticTable(jobs, nil)+workload)
	b.configure(c, staticTable(nil, nil)+workload)
	a.start()
	ja := a.waitExactly(settle, jobs...)
	b.start()
	b.waitMember(settle)
	older := map[string]uint64{}
	for _, id := range jobs {
		older[id] = ja[id].FencingToken
		testutil.Eventually(t, settle, id+"'s first write", func() bool {
			return count(filepath.Join(out, id+".out"), fmt.Sprintf("accepted (token %d)", older[id])) > 0
		})
	}

	// a's whole tree stopped, as a paused host: the guard first, so that
	// it does not kill at the deadline the agent no longer moves.
	guard := stopAll(t, a.guardPids)
	agent := stopAll(t, func() []int { return []int{a.cmd.Process.Pid} })
	var stale []int
	stopAll(t, func() []int {
		stale = append(a.jobProcs("fenced"), a.jobProcs("unchecked")...)
		return stale
	})
	t.Cleanup(func() { // a's agent and guard never run again
		for _, pid := range append(guard, agent...) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		<-a.waited // the agent's exit, before env.cleanup looks at it
		a.waited <- nil
	})
	jb := b.waitExactly(settle, jobs...)
	newer := map[string]uint64{}
	for _, id := range jobs {
		newer[id] = jb[id].FencingToken
		if newer[id] <= older[id] {
			t.Fatalf("%s: the standby's token %d, not above the paused run's %d", id, newer[id], older[id])
		}
		testutil.Eventually(t, settle, id+": the newer run's first write", func() bool {
			return count(filepath.Join(out, id+".out"), fmt.Sprintf("accepted (token %d)", newer[id])) > 0
		})
	}

	// The older runs go on, beside the newer ones.
	for _, pid := range a.jobProcs("fenced") {
		_ = syscall.Kill(pid, syscall.SIGCONT)
	}
	for _, pid := range a.jobProcs("unchecked") {
		_ = syscall.Kill(pid, syscall.SIGCONT)
	}
	testutil.Eventually(t, settle, "the older runs try", func() bool {
		return count(filepath.Join(out, "unchecked.out"), fmt.Sprintf("rejected (token %d)", older["unchecked"])) >= 3 &&
			count(filepath.Join(out, "fenced.out"), fmt.Sprintf("skipped (token %d)", older["fenced"])) >= 3
	})
	for _, id := range jobs {
		h := fenceHistory(t, store, id)
		first := -1
		for i, tok := range h {
			if tok == newer[id] && first < 0 {
				first = i
			}
			if first >= 0 && tok < newer[id] {
				t.Errorf("%s: the store accepted a write of token %d after the first of %d: %v", id, tok, newer[id], h)
			}
		}
		if first < 0 {
			t.Errorf("%s: no write of the newer token %d in the store: %v", id, newer[id], h)
		}
		t.Logf("%s: %d writes accepted (tokens %d then %d); the older run: %d rejected, %d skipped", id, len(h), older[id], newer[id],
			count(filepath.Join(out, id+".out"), fmt.Sprintf("rejected (token %d)", older[id])),
			count(filepath.Join(out, id+".out"), fmt.Sprintf("skipped (token %d)", older[id])))
	}
	if n := count(filepath.Join(out, "fenced.out"), fmt.Sprintf("rejected (token %d)", older["fenced"])); n > 0 {
		t.Logf("the deadline-checking older run was rejected %d times (a write under way when it was paused)", n)
	}
}
