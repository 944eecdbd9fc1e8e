package memwatch

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berthd/berth/internal/testutil"
)

// The latency benchmarks report, over their runs, the median, the 99th
// percentile and the worst of two delays from the moment the rule came
// to hold: to the watcher's wake-up (Event.At) and to the owner's Drain
// (after Ready): the second is what a supervisor acting on the event
// waits. Run them with e.g. -benchtime 200x (threshold) and -benchtime
// 30x (PSI: each run is a stall of a few seconds and a pause).

// reportLatency reports p50, p99 and max of ds, in ms, as name-*.
func reportLatency(b *testing.B, name string, ds []time.Duration) {
	if len(ds) == 0 {
		return
	}
	slices.Sort(ds)
	at := func(q float64) float64 {
		i := max(int(math.Ceil(q*float64(len(ds))))-1, 0)
		return float64(ds[i]) / float64(time.Millisecond)
	}
	b.ReportMetric(at(0.5), name+"-p50-ms")
	b.ReportMetric(at(0.99), name+"-p99-ms")
	b.ReportMetric(at(1), name+"-max-ms")
}

// delivery is an event as the owner drained it, with when.
type delivery struct {
	ev Event
	at time.Time
}

// deliver drains w as an owner would, in a goroutine that waits on Ready,
// and sends each event with the time it was drained (before anything else
// is done with it), until the end of the benchmark, which waits for it.
func deliver(b *testing.B, w *Watcher) <-chan delivery {
	out := make(chan delivery, 64)
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		var evs []Event
		for {
			select {
			case <-w.Ready():
			case <-stop:
				return
			}
			evs = w.Drain(evs[:0])
			at := time.Now()
			for _, e := range evs {
				select {
				case out <- delivery{e, at}:
				case <-stop:
					return
				}
			}
		}
	}()
	b.Cleanup(func() {
		close(stop)
		<-done
	})
	return out
}

// await is the next delivery of h within Deadline(timeout).
func await(b *testing.B, ds <-chan delivery, h *Handle, timeout time.Duration, what string) delivery {
	b.Helper()
	deadline := time.After(testutil.Deadline(timeout))
	for {
		select {
		case d := <-ds:
			if d.ev.Handle == h {
				return d
			}
		case <-deadline:
			b.Fatalf("no event within %v: waiting for %s", testutil.Deadline(timeout), what)
		}
	}
}

// BenchmarkThresholdLatency: a job maps and touches 32 MiB, reading its
// own memory.usage_in_bytes every 64 KiB, under a threshold 16 MiB above
// its usage at start; then unmaps it. The crossing upwards is after the
// job's last read below the threshold; downwards, after the job's time
// just before munmap(2). One op is one crossing each way.
func BenchmarkThresholdLatency(b *testing.B) {
	needV1Memory(b)
	h := testHierarchy(b)
	g := newJob(b, h, "latency", memoryLimit(512<<20))
	tgt := TargetOf(g)
	w := newWatcher(b)
	child := startChild(b, g, "alloc", filepath.Join(tgt.V1Dir, "memory.usage_in_bytes"))
	out := bufio.NewReader(child.out)
	readMono := func() int64 {
		line, err := out.ReadString('\n')
		if err != nil {
			b.Fatalf("alloc child: %v", err)
		}
		ns, err := strconv.ParseInt(strings.TrimSpace(line), 10, 64)
		if err != nil {
			b.Fatalf("alloc child said %q", line)
		}
		return ns
	}
	high := int64(usageOf(b, tgt.V1Dir)) + 16<<20
	hd, err := w.Watch(tgt, Rule{High: high})
	if err != nil {
		b.Fatal(err)
	}
	// Go's monotonic readings are CLOCK_MONOTONIC, as the child's.
	refTime, refMono := time.Now(), monoNow()
	mono := func(t time.Time) int64 { return refMono + int64(t.Sub(refTime)) }
	ds := deliver(b, w)
	var upWake, upOwner, downWake, downOwner []time.Duration
	for b.Loop() {
		fmt.Fprintf(child.in, "up %d %d\n", 32<<20, high)
		below := readMono()
		d := await(b, ds, hd, 10*time.Second, "usage over the threshold")
		if d.ev.Kind != Over {
			b.Fatalf("event %v, want over", d.ev.Kind)
		}
		upWake = append(upWake, time.Duration(mono(d.ev.At)-below))
		upOwner = append(upOwner, time.Duration(mono(d.at)-below))
		fmt.Fprintln(child.in, "down")
		before := readMono()
		d = await(b, ds, hd, 10*time.Second, "usage back under the threshold")
		if d.ev.Kind != Under {
			b.Fatalf("event %v, want under", d.ev.Kind)
		}
		downWake = append(downWake, time.Duration(mono(d.ev.At)-before))
		downOwner = append(downOwner, time.Duration(mono(d.at)-before))
	}
	reportLatency(b, "up-wake", upWake)
	reportLatency(b, "up-owner", upOwner)
	reportLatency(b, "down-wake", downWake)
	reportLatency(b, "down-owner", downOwner)
}

