//go:build soak

package soak

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berthd/berth/internal/testutil"
	"github.com/berthd/berth/worker"
	"github.com/vishvananda/netns"
)

// killMoment is when, in an agent's life, the soak SIGKILLs it.
type killMoment string

const (
	atStartup killMoment = "start-up" // within the first 600 ms after exec: lock, cgroup clean-up, listen, connect
	atClaims  killMoment = "claims"   // within 150 ms after "joined the cluster": the claims and first starts
	atReload  killMoment = "reload"   // within 600 ms after SIGHUP with a changed file
	atStop    killMoment = "stop"     // within 1.8 s after SIGTERM (a job ignores SIGTERM: the stop takes stop_timeout, 2 s)
	atBackoff killMoment = "backoff"  // within 300 ms after a job exited and waits to restart
	atSteady  killMoment = "steady"   // within 500 ms, every job running
	// away: every job running; the agent is not started again until the
	// lease guard has killed every job process (crash without return).
	atAway killMoment = "away"
)

var killMoments = []killMoment{atStartup, atClaims, atReload, atStop, atBackoff, atSteady, atAway}

// killWorkload is the soak's jobs; every one carries SOAK_TAG=tag in its
// environment, which its descendants inherit however they daemonise.
// Variant 1 (a reload's change) adds a connector, changes a limit in place
// and changes the tasks' command (a restart). It returns the [static]
// table and definitions, and the IDs of the jobs the agent must run.
func killWorkload(tag string, variant int) (body string, jobs []string) {
	n := func(s string) string { return tag + "-" + s }
	env := fmt.Sprintf("env = { SOAK_TAG = %q }", tag)
	conns := []string{n("fork"), n("daemon"), n("stubborn"), n("spawn"), n("crash")}
	forkMem, taskArg := "64MiB", "100000"
	if variant == 1 {
		conns = append(conns, n("extra"))
		forkMem, taskArg = "96MiB", "100001"
	}
	tasks := []string{n("work") + "-0", n("work") + "-1"}
	var b strings.Builder
	fmt.Fprintf(&b, "[static]\nconnectors = [%s]\ntasks = [%s]\n\n", quoteAll(conns), quoteAll(tasks))
	fmt.Fprintf(&b, "[[group]]\nname = %q\nlimits = { memory = \"512MiB\", pids = 200 }\n\n", n("pair"))
	run := func(name, group, script, extra string) {
		fmt.Fprintf(&b, "[[connector]]\nname = %q\n", name)
		if group != "" {
			fmt.Fprintf(&b, "group = %q\n", group)
		}
		fmt.Fprintf(&b, "  [connector.run]\n  command = [\"/bin/sh\", \"-c\", %q]\n  %s\n%s\n", script, env, extra)
	}
	// Forks two children and waits for them.
	run(n("fork"), n("pair"), "/bin/sleep 100000 & /bin/sleep 100000 & wait", fmt.Sprintf("  limits = { memory = %q }\n", forkMem))
	// Daemonises a grandchild: setsid, and its parent exits (double fork).
	run(n("daemon"), "", `/usr/bin/setsid /bin/sh -c '/bin/sleep 100000 </dev/null >/dev/null 2>&1 &' & exec /bin/sleep 100000`, "")
	// Ignores SIGTERM (and so do its children): only the kill ends it.
	run(n("stubborn"), "", `trap '' TERM; while :; do /bin/sleep 1; done`, "")
	// Spawns short-lived children all the time.
	run(n("spawn"), n("pair"), `while :; do /bin/true; /bin/sleep 0.05 & wait; done`, "")
	// Leaves a daemon behind and exits 3 after 0.5 s: restarted with backoff.
	run(n("crash"), "", `/usr/bin/setsid /bin/sleep 100000 & /bin/sleep 0.5; exit 3`, "  restart = \"always\"\n")
	if variant == 1 {
		run(n("extra"), "", "exec /bin/sleep 100000", "")
	}
	fmt.Fprintf(&b, "[[connector]]\nname = %q\ntasks = 2\n  [connector.task]\n  command = [\"/bin/sh\", \"-c\", %q]\n  %s\n",
		n("work"), "/bin/sleep "+taskArg+" & exec /bin/sleep "+taskArg, env)
	return b.String(), append(conns, tasks...)
}

func quoteAll(xs []string) string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = fmt.Sprintf("%q", x)
	}
	return strings.Join(out, ", ")
}

