// Command shapejob is a synthetic job for the end-to-end replay of berth
// recommend: it follows one of the shapes of package recommend/replay
// (steady, step, leak, bursty) in CPU and memory for a while and exits 0,
// so that the test can run it as a job under the real agent, take the
// recommendation, and run it again under the recommended limits (no OOM
// kill, throttled periods at most 1 %).
//
//	shapejob -shape bursty -duration 10m -seed 1
//
// With -leak it is instead the leaking job of the memory pressure test
// (test/mempressure_test.go): it leaks 1 MiB (touched, so resident) every
// -leak interval until a SIGTERM, which it reports on stderr with what it
// had leaked and exits 0 on.
//
//	shapejob -leak 30ms
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/berthd/berth/recommend/replay"
)

func main() {
	shape := flag.String("shape", "steady", fmt.Sprintf("the shape to follow: %v", replay.Names()))
	d := flag.Duration("duration", 10*time.Minute, "how long to run; the shape is laid out over it")
	seed := flag.Uint64("seed", 1, "the shape's noise and burst phase (levels do not depend on it)")
	leak := flag.Duration("leak", 0, "leak 1 MiB every this long until SIGTERM instead of following a shape")
	high := flag.Int64("high", 0, "with -leak: note when the cgroup's usage first reaches this many bytes, and report the time from there to SIGTERM")
	flag.Parse()
	if *leak > 0 {
		leakUntilTerm(*leak, *high)
		return
	}
	s, err := replay.New(*shape, *d, *seed)
	if err == nil {
		fmt.Fprintf(os.Stderr, "shapejob: %s for %v, seed %d, up to %.1f MiB\n", s.Name, *d, *seed, float64(s.MaxMemory(*d))/(1<<20))
		err = replay.Follow(s, *d)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "shapejob:", err)
		os.Exit(1)
	}
}

// leakUntilTerm leaks 1 MiB every interval, each page written so that it
// is charged to the job's cgroup, until SIGTERM, which it reports with
// the MiB leaked. With high > 0 it reads its cgroup's memory usage after
// each MiB (v1 memory.usage_in_bytes, else v2 memory.current), notes when
// it first reached high, and reports the time from there to the SIGTERM:
// the threshold crossed to the stop signal received, as the job sees it.
func leakUntilTerm(interval time.Duration, high int64) {
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	usage := ""
	if high > 0 {
		usage = usageFile()
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var held [][]byte
	var crossed time.Time
	for {
		select {
		case <-term:
			at := time.Now()
			msg := ""
			if !crossed.IsZero() {
				msg = fmt.Sprintf(" crossed_to_term=%dus", at.Sub(crossed).Microseconds())
			}
			fmt.Fprintf(os.Stderr, "shapejob: SIGTERM after %d MiB leaked;%s exiting\n", len(held), msg)
			os.Exit(0)
		case <-tick.C:
			b := make([]byte, 1<<20)
			for i := 0; i < len(b); i += 4096 {
				b[i] = 1
			}
			held = append(held, b)
			if usage != "" && crossed.IsZero() {
				if v, err := os.ReadFile(usage); err == nil {
					var n int64
					if _, err := fmt.Sscan(string(v), &n); err == nil && n >= high {
						crossed = time.Now()
					}
				}
			}
		}
	}
}

// usageFile is the memory usage file of the process's own cgroup: v1
// memory.usage_in_bytes where the memory controller is v1, else cgroup2's
// memory.current; "" when neither is found.
func usageFile() string {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return ""
	}
	var v2 string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			if c == "memory" {
				return "/sys/fs/cgroup/memory" + parts[2] + "/memory.usage_in_bytes"
			}
		}
		if parts[0] == "0" {
			v2 = "/sys/fs/cgroup" + parts[2] + "/memory.current"
		}
	}
	if _, err := os.Stat(v2); err == nil {
		return v2
	}
	return ""
}