// usageOf reads a v1 memory cgroup's memory.usage_in_bytes.
func usageOf(b testing.TB, dir string) uint64 {
	b.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, "memory.usage_in_bytes"))
	if err != nil {
		b.Fatal(err)
	}
	u, err := strconv.ParseUint(strings.TrimSpace(string(raw)), 10, 64)
	if err != nil {
		b.Fatal(err)
	}
	return u
}

// stallSample is one reading of a pressure file's "some" total.
type stallSample struct {
	at    time.Time
	stall time.Duration
}

// readStall is one sample of file.
func readStall(file string, buf []byte) (stallSample, bool) {
	fd, err := os.Open(file)
	if err != nil {
		return stallSample{}, false
	}
	n, _ := fd.Read(buf)
	fd.Close()
	_, stall, err := parseSome(buf[:n])
	return stallSample{time.Now(), stall}, err == nil
}

// sampleStall reads file once, then again every 5 ms in a goroutine until
// stop is closed, and then sends what it read. The first reading is taken
// before it returns, so that it precedes whatever the caller starts next.
func sampleStall(file string, stop <-chan struct{}) <-chan []stallSample {
	out := make(chan []stallSample, 1)
	buf := make([]byte, 512)
	var ss []stallSample
	if s, ok := readStall(file, buf); ok {
		ss = append(ss, s)
	}
	go func() {
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				out <- ss
				return
			case <-tick.C:
			}
			if s, ok := readStall(file, buf); ok {
				ss = append(ss, s)
			}
		}
	}()
	return out
}

// crossing is the first sample at which the stall within the window
// before it reached threshold (the stall at the window's start
// interpolated between samples); the zero time when none did.
func crossing(ss []stallSample, window, threshold time.Duration) time.Time {
	at := func(t time.Time) time.Duration {
		i, _ := slices.BinarySearchFunc(ss, t, func(s stallSample, t time.Time) int { return s.at.Compare(t) })
		switch {
		case i == 0:
			return ss[0].stall
		case i == len(ss):
			return ss[len(ss)-1].stall
		}
		a, z := ss[i-1], ss[i]
		f := float64(t.Sub(a.at)) / float64(z.at.Sub(a.at))
		return a.stall + time.Duration(f*float64(z.stall-a.stall))
	}
	for _, s := range ss {
		if s.stall-at(s.at.Add(-window)) >= threshold {
			return s.at
		}
	}
	return time.Time{}
}

// quiet waits until file's stall total has not moved for 2½ windows: the
// kernel's window is empty and a next event starts a new chain.
func quiet(b *testing.B, file string, window time.Duration) {
	b.Helper()
	var last time.Duration
	changed := time.Now()
	if !testutil.Poll(60*time.Second, func() bool {
		raw, err := os.ReadFile(file)
		if err != nil {
			b.Fatal(err)
		}
		_, stall, err := parseSome(raw)
		if err != nil {
			b.Fatal(err)
		}
		if stall != last {
			last, changed = stall, time.Now()
		}
		return time.Since(changed) >= window*5/2
	}) {
		b.Fatalf("%s still stalling after %v", file, testutil.Deadline(60*time.Second))
	}
}

