package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/berthd/berth/api"
	"github.com/prometheus/procfs"
)

// exporterBin is the anchor: Debian's prometheus-process-exporter.
const exporterBin = "/usr/bin/prometheus-process-exporter"

// clockTicks is USER_HZ, the unit of utime and stime in /proc/PID/stat.
const clockTicks = 100

// sleepBase makes every job's command line unique ("sleep 100000042"), so
// that process-exporter can group the processes by job as berth does.
const sleepBase = 100000000

func main() {
	ns := flag.String("n", "100,1000,5000,10000", "comma-separated job counts")
	bin := flag.String("bin", "bin/berth", "the berth binary")
	scrapes := flag.Int("scrapes", 20, "scrapes per exporter and N")
	idle := flag.Duration("idle", 10*time.Second, "how long idle CPU is measured")
	csvPath := flag.String("csv", "", "append one CSV line per N to this file")
	profDir := flag.String("profile", "", "after measuring each N, save the agent's CPU profile over 10 s of back-to-back scrapes and its heap profile in this directory (cpu-N.pprof, heap-N.pprof)")
	startProf := flag.Duration("start-profile", 0, "with -profile: also save the agent's and the lease guard's CPU profiles over this long from the agent's start (start-agent-N.pprof, start-guard-N.pprof), and the harness's own over the cgroup+fork floor (floor-N.pprof)")
	flag.Parse()
	if os.Geteuid() != 0 {
		fail(errors.New("run as root: the agent makes cgroups"))
	}
	if _, err := os.Stat(exporterBin); err != nil {
		fail(fmt.Errorf("%s missing (apt-get install prometheus-process-exporter): %w", exporterBin, err))
	}
	var rows []result
	for _, s := range strings.Split(*ns, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			fail(fmt.Errorf("-n: %q is not a job count", s))
		}
		if err := errors.Join(checkPidMax(n), checkNofile(n)); err != nil {
			fmt.Fprintf(os.Stderr, "scale: N=%d skipped: %v\n", n, err)
			continue
		}
		r, err := measure(*bin, n, *scrapes, *idle, *profDir, *startProf)
		if err != nil {
			printTable(os.Stdout, rows) // what was measured before
			fail(fmt.Errorf("with %d jobs: %w", n, err))
		}
		rows = append(rows, r)
		if *csvPath != "" {
			if err := appendCSV(*csvPath, r); err != nil {
				fail(err)
			}
		}
		fmt.Fprintf(os.Stderr, "N=%d done\n", n)
	}
	printTable(os.Stdout, rows)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "scale:", err)
	os.Exit(1)
}

// result is one N's figures; durations in seconds, memory in bytes, CPU in
// seconds of CPU time.
type result struct {
	N                 int
	Ready, AllRunning float64  // from the agent's start
	Joined            float64  // the agent's "joined the cluster" line, from its start
	FloorStart        float64  // the anchor: n plain starts of the same sleep, 16 at a time
	FloorCgroup       floorRun // the second anchor: n limited cgroups made and a sleep started into each, 16 at a time
	// AgentUser, AgentSys, GuardUser and GuardSys are the CPU seconds the
	// agent and its lease guard spent from the join to all running.
	AgentUser, AgentSys, GuardUser, GuardSys float64
	AgentRSS, AgentIdleCPU                   float64 // bytes; fraction of one core
	AgentFDs, GuardFDs                       int     // open descriptors once all run
	BerthScrape, BerthCPU                    float64 // p50 wall seconds; CPU seconds per scrape
	ExporterScrape, ExportCPU                float64
	ExporterRSS                              float64
	Series, ExporterSeries                   int
	BerthHeap, BerthGoroutines               float64
}