// killSoak is the state of TestSoakAgentKills across rounds.
type killSoak struct {
	t       *testing.T
	rng     *rand.Rand
	tag     string
	file    agentFile
	config  string
	logFile string
	variant int
	jobs    []string // the jobs of the file in force

	// What earlier runs left when they were killed: processes by PID and
	// start time, cgroup directories by path and inode.
	earlierProcs map[int]uint64
	earlierDirs  map[string]uint64

	runs int
	// baselineFD is the agent's open file count at the first check of each
	// variant of the file (its jobs each hold a log file and a pipe).
	baselineFD map[int]int
	fig        killFigures
}

// killFigures are the soak's results.
type killFigures struct {
	kills, checks int
	byMoment      map[killMoment]int
	survivors     int // processes of an earlier run alive after a restart, outside an adopted job
	adopted       int // jobs whose run a restarted agent adopted (live restart)
	// awayAfterDeadline is, per crash without return, when the guard
	// killed every job relative to the agent's deadline.
	awayAfterDeadline []time.Duration
	jobsChecked       int             // jobs checked after restarts
	leftoverDirs      int             // cgroup directories of an earlier run left after a restart
	fdOver            int             // checks at which the agent had more open files than its baseline
	fdMin, fdMax      int             // least and most open files relative to the baseline
	toSteady          []time.Duration // from exec to every job running
	// What the killed runs left for the next start to clean up, seen right
	// after each kill: proof that the checks above had something to find.
	orphansAfterKill, dirsAfterKill int
}

// TestSoakAgentKills runs the real agent against a real etcd with jobs
// that fork, daemonise, ignore SIGTERM, spawn short-lived children and
// crash, and SIGKILLs it -soak.kills times at random moments. Every time a
// restarted agent has its jobs running again: the jobs it adopted (live
// restart: the lease guard kept their runs) keep their processes and
// cgroups; outside them no process of an earlier run is alive and no
// cgroup directory of an earlier run is left in any hierarchy; and the
// agent's open file count is its baseline (the first run's).
func TestSoakAgentKills(t *testing.T) {
	testutil.NeedRoot(t)
	etcd := startEtcd(t, 1, "127.0.0.1")
	s := &killSoak{t: t, rng: newRand(t), tag: randHex(4), earlierProcs: map[int]uint64{}, earlierDirs: map[string]uint64{},
		baselineFD: map[int]int{}, fig: killFigures{byMoment: map[killMoment]int{}}}
	dir := t.TempDir()
	s.logFile = filepath.Join(dir, "agent.log")
	s.file = agentFile{id: "kill-" + s.tag, dir: dir, listen: freePort(t, "127.0.0.1"), root: "berth-soak-kill-" + s.tag,
		cluster: "soak-kill-" + s.tag, endpoints: etcd.endpoints(), stopTimeout: "2s"}
	testutil.TrackCgroupRoot(t, s.file.root)
	s.writeFile()

	// Every moment equally often, in random order.
	var moments []killMoment
	for i := 0; i < *flagKills; i++ {
		moments = append(moments, killMoments[i%len(killMoments)])
	}
	s.rng.Shuffle(len(moments), func(i, j int) { moments[i], moments[j] = moments[j], moments[i] })

	for i, m := range moments {
		a := s.start()
		switch m {
		case atStartup:
			time.Sleep(uniform(s.rng, 600*time.Millisecond))
		case atClaims:
			select {
			case <-a.out.next("joined the cluster"):
			case <-time.After(testutil.Deadline(60 * time.Second)):
				t.Fatalf("round %d: no \"joined the cluster\" within 60s\n%s", i, a.out.tail(30))
			}
			time.Sleep(uniform(s.rng, 150*time.Millisecond))
		default:
			s.steadyAndCheck(a, i)
			s.drive(a, m, i)
		}
		if !a.running() {
			t.Fatalf("round %d (%s): the agent exited by itself before the kill: %v\n%s%s", i, m, a.err, a.out.tail(40), s.lockHolders(a))
		}
		a.kill()
		if m == atAway {
			s.awayRound(i)
		}
		s.fig.kills++
		s.fig.byMoment[m]++
		s.recordEarlier()
	}
	// The last kill is checked like every other, then a clean stop.
	a := s.start()
	s.steadyAndCheck(a, len(moments))
	a.signal(syscall.SIGTERM)
	if err := a.waitExit(30 * time.Second); err != nil {
		t.Errorf("agent exit after SIGTERM: %v\n%s", err, a.out.tail(40))
	}
	if left := tagged("SOAK_TAG", s.tag); len(left) > 0 {
		t.Errorf("processes alive after the agent's clean stop: %v", left)
	}
	if left := cgroupTree(s.file.root); len(left) > 0 {
		t.Errorf("cgroup directories left after the agent's clean stop: %v", sortedKeys(left))
	}
	s.report()
}

