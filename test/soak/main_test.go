//go:build soak

package soak

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/berthd/berth/internal/testutil"
)

var (
	flagKills       = flag.Int("soak.kills", 10, "SIGKILLs of the agent in TestSoakAgentKills")
	flagPartitions  = flag.Int("soak.partitions", 10, "partitions in TestSoakPartitions")
	flagMemberKills = flag.Int("soak.memberkills", 5, "SIGKILLs of an agent among the partitions of TestSoakPartitions")
	flagBurners     = flag.Int("soak.burners", runtime.NumCPU(), "CPU-burning processes during TestSoakPartitions")
	flagBin         = flag.String("soak.bin", "", "berth binary to run (default: built from ./cmd/berth into a temporary directory)")
	flagSeed        = flag.Uint64("soak.seed", 0, "seed of the random moments and durations (0: from the clock; the seed used is logged)")
	flagReport      = flag.String("soak.report", "", "append each test's figures, as a Markdown table, to this file")
)

// berthBin is the agent binary every soak runs.
var berthBin string

// selfBin is this test binary: jobs run it as the stamper (stamper.go).
var selfBin string

func TestMain(m *testing.M) {
	if os.Getenv(stamperEnv) != "" {
		os.Exit(runStamper())
	}
	if os.Getenv(heartbeatEnv) != "" {
		os.Exit(runHeartbeat())
	}
	flag.Parse()
	var err error
	if selfBin, err = os.Executable(); err != nil {
		fmt.Fprintln(os.Stderr, "soak: own executable:", err)
		os.Exit(1)
	}
	code := func() int {
		if *flagBin != "" {
			berthBin, err = filepath.Abs(*flagBin)
			if err != nil {
				fmt.Fprintln(os.Stderr, "soak:", err)
				return 1
			}
			return m.Run()
		}
		dir, err := os.MkdirTemp("", "berth-soak-bin-")
		if err != nil {
			fmt.Fprintln(os.Stderr, "soak:", err)
			return 1
		}
		defer os.RemoveAll(dir)
		berthBin = filepath.Join(dir, "berth")
		build := exec.Command("go", "build", "-o", berthBin, "../../cmd/berth")
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "soak: build berth:", err)
			return 1
		}
		return m.Run()
	}()
	// No soak leaves a cgroup directory or cgroup-root lock file of its
	// own behind (testutil.TrackCgroupRoot).
	os.Exit(testutil.CheckLeftBehind(code))
}

// newRand returns the random source of one test, seeded from -soak.seed or
// the clock; the seed is logged so that a run can be repeated.
func newRand(t testing.TB) *rand.Rand {
	seed := *flagSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (repeat with -soak.seed=%d)", seed, seed)
	return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
}

// uniform is a random duration from 0 to d, both included.
func uniform(rng *rand.Rand, d time.Duration) time.Duration {
	return time.Duration(rng.Int64N(int64(d) + 1))
}