func measure(bin string, n, scrapes int, idle time.Duration, profDir string, startProf time.Duration) (result, error) {
	r := result{N: n}
	if w := settle(5 * time.Minute); w > 4*time.Second {
		fmt.Fprintf(os.Stderr, "scale: waited %s for the kernel to free earlier cgroups\n", w.Round(time.Second))
	}
	floor, err := startFloor(n)
	if err != nil {
		return r, fmt.Errorf("fork+exec floor: %w", err)
	}
	r.FloorStart = floor
	stopProf, err := floorProfile(profDir, startProf, n)
	if err != nil {
		return r, err
	}
	r.FloorCgroup, err = cgroupFloor(n)
	stopProf()
	if err != nil {
		return r, fmt.Errorf("cgroup+fork floor: %w", err)
	}
	if w := settle(5 * time.Minute); w > 4*time.Second {
		fmt.Fprintf(os.Stderr, "scale: waited %s for the kernel to free the floor's cgroups\n", w.Round(time.Second))
	}
	dir, err := os.MkdirTemp("", "berth-scale-")
	if err != nil {
		return r, err
	}
	defer os.RemoveAll(dir)
	addr, err := freeAddr()
	if err != nil {
		return r, err
	}
	cfg := filepath.Join(dir, "berth.toml")
	if err := os.WriteFile(cfg, []byte(config(dir, addr, n)), 0o644); err != nil {
		return r, err
	}
	args := []string{"agent", "--config", cfg}
	var pprofAddr, guardPprof string
	if profDir != "" {
		if pprofAddr, err = freeAddr(); err != nil {
			return r, err
		}
		args = append(args, "--pprof", pprofAddr)
		if startProf > 0 {
			if guardPprof, err = freeAddr(); err != nil {
				return r, err
			}
			args = append(args, "--guard-pprof", guardPprof)
		}
	}
	agent := exec.Command(bin, args...)
	// The agent's and the guard's user and system CPU at the join.
	var joinCPU [4]float64
	var guard int
	dataDir := filepath.Join(dir, "data")
	startCPU := func() [4]float64 {
		if guard == 0 {
			guard = guardPid(dataDir)
		}
		au, as := userSys(agent.Process.Pid)
		gu, gs := userSys(guard)
		return [4]float64{au, as, gu, gs}
	}
	out := &stampedLog{marks: map[string]time.Time{}}
	out.onMark = func(string) { joinCPU = startCPU() }
	agent.Stdout, agent.Stderr = out, out
	agent.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	start := time.Now()
	if err := agent.Start(); err != nil {
		return r, err
	}
	var startProfs sync.WaitGroup
	if startProf > 0 && profDir != "" {
		for _, p := range []struct{ addr, name string }{{pprofAddr, "agent"}, {guardPprof, "guard"}} {
			startProfs.Add(1)
			go func() {
				defer startProfs.Done()
				if err := startProfile(profDir, p.addr, fmt.Sprintf("start-%s-%d.pprof", p.name, n), startProf); err != nil {
					fmt.Fprintf(os.Stderr, "scale: start profile of the %s: %v\n", p.name, err)
				}
			}()
		}
	}
	defer startProfs.Wait()
	defer func() {
		_ = agent.Process.Signal(syscall.SIGTERM)
		done := make(chan error, 1)
		go func() { done <- agent.Wait() }()
		select {
		case <-done:
		case <-time.After(5 * time.Minute):
			_ = agent.Process.Kill()
			<-done
		}
	}()
	client := api.NewClient(addr)
	if err := poll(10*time.Minute, func() bool {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}); err != nil {
		return r, fmt.Errorf("agent not ready: %w\n%s", err, tail(out.String()))
	}
	r.Ready = time.Since(start).Seconds()
	// Until the kernel counts n processes in the jobs' subtree, wait on
	// its pids.current, which costs the agent nothing; only then ask the
	// agent (GET /v1/jobs at 5,000 jobs is tens of ms of its CPU, which
	// polled every 100 ms through the whole start would be charged to it).
	_ = poll(10*time.Minute, func() bool {
		c, ok := jobsPidsCurrent("berth-scale-" + strconv.Itoa(os.Getpid()))
		return !ok || c >= n
	})
	var pids []int
	if err := poll(10*time.Minute, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		js, err := client.Jobs(ctx)
		if err != nil {
			return false
		}
		pids = pids[:0]
		for _, j := range js {
			if j.State == "running" {
				pids = append(pids, j.PID)
			}
		}
		return len(pids) == n
	}); err != nil {
		return r, fmt.Errorf("not all %d jobs running: %w", n, err)
	}
	r.AllRunning = time.Since(start).Seconds()
	end := startCPU()
	r.AgentFDs, r.GuardFDs = openFDs(agent.Process.Pid), openFDs(guard)
	r.AgentUser, r.AgentSys, r.GuardUser, r.GuardSys = end[0]-joinCPU[0], end[1]-joinCPU[1], end[2]-joinCPU[2], end[3]-joinCPU[3]
	if t, ok := out.mark(`msg="joined the cluster"`); ok {
		r.Joined = t.Sub(start).Seconds()
	}

	// Idle: no scrape, no change; let the start settle first.
	time.Sleep(2 * time.Second)
	c0, err := cpuSeconds(agent.Process.Pid)
	if err != nil {
		return r, err
	}
	time.Sleep(idle)
	c1, err := cpuSeconds(agent.Process.Pid)
	if err != nil {
		return r, err
	}
	idleRate := (c1 - c0) / idle.Seconds()
	r.AgentIdleCPU = idleRate

	r.BerthScrape, r.BerthCPU, r.Series, err = scrapeLoop("http://"+addr+"/metrics", agent.Process.Pid, scrapes, idleRate)
	if err != nil {
		return r, err
	}
	if r.AgentRSS, err = rss(agent.Process.Pid); err != nil {
		return r, err
	}
	if m, err := scrapeValues("http://"+addr+"/metrics", "go_memstats_heap_inuse_bytes", "go_goroutines"); err == nil {
		r.BerthHeap, r.BerthGoroutines = m[0], m[1]
	}
	if profDir != "" {
		startProfs.Wait() // one CPU profile at a time
		if err := profile(profDir, n, "http://"+addr+"/metrics", "http://"+pprofAddr+"/debug/pprof/"); err != nil {
			return r, err
		}
	}

	// The anchor, on the same processes: one group per job, by the unique
	// sleep duration in its command line.
	peAddr, err := freeAddr()
	if err != nil {
		return r, err
	}
	peCfg := filepath.Join(dir, "process-exporter.yml")
	if err := os.WriteFile(peCfg, []byte(exporterConfig()), 0o644); err != nil {
		return r, err
	}
	pe := exec.Command(exporterBin, "-config.path", peCfg, "-web.listen-address", peAddr)
	var peOut bytes.Buffer
	pe.Stdout, pe.Stderr = &peOut, &peOut
	pe.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := pe.Start(); err != nil {
		return r, err
	}
	defer func() {
		_ = pe.Process.Kill()
		_ = pe.Wait()
	}()
	if err := poll(time.Minute, func() bool {
		m, err := scrapeValues("http://"+peAddr+"/metrics", "namedprocess_namegroup_num_procs")
		return err == nil && m[0] >= 0
	}); err != nil {
		return r, fmt.Errorf("process-exporter not answering: %w\n%s", err, tail(peOut.String()))
	}
	time.Sleep(2 * time.Second)
	p0, _ := cpuSeconds(pe.Process.Pid)
	time.Sleep(idle)
	p1, _ := cpuSeconds(pe.Process.Pid)
	peIdle := (p1 - p0) / idle.Seconds()
	r.ExporterScrape, r.ExportCPU, r.ExporterSeries, err = scrapeLoop("http://"+peAddr+"/metrics", pe.Process.Pid, scrapes, peIdle)
	if err != nil {
		return r, err
	}
	r.ExporterRSS, _ = rss(pe.Process.Pid)
	return r, nil
}