// writeFile writes the configuration of the current variant.
func (s *killSoak) writeFile() {
	s.file.body, s.jobs = killWorkload(s.tag, s.variant)
	s.config = s.file.write(s.t)
}

// start runs the agent once more.
func (s *killSoak) start() *agentProc {
	s.runs++
	return startAgent(s.t, s.config, s.file.listen, s.logFile, netns.None())
}

// drive brings a steady agent to moment m and waits the random delay
// before the kill.
func (s *killSoak) drive(a *agentProc, m killMoment, round int) {
	t := s.t
	switch m {
	case atReload:
		s.variant = 1 - s.variant
		s.writeFile()
		a.signal(syscall.SIGHUP)
		time.Sleep(uniform(s.rng, 600*time.Millisecond))
	case atStop:
		a.signal(syscall.SIGTERM)
		time.Sleep(uniform(s.rng, 1800*time.Millisecond))
	case atBackoff:
		select {
		case <-a.out.next("job exited; restarting"):
		case <-time.After(testutil.Deadline(30 * time.Second)):
			t.Fatalf("round %d: no job restart within 30s\n%s", round, a.out.tail(30))
		}
		time.Sleep(uniform(s.rng, 300*time.Millisecond))
	case atSteady, atAway:
		time.Sleep(uniform(s.rng, 500*time.Millisecond))
	}
}

// steadyAndCheck waits until the agent runs every job of the file in
// force (the crashing job may be waiting to restart), then checks that
// nothing of an earlier run is left and counts the agent's open files.
func (s *killSoak) steadyAndCheck(a *agentProc, round int) {
	t := s.t
	crash := s.tag + "-crash"
	var last map[string]string
	ok := testutil.Poll(90*time.Second, func() bool {
		if !a.running() {
			return false
		}
		js, err := jobsOf(a.addr)
		if err != nil || !healthy(a.addr) {
			return false
		}
		last = map[string]string{}
		for id, j := range js {
			last[id] = string(j.State)
		}
		if len(js) != len(s.jobs) {
			return false
		}
		for _, id := range s.jobs {
			j, ok := js[id]
			switch {
			case !ok:
				return false
			case id == crash && (j.State == worker.BackingOff || j.State == worker.Running):
			case j.State != worker.Running || j.PID == 0:
				return false
			}
		}
		return true
	})
	if !ok {
		t.Fatalf("round %d: the agent (running %v, %v) did not run its jobs within 90s: %v, want %v\n%s%s",
			round, a.running(), a.err, last, s.jobs, a.out.tail(40), s.lockHolders(a))
	}
	s.fig.toSteady = append(s.fig.toSteady, time.Since(a.start))
	s.fig.checks++

	// Live restart: a job whose run this agent adopted (its main process
	// is one an earlier run started) keeps that run's processes and
	// cgroup. Every other process of an earlier run must be gone:
	// anything tagged that started before this agent, and every process
	// seen when an earlier run was killed, unless it is in the cgroup of
	// an adopted job.
	js, _ := jobsOf(a.addr)
	_, agentStart, _, _ := stat(a.pid)
	adopted := map[string]bool{}
	for id, j := range js {
		if j.PID == 0 {
			continue
		}
		if start, ok := s.earlierProcs[j.PID]; ok && liveSince(j.PID, start) {
			adopted[id] = true
			continue
		}
		// A run whose spawn was in flight at the kill is adopted too, but
		// the list taken after the kill may lack it: the guard forked it
		// after the list, or it had not exec'd yet and had the guard's
		// environment, without the marker. Its main process started
		// before this agent.
		if _, start, zombie, ok := stat(j.PID); ok && !zombie && start < agentStart {
			adopted[id] = true
		}
	}
	s.fig.adopted += len(adopted)
	s.fig.jobsChecked += len(s.jobs)
	bad := map[int]string{}
	// A process that exits between the listing and the look at its
	// cgroup (a 1 s sleep of an adopted job) is gone, not a survivor.
	keep := func(pid int) bool {
		_, start, _, _ := stat(pid)
		job := jobOfPid(pid, s.file.root)
		return adopted[job] || !liveSince(pid, start)
	}
	for _, p := range append(tagged("SOAK_TAG", s.tag), withArgv(a.cmd.Args)...) {
		if p.start < agentStart && !keep(p.pid) {
			bad[p.pid] = p.String() + " in\n" + cgroupsOf(p.pid)
		}
	}
	for pid, start := range s.earlierProcs {
		if liveSince(pid, start) && !keep(pid) {
			if _, ok := bad[pid]; !ok {
				bad[pid] = fmt.Sprintf("pid %d (start tick %d) in\n%s", pid, start, cgroupsOf(pid))
			}
		}
	}
	for _, why := range bad {
		t.Errorf("round %d: a process of an earlier run is alive after the restart: %s", round, why)
	}
	s.fig.survivors += len(bad)

	// cgroup directories of earlier runs: the same path with the same
	// inode, or a job directory for no job of the file in force.
	now := cgroupTree(s.file.root)
	want := map[string]bool{}
	for _, id := range s.jobs {
		want[id] = true
	}
	var left []string
	for p, ino := range now {
		rel := relUnder(p, s.file.root)
		job, ok := jobOf(rel)
		if !ok {
			continue // the root, jobs/, groups/, the agent's own leaf
		}
		// A job's own cgroup (and a sharing group's) stays while its job
		// is in force and the guard held its run; a run leaf below it
		// only with its adopted run.
		if s.earlierDirs[p] == ino && !adopted[job] && !(isJobDir(rel) && want[job]) && !holdsJob(p, job, want) {
			left = append(left, p+" (same inode as before the kill)")
			continue
		}
		if job != "" && !want[job] {
			left = append(left, p+" (no such job in force)")
		}
	}
	sort.Strings(left)
	for _, p := range left {
		t.Errorf("round %d: cgroup directory of an earlier run left after the restart: %s", round, p)
	}
	s.fig.leftoverDirs += len(left)

	// Open files: the least of a few samples (a start or a scrape in
	// flight holds a pipe or a socket for a moment).
	fds := 1 << 30
	for k := 0; k < 5; k++ {
		if n, err := fdCount(a.pid); err == nil {
			fds = min(fds, n)
		}
		time.Sleep(100 * time.Millisecond)
	}
	base, ok := s.baselineFD[s.variant]
	if !ok {
		base = fds
		s.baselineFD[s.variant] = fds
		t.Logf("fd baseline of variant %d: %d: %v", s.variant, fds, fdTargets(a.pid))
	}
	s.fig.fdMin, s.fig.fdMax = min(s.fig.fdMin, fds-base), max(s.fig.fdMax, fds-base)
	if d := fds - base; d > 0 {
		s.fig.fdOver++
		t.Errorf("round %d: the agent has %d open files, %d more than its baseline %d: %v", round, fds, d, base, fdTargets(a.pid))
	}
}

