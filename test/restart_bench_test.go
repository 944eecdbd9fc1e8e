package test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berthd/berth/api"
	"github.com/berthd/berth/internal/testutil"
	"github.com/prometheus/procfs"
)

// BenchmarkLiveRestart measures live restart (docs/live-restart.md) with
// N sleep(1) jobs and one counting job on the real agent, one round per
// iteration:
//
//   - cold start, on an empty data_dir: cold-ms from the agent's exec
//     to /v1/jobs showing every job running, cold-join-ms the same from
//     its "joined the cluster" line (what the start spends before the
//     join is the difference);
//   - crash and return: SIGKILL of the agent, then a new start.
//     kept-pct: jobs whose pid is the same after the restart (goal 100);
//     adopt-ms: from the new agent's exec to GET /v1/agent reporting the
//     adoption and /v1/jobs showing every job running with its old pid
//     (goal ≤ 1,000 ms); adopt-join-ms the same from its "joined the
//     cluster" line; adopt-seen-ms to the first GET /v1/agent reporting
//     the adoption (the rest of adopt-ms is the GET /v1/jobs that shows
//     the pids, which reads every job's cgroup);
//     lines-lost: numbers missing or repeated in the counting job's log
//     (goal 0);
//   - crash without return: SIGKILL of the agent, no new start.
//     dead-ms: from the kill to every job's main process dead;
//     deadline-ms: from the kill to the fencing deadline the agent last
//     reported (GET /v1/agent lease_deadline); dead-after-deadline-ms
//     must stay under the fencing margin (2 s with session_ttl 10 s: the
//     lease cannot expire before), the guard killing half a margin after
//     the deadline; guard-late-ms is how late after its own deadline the
//     guard logged its kill;
//   - cold-agent-cpu-ms, adopt-agent-cpu-ms: the agent's CPU time, user
//     and system, from its exec to cold-ms, and to adopt-seen-ms;
//   - guard-pss-anon-kib: the lease guard's own memory (Pss_Anon of
//     /proc/PID/smaps_rollup) while it holds the N+1 runs.
//
// make bench-restart runs it at N = 100, 1,000, 5,000 and 10,000.
//
// With BERTH_BENCH_PROFILE=DIR the agent serves net/http/pprof and each
// round saves, in DIR, the agent's CPU profile from its exec over
// BERTH_BENCH_PROFILE_COLD seconds of the cold start and
// BERTH_BENCH_PROFILE_ADOPT of the restart (cold-N.pprof, adopt-N.pprof;
// 0 or unset: none), and the agent's log of each (cold-N.log,
// adopt-N.log).
func BenchmarkLiveRestart(b *testing.B) {
	for _, n := range []int{100, 1000, 5000, 10000} {
		b.Run(fmt.Sprintf("jobs-%d", n), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				liveRestartRound(b, n)
			}
		})
	}
}