// profile saves the agent's CPU profile over 10 s of back-to-back scrapes
// of metricsURL, then its heap profile (after a GC: the live heap).
func profile(dir string, n int, metricsURL, pprofURL string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	save := func(url, file string) error {
		resp, err := http.Get(url)
		if err != nil {
			return err
		}
		return saveBody(resp, url, filepath.Join(dir, file))
	}
	stop := make(chan struct{})
	scraped := make(chan error, 1)
	go func() {
		for {
			select {
			case <-stop:
				scraped <- nil
				return
			default:
			}
			if _, err := scrapeCount(metricsURL); err != nil {
				scraped <- err
				return
			}
		}
	}()
	err := save(pprofURL+"profile?seconds=10", fmt.Sprintf("cpu-%d.pprof", n))
	close(stop)
	if serr := <-scraped; err == nil {
		err = serr
	}
	if err != nil {
		return err
	}
	return save(pprofURL+"heap?gc=1", fmt.Sprintf("heap-%d.pprof", n))
}

// startProfile saves the CPU profile of the net/http/pprof server at addr
// over d, from as soon as it answers.
func startProfile(dir, addr, file string, d time.Duration) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	url := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, int(d.Seconds()))
	var resp *http.Response
	err := poll(time.Minute, func() bool {
		var err error
		resp, err = http.Get(url)
		return err == nil
	})
	if err != nil {
		return err
	}
	return saveBody(resp, url, filepath.Join(dir, file))
}

