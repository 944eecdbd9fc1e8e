package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/berthd/berth/api"
	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
	"golang.org/x/term"
)

func topCmd(configPath *string) *cobra.Command {
	var (
		addr       string
		delay      time.Duration
		iterations int
		batch      bool
		order      string
		timeout    time.Duration
	)
	c := &cobra.Command{
		Use:   "top",
		Short: "Show the jobs of a running agent, live: CPU, memory, I/O, pressure",
		Long: `Show the jobs of a running agent as systemd-cgtop shows units: one row per
job, refreshed every --delay, with

  CPU%      CPU time used per second of the interval (100 = one core),
            beside the job's CPU limit in cores
  MEMORY    memory charged to the job's cgroup, beside its limit and the
            share of the limit in use
  READ/s    bytes read from and written to block devices per second
  WRITE/s
  PSI       pressure stall information: the share of the interval in which
            some task of the job waited for CPU, memory or I/O (the
            kernel's "some" line; "-" where the kernel keeps none)
  RESTARTS  restarts after the job's process ended

Rates come from two successive answers of the agent's GET /v1/jobs, whose
counters never go down; the first frame shows "-" for them.

Keys: c, m, i, p, r, j sort by CPU, memory, I/O, pressure, restarts or job
ID; q (or Ctrl-C) quits. With --batch, or when standard output is not a
terminal, frames are printed one after another without escape codes.

The agent is found at --addr, else at agent.listen of --config, over https
when its agent.web_config_file turns TLS on, presenting the [agent.client]
credentials of --config (as berth status does). A refresh may take
--request-timeout (10 s) before it is shown as an error: GET /v1/jobs
takes seconds at 10,000 jobs.`,
		Example: `  berth top
  berth top -d 5s --order memory
  berth top --batch -n 2 --addr 10.0.0.7:9750`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if delay < 100*time.Millisecond {
				return usageError("--delay %v is too short (at least 100ms)", delay)
			}
			if _, ok := orders[order]; !ok {
				return usageError("--order %q: allowed: cpu, memory, io, pressure, restarts, job", order)
			}
			client, err := agentClient(cmd.ErrOrStderr(), *configPath, addr)
			if err != nil {
				return err
			}
			if timeout < 0 {
				return usageError("--request-timeout %v is negative (0: no limit)", timeout)
			}
			client.HTTP.Timeout = timeout
			// The header names the agent as dialled: host:port, or the
			// https URL.
			t := &top{client: client, addr: strings.TrimPrefix(client.Base, "http://"), delay: delay, timeout: timeout, order: order, out: cmd.OutOrStdout()}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			in, isTTY := int(os.Stdin.Fd()), false
			if f, ok := cmd.OutOrStdout().(*os.File); ok && !batch {
				isTTY = term.IsTerminal(int(f.Fd())) && term.IsTerminal(in)
			}
			if !isTTY {
				return t.batch(ctx, iterations)
			}
			return t.interactive(ctx, in, iterations)
		},
	}
	c.Flags().StringVar(&addr, "addr", "", "agent address HOST:PORT or URL (default: agent.listen of --config)")
	c.Flags().DurationVarP(&delay, "delay", "d", 2*time.Second, "time between refreshes")
	c.Flags().IntVarP(&iterations, "iterations", "n", 0, "stop after this many frames (0: run until q)")
	c.Flags().BoolVarP(&batch, "batch", "b", false, "print frames one after another, without escape codes")
	c.Flags().StringVar(&order, "order", "cpu", "sort by cpu, memory, io, pressure, restarts or job")
	requestTimeoutFlag(c, &timeout)
	return c
}

// top is one berth top session: the last sample and how to show it.
type top struct {
	client *api.Client
	addr   string
	delay  time.Duration
	// timeout bounds one refresh (--request-timeout); 0: no limit. The
	// next refresh is asked for delay after an answer, so a slow agent
	// (seconds at 10,000 jobs) is shown late, not as an error.
	timeout time.Duration
	order   string
	out     io.Writer

	prev     map[string]api.Job // the previous sample, by job ID
	prevTime time.Time
	rows     []topRow
	agent    api.Agent
	err      error // the last refresh's failure; nil when it worked
	at       time.Time
}