func liveRestartRound(b *testing.B, n int) {
	e := newEnv(b)
	e.write(e.header("2s") + fmt.Sprintf(`
[static]

[[connector]]
name = "s"
tasks = %d
  [connector.task]
  command = ["sleep", "infinity"]

`+counterJob, n))
	prof := benchProfiler(b, e, n)
	t0 := time.Now()
	prof.start("cold")
	e.start()
	all := func() map[string]api.Job {
		var js map[string]api.Job
		testutil.Eventually(b, 10*time.Minute, fmt.Sprintf("%d jobs running", n+1), func() bool {
			var err error
			if js, err = tryJobs(e); err != nil {
				return false // an answer late under load: ask again
			}
			running := 0
			for _, j := range js {
				if j.State == "running" {
					running++
				}
			}
			return running == n+1
		})
		return js
	}
	// Until the kernel counts every job's process, wait on pids.current
	// of <root>/jobs, which costs the agent nothing: GET /v1/jobs reads
	// every job's cgroup, seconds of the agent's CPU at 5,000 jobs on a
	// loaded host, which polled through the whole start is charged to it.
	testutil.Eventually(b, 10*time.Minute, fmt.Sprintf("%d job processes", n+1), func() bool {
		c, ok := jobsPidsCurrent(e)
		return !ok || c >= n+1
	})
	before := all()
	reportSince(b, e, t0, "cold")
	// Each main process's start time: on a busy host a pid (32,768 of
	// them by default) is soon another process's once the job's is dead.
	started := map[int]uint64{}
	for _, j := range before {
		if t, ok := startTime(j.PID); ok {
			started[j.PID] = t
		}
	}
	if cpu, ok := agentCPU(e); ok {
		b.ReportMetric(cpu, "cold-agent-cpu-ms")
	}
	prof.done("cold")
	var guard []int
	for _, d := range e.cgroupDirs() {
		guard = append(guard, testutil.ProcsUnder(filepath.Join(d, "guard"))...)
	}
	if guard = uniq(guard); len(guard) == 1 {
		b.ReportMetric(float64(smapsField(b, guard[0], "Pss_Anon")), "guard-pss-anon-kib")
	}
	logFile := filepath.Join(e.dir, "log", "counter.log")

	// Crash and return.
	if err := e.stop(syscall.SIGKILL); err == nil {
		b.Fatal("agent killed by SIGKILL reported success")
	}
	t0 = time.Now()
	prof.start("adopt")
	e.start()
	var kept int
	var seen time.Time // GET /v1/agent first reported the adoption
	testutil.Eventually(b, 10*time.Minute, "every job adopted", func() bool {
		var ag api.Agent
		if api.NewClient("http://"+e.addr).Get(context.Background(), "/v1/agent", &ag) != nil || ag.Adoption == nil {
			return false // not yet, or an answer late under load
		}
		if seen.IsZero() {
			seen = time.Now()
			if cpu, ok := agentCPU(e); ok {
				b.ReportMetric(cpu, "adopt-agent-cpu-ms")
			}
		}
		js, err := tryJobs(e)
		if err != nil {
			return false
		}
		kept = 0
		for id, j := range js {
			if j.State == "running" && j.PID == before[id].PID {
				kept++
			}
		}
		return kept == n+1
	})
	reportSince(b, e, t0, "adopt")
	b.ReportMetric(float64(seen.Sub(t0).Microseconds())/1000, "adopt-seen-ms")
	prof.done("adopt")
	b.ReportMetric(100*float64(kept)/float64(n+1), "kept-pct")
	n0 := len(countLines(b, logFile))
	testutil.Eventually(b, time.Minute, "the counter writes on", func() bool { return len(countLines(b, logFile)) > n0+10 })
	lost, prev := 0, 0
	for _, v := range countLines(b, logFile) {
		switch {
		case v > prev+1:
			lost += v - prev - 1 // numbers missing
		case v <= prev:
			lost++ // a number again
		}
		prev = max(prev, v)
	}
	b.ReportMetric(float64(lost), "lines-lost")

	// Crash without return.
	var ag api.Agent
	getJSON(b, "http://"+e.addr+"/v1/agent", &ag)
	if err := e.stop(syscall.SIGKILL); err == nil {
		b.Fatal("agent killed by SIGKILL reported success")
	}
	t1 := time.Now()
	if ag.LeaseDeadline != nil {
		b.ReportMetric(float64(ag.LeaseDeadline.Sub(t1).Microseconds())/1000, "deadline-ms")
	}
	// Dead: every job's main process gone or a zombie (its exit done,
	// waiting for the guard to reap it). Checking the pids is quick at
	// 5,000 jobs, where listing every job cgroup in every hierarchy takes
	// seconds; the rest of each cgroup is killed in the same cgroup.kill
	// (or freezer pass), checked below.
	testutil.Eventually(b, 5*time.Minute, "every job's main process dead", func() bool {
		for _, j := range before {
			if t, ok := startTime(j.PID); ok && t == started[j.PID] && testutil.Alive(j.PID) {
				return false
			}
		}
		return true
	})
	dead := time.Since(t1)
	b.ReportMetric(float64(dead.Microseconds())/1000, "dead-ms")
	if ag.LeaseDeadline != nil {
		b.ReportMetric(float64((dead-ag.LeaseDeadline.Sub(t1)).Microseconds())/1000, "dead-after-deadline-ms")
	}
	testutil.Eventually(b, 5*time.Minute, "no process left under <root>/jobs", func() bool {
		for _, d := range e.cgroupDirs() {
			if len(testutil.ProcsUnder(filepath.Join(d, "jobs"))) > 0 {
				return false
			}
		}
		return true
	})
	if m := lateRe.FindStringSubmatch(e.guardLog()); m != nil {
		if late, err := time.ParseDuration(m[1]); err == nil {
			b.ReportMetric(float64(late.Microseconds())/1000, "guard-late-ms")
		}
	}
}

// jobsPidsCurrent is pids.current of e's <root>/jobs (v1 pids controller,
// else cgroup2): the processes of every job; false when neither exists.
func jobsPidsCurrent(e *env) (int, bool) {
	for _, f := range []string{"/sys/fs/cgroup/pids/" + e.root + "/jobs/pids.current", "/sys/fs/cgroup/" + e.root + "/jobs/pids.current"} {
		raw, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if v, err := strconv.Atoi(strings.TrimSpace(string(raw))); err == nil {
			return v, true
		}
	}
	return 0, false
}

// startTime is pid's start time, clock ticks after boot (proc(5)
// /proc/PID/stat field 22); false when no such process runs.
func startTime(pid int) (uint64, bool) {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return 0, false
	}
	st, err := p.Stat()
	if err != nil {
		return 0, false
	}
	return st.Starttime, true
}