// saveBody writes the body of resp, the answer to GET url, to path, and
// closes it; an answer other than 200 is an error naming url.
func saveBody(resp *http.Response, url, path string) error {
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// openFDs is how many descriptors pid has open, 0 when it is gone.
func openFDs(pid int) int {
	if pid <= 0 {
		return 0
	}
	ents, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
	if err != nil {
		return 0
	}
	return len(ents)
}

// jobsPidsCurrent is pids.current of root's jobs subtree (the v1 pids
// controller, or cgroup2), false when neither can be read.
func jobsPidsCurrent(root string) (int, bool) {
	for _, f := range []string{"/sys/fs/cgroup/pids/" + root + "/jobs/pids.current", "/sys/fs/cgroup/" + root + "/jobs/pids.current"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if v, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			return v, true
		}
	}
	return 0, false
}

// startFloor is the anchor of the start figures: the wall time for this
// harness (Go's os/exec, 16 goroutines) to start n processes of the same
// sleep, with no cgroup, claim or log, in the same run as the agent.
func startFloor(n int) (float64, error) {
	cmds := make([]*exec.Cmd, n)
	errs := make([]error, n)
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	t0 := time.Now()
	for i := range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			c := exec.Command("/bin/sleep", strconv.Itoa(sleepBase+i))
			c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
			errs[i] = c.Start()
			cmds[i] = c
		}()
	}
	wg.Wait()
	took := time.Since(t0).Seconds()
	for i, c := range cmds {
		if errs[i] == nil {
			_ = c.Process.Kill()
			_ = c.Wait()
		}
	}
	return took, errors.Join(errs...)
}

// stampedLog keeps the agent's output and when each of a few lines was
// first seen, by the harness's clock.
type stampedLog struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	marks map[string]time.Time
	part  []byte
	// onMark, when set, is called (with the lock held) when a watched
	// line is first seen.
	onMark func(string)
}

var watched = []string{`msg="joined the cluster"`}

func (l *stampedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	l.buf.Write(p)
	l.part = append(l.part, p...)
	for {
		i := bytes.IndexByte(l.part, '\n')
		if i < 0 {
			break
		}
		line := l.part[:i]
		for _, w := range watched {
			if _, seen := l.marks[w]; !seen && bytes.Contains(line, []byte(w)) {
				l.marks[w] = now
				if l.onMark != nil {
					l.onMark(w)
				}
			}
		}
		l.part = l.part[i+1:]
	}
	return len(p), nil
}

func (l *stampedLog) mark(w string) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	t, ok := l.marks[w]
	return t, ok
}

func (l *stampedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// config is the agent file for n jobs.
func config(dir, addr string, n int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "[agent]\nid = \"scale\"\ndata_dir = %q\nlog_dir = %q\nlisten = %q\ncgroup_root = %q\nstop_timeout = \"2s\"\n\n[static]\nconnectors = [",
		filepath.Join(dir, "data"), filepath.Join(dir, "log"), addr, "berth-scale-"+strconv.Itoa(os.Getpid()))
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "\"j%05d\"", i)
	}
	b.WriteString("]\n")
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "\n[[connector]]\nname = \"j%05d\"\n[connector.run]\ncommand = [\"/bin/sleep\", \"%d\"]\nlimits = { cpu = 0.1, memory = \"16MiB\", pids = 4 }\n", i, sleepBase+i)
	}
	return b.String()
}