// topRow is one job's line: rates over the last interval, negative where
// unknown (no earlier sample, or a counter that went back because the
// cgroup was made anew).
type topRow struct {
	ID, State string
	Restarts  int
	// CPU is CPU time per second of the interval, in percent of one core;
	// negative: unknown (first sample, no usage).
	CPU      float64
	CPULimit float64 // cores; 0: none
	Memory   uint64  // bytes; HasUsage false: unknown
	MemLimit uint64  // bytes; 0: none
	HasUsage bool
	// ReadBPS and WriteBPS are bytes per second; negative: unknown.
	ReadBPS, WriteBPS float64
	// PSI is the share of the interval, in percent, in which some task
	// waited for CPU, memory and I/O; negative: unknown.
	PSI [3]float64
}

// orders are the sort orders by name and key: each sorts descending by its
// figure, then by job ID.
var orders = map[string]struct {
	key  byte
	less func(a, b topRow) bool
}{
	"cpu":      {'c', func(a, b topRow) bool { return a.CPU > b.CPU }},
	"memory":   {'m', func(a, b topRow) bool { return a.Memory > b.Memory }},
	"io":       {'i', func(a, b topRow) bool { return a.ReadBPS+a.WriteBPS > b.ReadBPS+b.WriteBPS }},
	"pressure": {'p', func(a, b topRow) bool { return max(a.PSI[0], a.PSI[1], a.PSI[2]) > max(b.PSI[0], b.PSI[1], b.PSI[2]) }},
	"restarts": {'r', func(a, b topRow) bool { return a.Restarts > b.Restarts }},
	"job":      {'j', func(a, b topRow) bool { return false }},
}

// topRows computes the rows from the previous sample (nil: none) taken dt
// before cur, sorted by order.
func topRows(prev map[string]api.Job, cur []api.Job, dt time.Duration, order string) []topRow {
	rows := make([]topRow, 0, len(cur))
	secs := dt.Seconds()
	for _, j := range cur {
		r := topRow{ID: j.ID, State: string(j.State), Restarts: j.Restarts, CPULimit: j.Limits.CPU,
			CPU: -1, ReadBPS: -1, WriteBPS: -1, PSI: [3]float64{-1, -1, -1}}
		u := j.Usage
		if u != nil {
			r.HasUsage, r.Memory, r.MemLimit = true, u.MemoryBytes, u.MemoryLimitBytes
		}
		p, ok := prev[j.ID]
		if u != nil && ok && p.Usage != nil && secs > 0 {
			pu := p.Usage
			rate := func(now, before float64) float64 {
				if now < before { // the cgroup was made anew
					return -1
				}
				return (now - before) / secs
			}
			if r.CPU = rate(u.CPUSeconds, pu.CPUSeconds); r.CPU > 0 {
				r.CPU *= 100
			}
			r.ReadBPS = rate(float64(u.IOReadBytes), float64(pu.IOReadBytes))
			r.WriteBPS = rate(float64(u.IOWriteBytes), float64(pu.IOWriteBytes))
			if u.Pressure != nil && pu.Pressure != nil {
				for i, s := range [][2]float64{
					{u.Pressure.CPU.SomeSeconds, pu.Pressure.CPU.SomeSeconds},
					{u.Pressure.Memory.SomeSeconds, pu.Pressure.Memory.SomeSeconds},
					{u.Pressure.IO.SomeSeconds, pu.Pressure.IO.SomeSeconds},
				} {
					if v := rate(s[0], s[1]); v >= 0 {
						r.PSI[i] = min(v*100, 100)
					}
				}
			}
		}
		rows = append(rows, r)
	}
	sortRows(rows, order)
	return rows
}

// sortRows sorts rows by order, then by job ID.
func sortRows(rows []topRow, order string) {
	less := orders[order].less
	sort.SliceStable(rows, func(i, k int) bool {
		a, b := rows[i], rows[k]
		if less(a, b) {
			return true
		}
		if less(b, a) {
			return false
		}
		return a.ID < b.ID
	})
}

// sample is one answer of the agent: its jobs and itself at a time.
type sample struct {
	jobs  []api.Job
	agent *api.Agent // nil: GET /v1/agent failed (the header keeps the last)
	err   error      // GET /v1/jobs failed
	at    time.Time
}

// fetch asks the agent for a sample, waiting at most t.timeout (no limit
// when 0). It touches nothing of t but the client, so that the
// interactive view can fetch while it answers keys.
func (t *top) fetch(ctx context.Context) sample {
	var cancel context.CancelFunc
	if t.timeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, t.timeout)
	} else {
		ctx, cancel = context.WithCancel(ctx)
	}
	defer cancel()
	jobs, err := t.client.Jobs(ctx)
	s := sample{jobs: jobs, err: err, at: time.Now()}
	if err != nil {
		return s
	}
	if a, err := t.client.Agent(ctx); err == nil {
		s.agent = &a
	}
	return s
}