// BenchmarkPSILatency: a job that stalls on memory (as in
// TestPSIOverHeldForDuration) under a watch of 10 % over 1 s made long
// before (a privileged trigger: one window of 1 s, checked every 100 ms;
// without CAP_SYS_RESOURCE a window of 2 s, checked every 2 s). The rule
// holds from the first moment the stall within the window before it
// reaches the threshold, found from the "some" total read every 5 ms (so
// within 5 ms, and to the kernel's approximation of a sliding window).
// The total is read from the job's parent (jobs/, with this job alone
// below it: the same stall), not from the job's own file: a read of a
// cgroup's pressure file folds its averages, and when that falls between
// the kernel's 2 s update being due and its running, the update skips the
// unprivileged triggers (kernel/sched/psi.c psi_show and psi_avgs_work);
// reading it every 5 ms starves them. One op is one stall until Over,
// then a pause until the kernel's window is empty.
func BenchmarkPSILatency(b *testing.B) {
	needPSI(b)
	h := testHierarchy(b)
	w := newWatcher(b)
	tgt, start := stallingJob(b, h)
	hd, err := w.Watch(tgt, Rule{Limit: 10, Duration: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	trig := hd.psi.trig
	b.Logf("trigger %q, privileged %v", trig, w.privileged)
	parent := filepath.Join(filepath.Dir(filepath.Dir(tgt.PressureFile)), PressureFileName)
	quiet(b, parent, trig.window)
	ds := deliver(b, w)
	var wake, owner []time.Duration
	unmeasured := 0
	for b.Loop() {
		own, ok := readStall(tgt.PressureFile, make([]byte, 512))
		if !ok {
			b.Fatalf("cannot read %s", tgt.PressureFile)
		}
		stop := make(chan struct{})
		samples := sampleStall(parent, stop)
		job := start()
		d := await(b, ds, hd, 60*time.Second, "over")
		ev, delivered := d.ev, d.at
		close(stop)
		ss := <-samples
		job.stop(b)
		if ev.Kind != Over {
			b.Fatalf("event %v, want over", ev.Kind)
		}
		if ev.Stall <= own.stall {
			b.Fatalf("over (held %v) with no stall since the job began (total %v, then %v)", ev.Held, own.stall, ev.Stall)
		}
		tc := crossing(ss, trig.window, trig.threshold)
		if tc.IsZero() || tc.After(ev.At) {
			// The job's stall reached the threshold in the kernel's
			// window but not in the samples' (a reader starved by the
			// load, or the kernel's approximation of a sliding window).
			unmeasured++
		} else {
			wake = append(wake, ev.At.Sub(tc))
			owner = append(owner, delivered.Sub(tc))
		}
		quiet(b, parent, trig.window)
		for len(ds) > 0 { // events of the stall after the first Over
			<-ds
		}
	}
	reportLatency(b, "wake", wake)
	reportLatency(b, "owner", owner)
	b.ReportMetric(float64(unmeasured), "unmeasured")
}

// BenchmarkWatchClose: one job's watch made and closed: the agent's cost
// at each start and stop of a job (v1: the kernel waits for an RCU grace
// period in each threshold registration).
func BenchmarkWatchClose(b *testing.B) {
	needCgroups(b)
	h := testHierarchy(b)
	g := newJob(b, h, "watch", memoryLimit(64<<20))
	w := newWatcher(b)
	for _, c := range []struct {
		mech Mechanism
		tgt  Target
		rule Rule
	}{
		{Threshold, TargetOf(g), Rule{High: 32 << 20}},
		{PSI, Target{PressureFile: TargetOf(g).PressureFile}, Rule{Limit: 40, Duration: 30 * time.Second}},
	} {
		b.Run(c.mech.String(), func(b *testing.B) {
			if c.tgt.Mechanism() != c.mech {
				b.Skipf("no %v on a %s host", c.mech, h.Mode())
			}
			var watch, closing time.Duration
			for b.Loop() {
				t0 := time.Now()
				hd, err := w.Watch(c.tgt, c.rule)
				if err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				hd.Close()
				watch, closing = watch+t1.Sub(t0), closing+time.Since(t1)
			}
			b.ReportMetric(float64(watch)/float64(b.N)/1e3, "watch-µs/op")
			b.ReportMetric(float64(closing)/float64(b.N)/1e3, "close-µs/op")
		})
	}
}
