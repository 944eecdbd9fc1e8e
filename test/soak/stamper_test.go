//go:build soak

package soak

import (
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// The stamper is this test binary run as a job (TestMain sees stamperEnv):
// every stampEvery it appends "<BERTH_CGROUP> <pid> <unix-ns>" to
// <dir>/<BERTH_JOB_ID>.log with one write(2) in O_APPEND, so lines of
// several workers never interleave. <BERTH_CGROUP> names the agent (each
// agent has its own cgroup_root). On SIGTERM it writes lingerEnv more
// stamps, then exits 0: a graceful stop takes visible time in which no
// other worker of the job may run. SIGKILL (fencing) stops it at once.
const (
	stamperEnv = "SOAK_STAMPER"      // the directory of the stamp files
	lingerEnv  = "SOAK_STAMP_LINGER" // stamps written after SIGTERM
	stampEvery = 10 * time.Millisecond
)

func runStamper() int {
	dir, job, cg := os.Getenv(stamperEnv), os.Getenv("BERTH_JOB_ID"), os.Getenv("BERTH_CGROUP")
	linger, _ := strconv.Atoi(os.Getenv(lingerEnv))
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	f, err := os.OpenFile(filepath.Join(dir, job+".log"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, "stamper:", err)
		return 1
	}
	pid := hostPID() // the pid /v1/jobs shows, not the jobs namespace's
	stamp := func() {
		_, _ = f.Write([]byte(fmt.Sprintf("%s %d %d\n", cg, pid, time.Now().UnixNano())))
	}
	tick := time.NewTicker(stampEvery)
	for {
		stamp()
		select {
		case <-tick.C:
		case <-term:
			for i := 0; i < linger; i++ {
				<-tick.C
				stamp()
			}
			return 0
		}
	}
}

// stamperCommand is the TOML command and env of a stamping job writing to
// dir, lingering linger stamps after SIGTERM.
func stamperCommand(dir string, linger int) string {
	return fmt.Sprintf("command = [%q]\n  env = { %s = %q, %s = \"%d\" }", selfBin, stamperEnv, dir, lingerEnv, linger)
}