// apply computes the rows of s against the previous sample.
func (t *top) apply(s sample) {
	t.at = s.at
	if s.err != nil {
		t.err = s.err
		return
	}
	if s.agent != nil {
		t.agent = *s.agent
	}
	t.err = nil
	t.rows = topRows(t.prev, s.jobs, s.at.Sub(t.prevTime), t.order)
	t.prev = make(map[string]api.Job, len(s.jobs))
	for _, j := range s.jobs {
		t.prev[j.ID] = j
	}
	t.prevTime = s.at
}

// refresh takes a sample and computes the rows against the previous one.
func (t *top) refresh(ctx context.Context) { t.apply(t.fetch(ctx)) }

// resort sorts the rows by order again (a key was pressed).
func (t *top) resort(order string) {
	t.order = order
	sortRows(t.rows, order)
}

// frame renders the current rows as lines at most width wide (0: no
// limit), at most height lines (0: no limit).
func (t *top) frame(width, height int) []string {
	state := t.agent.State
	if state == "" {
		state = "?"
	}
	counts := map[string]int{}
	for _, r := range t.rows {
		counts[r.State]++
	}
	var cs []string
	for _, s := range []string{"running", "starting", "backoff", "waiting", "stopping", "exited", "failed", "stopped"} {
		if counts[s] > 0 {
			cs = append(cs, fmt.Sprintf("%d %s", counts[s], s))
		}
	}
	head := fmt.Sprintf("berth top: %s %s, generation %d, %d jobs", t.agent.ID, state, t.agent.Generation, len(t.rows))
	if len(cs) > 0 {
		head += " (" + strings.Join(cs, ", ") + ")"
	}
	head += fmt.Sprintf(" at %s, every %v, %s", t.addr, t.delay, t.at.Format("15:04:05"))
	lines := []string{head}
	if t.err != nil {
		lines = append(lines, "refresh failed: "+t.err.Error())
	} else {
		lines = append(lines, fmt.Sprintf("sort: %s   keys: c cpu, m memory, i io, p pressure, r restarts, j job, q quit", t.order))
	}
	lines = append(lines, "")
	idw := len("JOB")
	for _, r := range t.rows {
		idw = max(idw, len(r.ID))
	}
	idw = min(idw, 40)
	lines = append(lines, fmt.Sprintf("%-*s %-9s %8s %6s %7s %9s %9s %5s %9s %9s %6s %6s %6s",
		idw, "JOB", "STATE", "RESTARTS", "CPU%", "CPU LIM", "MEMORY", "MEM LIM", "MEM%", "READ/s", "WRITE/s", "PSI-C", "PSI-M", "PSI-IO"))
	for _, r := range t.rows {
		id := r.ID
		if len(id) > idw {
			id = id[:idw-1] + "~"
		}
		st := r.State
		if len(st) > 9 {
			st = st[:8] + "~"
		}
		cpuLim, mem, memLim, memPct := "-", "-", "-", "-"
		if r.CPULimit > 0 {
			cpuLim = fmt.Sprintf("%.2f", r.CPULimit)
		}
		if r.HasUsage {
			mem = bytesHuman(r.Memory)
			if r.MemLimit > 0 {
				memLim = bytesHuman(r.MemLimit)
				memPct = fmt.Sprintf("%.1f", float64(r.Memory)*100/float64(r.MemLimit))
			}
		}
		lines = append(lines, fmt.Sprintf("%-*s %-9s %8d %6s %7s %9s %9s %5s %9s %9s %6s %6s %6s",
			idw, id, st, r.Restarts, pct(r.CPU), cpuLim, mem, memLim, memPct,
			perSecond(r.ReadBPS), perSecond(r.WriteBPS), pct(r.PSI[0]), pct(r.PSI[1]), pct(r.PSI[2])))
	}
	if len(t.rows) == 0 && t.err == nil {
		lines = append(lines, "(this agent runs no job)")
	}
	for i, l := range lines {
		if width > 0 && len(l) > width {
			lines[i] = l[:width]
		}
	}
	if height > 0 && len(lines) > height {
		lines = lines[:height]
	}
	return lines
}

func pct(v float64) string {
	if v < 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f", v)
}

func perSecond(v float64) string {
	if v < 0 {
		return "-"
	}
	return bytesHuman(uint64(v))
}