// awayRound follows a kill with no new start: the lease guard must kill
// every process of every job before the lease can expire (the agent's
// deadline plus the fencing margin, 1 s with session_ttl 2 s). The guard
// logs how late after its own deadline (the agent's plus half the margin)
// it killed; the processes die in that kill (cgroup.kill, or the v1
// freezer), and the soak checks that none is left.
func (s *killSoak) awayRound(round int) {
	t := s.t
	g := guardLogOf(filepath.Join(s.file.dir, "data"))
	late, ok := g.waitKill(g.kills(), 30*time.Second)
	if !ok {
		t.Errorf("round %d (away): the lease guard logged no kill within 30 s of the agent's SIGKILL", round)
		return
	}
	if !testutil.Poll(30*time.Second, func() bool { return len(tagged("SOAK_TAG", s.tag)) == 0 }) {
		t.Errorf("round %d (away): job processes alive after the guard's kill: %v", round, tagged("SOAK_TAG", s.tag))
		return
	}
	after := guardLag(2*time.Second) + late
	s.fig.awayAfterDeadline = append(s.fig.awayAfterDeadline, after)
	if after >= time.Second {
		t.Errorf("round %d (away): the guard killed %s after the agent's deadline, not before the lease's expiry (deadline + 1 s)", round, after)
	}
}

// lockHolders names the processes holding the agent's data_dir lock when
// the agent refused to start for it; "" otherwise.
func (s *killSoak) lockHolders(a *agentProc) string {
	if a.out.count("another berth agent") == 0 {
		return ""
	}
	lock := filepath.Join(s.file.dir, "data", "agent.lock")
	return fmt.Sprintf("\nholders of %s:\n%s", lock, strings.Join(holders(lock), "\n"))
}

