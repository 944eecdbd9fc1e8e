//go:build soak

// Package soak holds berth's soak tests: the real agent binary, real etcd
// processes (Debian's etcd-server), real cgroups and real network
// namespaces, hammered for many rounds, with figures printed at the end.
//
//   - TestSoakAgentKills: the agent SIGKILLed at random moments (start-up,
//     claims, a reload, a stop, a restart backoff, steady running); after
//     each restart no process and no cgroup of an earlier run is left and
//     the agent's open file count is back to its baseline.
//   - TestSoakPartitions: agents in their own network namespaces cut from a
//     three-member etcd cluster (link down, or every packet dropped) while
//     other processes burn CPU; the workers' own timestamps show no job ever
//     ran twice and every cut agent's workers died before its lease could
//     expire on the server.
//   - TestSoakEtcd*: the etcd leader killed, one member lost, every member
//     restarted.
//   - TestSoakFull*: log_dir and data_dir on a full file system.
//
// The files carry the build tag "soak": `make soak` runs the long form
// (100 kills, 100 partitions), `make soak-short` (and .ci/run) the short
// one. They need root; a test skips, saying why, where the host lacks what
// it needs.
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
	flagKills      = flag.Int("soak.kills", 10, "SIGKILLs of the agent in TestSoakAgentKills")
	flagPartitions = flag.Int("soak.partitions", 10, "partitions in TestSoakPartitions")
	flagBurners    = flag.Int("soak.burners", runtime.NumCPU(), "CPU-burning processes during TestSoakPartitions")
	flagBin        = flag.String("soak.bin", "", "berth binary to run (default: built from ./cmd/berth into a temporary directory)")
	flagSeed       = flag.Uint64("soak.seed", 0, "seed of the random moments and durations (0: from the clock; the seed used is logged)")
	flagReport     = flag.String("soak.report", "", "append each test's figures, as a Markdown table, to this file")
)

// berthBin is the agent binary every soak runs.
var berthBin string

// selfBin is this test binary: jobs run it as the stamper (stamper.go).
var selfBin string

func TestMain(m *testing.M) {
	if os.Getenv(stamperEnv) != "" {
		os.Exit(runStamper())
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