// agentCPU is the CPU time (user + system, ms) e's agent has used since
// its exec (proc(5) /proc/PID/stat fields 14 and 15): a figure a loaded
// host's other processes shift less than the wall time.
func agentCPU(e *env) (float64, bool) {
	p, err := procfs.NewProc(e.cmd.Process.Pid)
	if err != nil {
		return 0, false
	}
	st, err := p.Stat()
	if err != nil {
		return 0, false
	}
	return st.CPUTime() * 1000, true
}

// tryJobs is e's GET /v1/jobs by job ID, or the error of the request (a
// loaded host's agent may answer after the client's timeout).
func tryJobs(e *env) (map[string]api.Job, error) {
	var js []api.Job
	// GET /v1/jobs reads every job's cgroup: at 10,000 jobs it takes
	// longer than the client's default 10 s here, so this client waits.
	c := api.NewClient("http://" + e.addr)
	c.HTTP.Timeout = 2 * time.Minute
	if err := c.Get(context.Background(), "/v1/jobs", &js); err != nil {
		return nil, err
	}
	out := make(map[string]api.Job, len(js))
	for _, j := range js {
		out[j.ID] = j
	}
	return out, nil
}

// smapsField is a field of /proc/PID/smaps_rollup, KiB.
func smapsField(tb testing.TB, pid int, field string) int {
	tb.Helper()
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/smaps_rollup")
	if err != nil {
		tb.Fatal(err)
	}
	for _, l := range strings.Split(string(raw), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == field+":" {
			v, _ := strconv.Atoi(f[1])
			return v
		}
	}
	return -1
}

// reportSince reports, as name-ms, the time from t0 (just before the
// agent's exec) to now, and as name-join-ms the time from the agent's
// "joined the cluster" log line to now.
func reportSince(b *testing.B, e *env, t0 time.Time, name string) {
	now := time.Now()
	b.ReportMetric(float64(now.Sub(t0).Microseconds())/1000, name+"-ms")
	if at, ok := joinedAt(e.out.String()); ok {
		b.ReportMetric(float64(now.Sub(at).Microseconds())/1000, name+"-join-ms")
	}
}

// joinedAt is the time of the last "joined the cluster" line of an
// agent's log (logfmt, time= first, milliseconds).
func joinedAt(log string) (time.Time, bool) {
	i := strings.LastIndex(log, `msg="joined the cluster"`)
	if i < 0 {
		return time.Time{}, false
	}
	line := log[strings.LastIndex(log[:i], "\n")+1 : i]
	v, ok := strings.CutPrefix(line, "time=")
	if !ok {
		return time.Time{}, false
	}
	ts, _, _ := strings.Cut(v, " ")
	at, err := time.Parse(time.RFC3339Nano, ts)
	return at, err == nil
}

// profiler saves the agent's CPU profile and log of each phase of a round
// (BenchmarkLiveRestart's BERTH_BENCH_PROFILE); a nil one does nothing.
type profiler struct {
	b       *testing.B
	e       *env
	n       int
	dir     string
	addr    string
	seconds map[string]int
	saved   chan error
}

// benchProfiler is the profiler of e's round with n jobs, nil without
// BERTH_BENCH_PROFILE; it adds --pprof to e's agent.
func benchProfiler(b *testing.B, e *env, n int) *profiler {
	dir := os.Getenv("BERTH_BENCH_PROFILE")
	if dir == "" {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	p := &profiler{b: b, e: e, n: n, dir: dir, addr: testutil.FreePort(b), seconds: map[string]int{}}
	for _, ph := range []string{"cold", "adopt"} {
		p.seconds[ph], _ = strconv.Atoi(os.Getenv("BERTH_BENCH_PROFILE_" + strings.ToUpper(ph)))
	}
	e.args = []string{"--pprof", p.addr}
	return p
}

// start begins the CPU profile of phase (cold, adopt), from as soon as
// the agent about to be started serves it.
func (p *profiler) start(phase string) {
	if p == nil || p.seconds[phase] == 0 {
		return
	}
	p.saved = make(chan error, 1)
	url := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", p.addr, p.seconds[phase])
	file := filepath.Join(p.dir, fmt.Sprintf("%s-%d.pprof", phase, p.n))
	go func() {
		var resp *http.Response
		var err error
		if !testutil.Poll(time.Minute, func() bool { resp, err = http.Get(url); return err == nil }) {
			p.saved <- err
			return
		}
		defer resp.Body.Close()
		f, err := os.Create(file)
		if err == nil {
			_, err = io.Copy(f, resp.Body)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		p.saved <- err
	}()
}

// done waits for phase's profile and saves the agent's log of it.
func (p *profiler) done(phase string) {
	if p == nil {
		return
	}
	if p.saved != nil {
		if err := <-p.saved; err != nil {
			p.b.Errorf("%s profile: %v", phase, err)
		}
		p.saved = nil
	}
	if err := os.WriteFile(filepath.Join(p.dir, fmt.Sprintf("%s-%d.log", phase, p.n)), []byte(p.e.out.String()), 0o644); err != nil {
		p.b.Error(err)
	}
}