// exporterConfig groups every job's sleep by its unique duration.
func exporterConfig() string {
	return "process_names:\n  - name: \"{{.Matches.job}}\"\n    cmdline:\n      - '^/bin/sleep (?P<job>1[0-9]{8})$'\n"
}

// scrapeLoop scrapes url k times and returns the p50 wall time, the CPU
// seconds pid spent per scrape beyond its idle rate, and the series count.
func scrapeLoop(url string, pid, k int, idleRate float64) (p50, cpuPer float64, series int, err error) {
	walls := make([]float64, 0, k)
	c0, err := cpuSeconds(pid)
	if err != nil {
		return 0, 0, 0, err
	}
	t0 := time.Now()
	for i := 0; i < k; i++ {
		start := time.Now()
		n, err := scrapeCount(url)
		if err != nil {
			return 0, 0, 0, err
		}
		walls = append(walls, time.Since(start).Seconds())
		series = n
	}
	elapsed := time.Since(t0).Seconds()
	c1, err := cpuSeconds(pid)
	if err != nil {
		return 0, 0, 0, err
	}
	sort.Float64s(walls)
	cpuPer = max(0, (c1-c0)-idleRate*elapsed) / float64(k)
	return walls[len(walls)/2], cpuPer, series, nil
}

// scrapeCount fetches url and counts its sample lines.
func scrapeCount(url string) (int, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	n := 0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if l := sc.Bytes(); len(l) > 0 && l[0] != '#' {
			n++
		}
	}
	return n, sc.Err()
}

// scrapeValues returns the values of unlabelled series names at url.
func scrapeValues(url string, names ...string) ([]float64, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	out := make([]float64, len(names))
	for i := range out {
		out[i] = -1
	}
	for _, line := range strings.Split(string(body), "\n") {
		for i, name := range names {
			if rest, ok := strings.CutPrefix(line, name+" "); ok {
				out[i], _ = strconv.ParseFloat(strings.TrimSpace(rest), 64)
			} else if strings.HasPrefix(line, name+"{") && out[i] < 0 {
				out[i] = 0 // a labelled series exists
			}
		}
	}
	return out, nil
}

// cpuSeconds is utime + stime of pid, seconds (proc(5), fields 14 and 15).
func cpuSeconds(pid int) (float64, error) {
	st, err := procStat(pid)
	if err != nil {
		return 0, err
	}
	return float64(st.UTime+st.STime) / clockTicks, nil
}

// procStat is /proc/PID/stat of pid, as prometheus/procfs parses it.
func procStat(pid int) (procfs.ProcStat, error) {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return procfs.ProcStat{}, err
	}
	return p.Stat()
}

// rss is VmRSS of pid, bytes.
func rss(pid int) (float64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			return kb * 1024, err
		}
	}
	return 0, errors.New("no VmRSS")
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

func poll(timeout time.Duration, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %v", timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil
}

func tail(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > 20 {
		lines = lines[len(lines)-20:]
	}
	return strings.Join(lines, "\n")
}