// recordEarlier notes, after a kill, every process and cgroup directory
// the killed run left: each must be gone once the next run is up.
func (s *killSoak) recordEarlier() {
	procs := append(tagged("SOAK_TAG", s.tag), withArgv([]string{berthBin, "agent", "--config", s.config})...)
	for _, p := range procs {
		s.earlierProcs[p.pid] = p.start
	}
	dirs := cgroupTree(s.file.root)
	for p, ino := range dirs {
		s.earlierDirs[p] = ino
	}
	s.fig.orphansAfterKill += len(procs)
	s.fig.dirsAfterKill += len(dirs)
}

// isJobDir reports whether rel is a job's own cgroup ("jobs/<job>",
// "groups/<group>/<job>"), not a run leaf below it.
func isJobDir(rel string) bool {
	parts := strings.Split(rel, "/")
	return len(parts) == 2 && parts[0] == "jobs" || len(parts) == 3 && parts[0] == "groups"
}

// holdsJob reports whether p, a sharing group's directory (job ""),
// holds the cgroup of one of jobs (those in force): the group stays with
// it.
func holdsJob(p, job string, jobs map[string]bool) bool {
	if job != "" {
		return false
	}
	for id := range jobs {
		if _, err := os.Stat(filepath.Join(p, id)); err == nil {
			return true
		}
	}
	return false
}

// jobOfPid names the job in whose cgroup (below cgroup root root) pid
// runs, from its cgroup2 path (the unified line of /proc/PID/cgroup, the
// hierarchy every mode here has); "" when none.
func jobOfPid(pid int, root string) string {
	for _, l := range strings.Split(cgroupsOf(pid), "\n") {
		if p, ok := strings.CutPrefix(l, "0::/"+root+"/"); ok {
			if job, ok := jobOf(p); ok {
				return job
			}
		}
	}
	return ""
}

// jobOf names the job whose cgroup (or a run leaf below it) rel is, in
// the layout of cgroup.JobRel and GroupRel: "jobs/<job>[/...]" or
// "groups/<group>/<job>[/...]"; "" for a group's own directory. ok is
// false for a directory of neither subtree.
func jobOf(rel string) (job string, ok bool) {
	parts := strings.Split(rel, "/")
	switch {
	case len(parts) >= 2 && parts[0] == "jobs":
		return parts[1], true
	case len(parts) == 2 && parts[0] == "groups":
		return "", true
	case len(parts) >= 3 && parts[0] == "groups":
		return parts[2], true
	}
	return "", false
}

// relUnder is p relative to the directory root of its hierarchy, e.g.
// "jobs/x" for /sys/fs/cgroup/memory/<root>/jobs/x; "" when p is not under
// root.
func relUnder(p, root string) string {
	for _, h := range testutil.Hierarchies() {
		if rel, ok := strings.CutPrefix(p, filepath.Join(h, root)+"/"); ok {
			return rel
		}
	}
	return ""
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func (s *killSoak) report() {
	f := s.fig
	var moments []string
	for _, m := range killMoments {
		moments = append(moments, fmt.Sprintf("%s %d", m, f.byMoment[m]))
	}
	sort.Slice(f.toSteady, func(i, j int) bool { return f.toSteady[i] < f.toSteady[j] })
	med := time.Duration(0)
	if len(f.toSteady) > 0 {
		med = f.toSteady[len(f.toSteady)/2]
	}
	rows := [][2]string{
		{"SIGKILLs of the agent", fmt.Sprintf("%d (%s)", f.kills, strings.Join(moments, ", "))},
		{"restarts checked (every job running again)", fmt.Sprint(f.checks)},
		{"crashes without return: every job killed by the lease guard, after the agent's deadline (lease expiry: + 1 s)", fmt.Sprint(f.awayAfterDeadline)},
		{"jobs adopted by the restarted agent (same main process; live restart)", fmt.Sprintf("%d of %d jobs checked", f.adopted, f.jobsChecked)},
		{"processes of an earlier run alive after a restart, outside an adopted job", fmt.Sprint(f.survivors)},
		{"cgroup directories of an earlier run left after a restart", fmt.Sprint(f.leftoverDirs)},
		{"checks with more open files than the baseline", fmt.Sprintf("%d (baselines %v by file variant; open files minus baseline from %+d to %+d)", f.fdOver, s.baselineFD, f.fdMin, f.fdMax)},
		{"processes and cgroup directories the killed runs left (found right after each kill)", fmt.Sprintf("%d processes, %d directories", f.orphansAfterKill, f.dirsAfterKill)},
		{"exec to every job running again (median)", med.Round(10 * time.Millisecond).String()},
	}
	writeFigures(s.t, "agent kills", rows)
}