// batch prints frames one after another, plain text, until ctx ends or
// after n frames (n <= 0: no limit). The first refresh failing is an
// error (exit status 1); later failures are shown in the frame.
func (t *top) batch(ctx context.Context, n int) error {
	for i := 0; n <= 0 || i < n; i++ {
		if i > 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(t.delay):
			}
		}
		t.refresh(ctx)
		if i == 0 && t.err != nil {
			return reachError(t.err)
		}
		if i > 0 {
			fmt.Fprintln(t.out)
		}
		for _, l := range t.frame(0, 0) {
			fmt.Fprintln(t.out, l)
		}
	}
	return nil
}

// ANSI control sequences (ECMA-48; the alternate screen and cursor
// visibility are xterm's private modes, which every terminal berth top
// is run in understands).
const (
	altScreenOn  = "\x1b[?1049h"
	altScreenOff = "\x1b[?1049l"
	cursorHide   = "\x1b[?25l"
	cursorShow   = "\x1b[?25h"
	cursorHome   = "\x1b[H"
	clearLine    = "\x1b[K"
	clearBelow   = "\x1b[J"
)

// interactive runs the full-screen view on the terminal: raw mode on in
// for single keys, the alternate screen on out, one loop that waits for a
// key (poll(2) on in) until the next refresh. A refresh is fetched by a
// goroutine the loop owns, so that keys (q above all) are answered while
// the agent is slow to; on return the fetch is cancelled and waited for.
// The terminal is restored however it ends.
func (t *top) interactive(ctx context.Context, in int, n int) error {
	t.refresh(ctx)
	if t.err != nil {
		return reachError(t.err)
	}
	old, err := term.MakeRaw(in)
	if err != nil {
		return fmt.Errorf("terminal raw mode: %w", err)
	}
	defer term.Restore(in, old)
	fmt.Fprint(t.out, altScreenOn+cursorHide)
	defer fmt.Fprint(t.out, cursorShow+altScreenOff)

	outFd := int(os.Stdout.Fd())
	if f, ok := t.out.(*os.File); ok {
		outFd = int(f.Fd())
	}
	draw := func() {
		w, h, err := term.GetSize(outFd)
		if err != nil {
			w, h = 80, 24
		}
		var b strings.Builder
		b.WriteString(cursorHome)
		for _, l := range t.frame(w, h) {
			b.WriteString(l + clearLine + "\r\n")
		}
		b.WriteString(clearBelow)
		fmt.Fprint(t.out, b.String())
	}
	frames := 1
	draw()
	next := time.Now().Add(t.delay)
	lastW, lastH, _ := term.GetSize(outFd)
	key := make([]byte, 16)
	fctx, cancel := context.WithCancel(ctx)
	var fetched chan sample // nil: no fetch under way
	defer func() {
		cancel()
		if fetched != nil {
			<-fetched
		}
	}()
	for {
		if ctx.Err() != nil {
			return nil
		}
		if n > 0 && frames >= n {
			return nil
		}
		// Wake for a key, for the next refresh, or every 250 ms to notice
		// a resized terminal; every 20 ms while a fetch is under way.
		wait := min(time.Until(next), 250*time.Millisecond)
		if fetched != nil {
			wait = 20 * time.Millisecond
		}
		fds := []unix.PollFd{{Fd: int32(in), Events: unix.POLLIN}}
		ready, err := unix.Poll(fds, int(max(wait, 0)/time.Millisecond))
		if err != nil && !errors.Is(err, unix.EINTR) {
			return fmt.Errorf("wait for a key: %w", err)
		}
		if ready > 0 {
			k, err := unix.Read(in, key)
			if err != nil && !errors.Is(err, unix.EINTR) && !errors.Is(err, unix.EAGAIN) {
				return fmt.Errorf("read a key: %w", err)
			}
			if k == 0 && err == nil {
				return nil // end of input
			}
			for _, c := range key[:max(k, 0)] {
				switch c {
				case 'q', 'Q', 3, 4: // q, Ctrl-C, Ctrl-D
					return nil
				}
				for name, o := range orders {
					if c == o.key || c == o.key-'a'+'A' {
						t.resort(name)
					}
				}
			}
			draw()
			continue
		}
		if w, h, err := term.GetSize(outFd); err == nil && (w != lastW || h != lastH) {
			lastW, lastH = w, h
			draw()
		}
		if fetched == nil && !time.Now().Before(next) {
			fetched = make(chan sample, 1)
			go func(c chan<- sample) { c <- t.fetch(fctx) }(fetched)
		}
		select {
		case s := <-fetched:
			fetched = nil
			t.apply(s)
			frames++
			draw()
			next = time.Now().Add(t.delay)
		default:
		}
	}
}