func printTable(w io.Writer, rows []result) {
	fmt.Fprintln(w, "Start: from the agent's exec, and from its join, to every job running, against the same run's floors (16 starts at a time, no agent): cgroup+fork (cgroup.Hierarchy.New with the jobs' limits, then Group.ForkInside of the sleep) and fork+exec (os/exec of the sleep); CPU seconds from the join to all running.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| N | exec → joined | exec → all running | cgroup+fork floor | ratio | joined → all running | ratio | fork+exec floor | ratio | agent CPU user + sys | guard CPU user + sys | floor CPU user + sys | agent fds | guard fds |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range rows {
		start := r.AllRunning - r.Joined
		fmt.Fprintf(w, "| %d | %.2f s | %.2f s | %.2f s | **%.2f** | %.2f s | %.2f | %.2f s | %.1f | %.2f + %.2f s | %.2f + %.2f s | %.2f + %.2f s | %d | %d |\n",
			r.N, r.Joined, r.AllRunning, r.FloorCgroup.Wall, ratio(r.AllRunning, r.FloorCgroup.Wall), start, ratio(start, r.FloorCgroup.Wall),
			r.FloorStart, ratio(r.AllRunning, r.FloorStart),
			r.AgentUser, r.AgentSys, r.GuardUser, r.GuardSys, r.FloorCgroup.User, r.FloorCgroup.Sys, r.AgentFDs, r.GuardFDs)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| N | joined | ready | all running | joined → all running | fork+exec floor | agent RSS | idle CPU | berth scrape p50 | process-exporter scrape p50 | ratio | berth CPU/scrape | process-exporter CPU/scrape | ratio | process-exporter RSS |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range rows {
		fmt.Fprintf(w, "| %d | %.2f s | %.2f s | %.2f s | %.2f s | %.2f s | %.1f MiB | %.2f %% | %.1f ms | %.1f ms | %.2f | %.1f ms | %.1f ms | %.2f | %.1f MiB |\n",
			r.N, r.Joined, r.Ready, r.AllRunning, r.AllRunning-r.Joined, r.FloorStart, r.AgentRSS/(1<<20), 100*r.AgentIdleCPU,
			1000*r.BerthScrape, 1000*r.ExporterScrape, r.BerthScrape/r.ExporterScrape,
			1000*r.BerthCPU, 1000*r.ExportCPU, ratio(r.BerthCPU, r.ExportCPU), r.ExporterRSS/(1<<20))
	}
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

var csvHeader = []string{"time", "n", "joined_s", "ready_s", "all_running_s", "agent_rss_bytes", "agent_idle_cpu", "berth_scrape_s", "berth_cpu_per_scrape_s",
	"exporter_scrape_s", "exporter_cpu_per_scrape_s", "exporter_rss_bytes", "berth_series", "exporter_series", "berth_heap_inuse_bytes", "berth_goroutines", "floor_start_s",
	"floor_cgroup_s", "agent_start_user_s", "agent_start_sys_s", "guard_start_user_s", "guard_start_sys_s", "floor_cgroup_user_s", "floor_cgroup_sys_s", "agent_fds", "guard_fds"}

func appendCSV(path string, r result) error {
	// A file with another header (an older harness's columns) is set
	// aside: the plot reads columns by the first line's names.
	if b, err := os.ReadFile(path); err == nil {
		first, _, _ := strings.Cut(string(b), "\n")
		if first != strings.Join(csvHeader, ",") {
			if err := os.Rename(path, path+".old"); err != nil {
				return err
			}
		}
	}
	_, statErr := os.Stat(path)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	if os.IsNotExist(statErr) {
		_ = w.Write(csvHeader)
	}
	ff := func(v float64) string { return strconv.FormatFloat(v, 'g', 6, 64) }
	_ = w.Write([]string{time.Now().UTC().Format(time.RFC3339), strconv.Itoa(r.N), ff(r.Joined), ff(r.Ready), ff(r.AllRunning), ff(r.AgentRSS), ff(r.AgentIdleCPU),
		ff(r.BerthScrape), ff(r.BerthCPU), ff(r.ExporterScrape), ff(r.ExportCPU), ff(r.ExporterRSS),
		strconv.Itoa(r.Series), strconv.Itoa(r.ExporterSeries), ff(r.BerthHeap), ff(r.BerthGoroutines), ff(r.FloorStart),
		ff(r.FloorCgroup.Wall), ff(r.AgentUser), ff(r.AgentSys), ff(r.GuardUser), ff(r.GuardSys),
		ff(r.FloorCgroup.User), ff(r.FloorCgroup.Sys), strconv.Itoa(r.AgentFDs), strconv.Itoa(r.GuardFDs)})
	w.Flush()
	if err := w.Error(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
