// Command shapejob is a synthetic job for the end-to-end replay of berth
// recommend: it follows one of the shapes of package recommend/replay
// (steady, step, leak, bursty) in CPU and memory for a while and exits 0,
// so that the test can run it as a job under the real agent, take the
// recommendation, and run it again under the recommended limits (no OOM
// kill, throttled periods at most 1 %).
//
//	shapejob -shape bursty -duration 10m -seed 1
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/berthd/berth/recommend/replay"
)

func main() {
	shape := flag.String("shape", "steady", fmt.Sprintf("the shape to follow: %v", replay.Names()))
	d := flag.Duration("duration", 10*time.Minute, "how long to run; the shape is laid out over it")
	seed := flag.Uint64("seed", 1, "the shape's noise and burst phase (levels do not depend on it)")
	flag.Parse()
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
