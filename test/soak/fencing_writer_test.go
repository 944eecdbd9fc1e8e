//go:build soak

package soak

import (
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/berthd/berth/test/soak/fence"
	"golang.org/x/sys/unix"
)

// The heartbeat writer is this test binary run by a job's shell
// (TestMain sees heartbeatEnv): every 50–100 ms it appends one attempt
// line (fence.Record) to the history file named by heartbeatEnv, with
// the run's BERTH_FENCING_TOKEN ("-" when there is none: the job goes on),
// its run identity and start, the agent's cgroup (BERTH_CGROUP), its pid,
// its role and the job command's variant ("main/0") and CLOCK_BOOTTIME,
// with one write(2) in O_APPEND: the history file is
// the resource, every line an attempt it receives, in the order it
// receives them.
//
// A job with ruleEnv=1 follows the claim rule: when the run has a claim
// file (fence.ClaimFileEnv), it writes only while CLOCK_BOOTTIME is
// before the file's deadline less marginEnv, and otherwise appends a
// "held" line instead; a claim file named but not readable holds the
// write back too (the run cannot show its claim). Without the variable
// (a berth without claim files) there is no rule to follow.
//
// Each job's shell (heartbeatScript) forks three writers before it execs
// the fourth: a background child, a setsid'ed child and a double-forked
// one (its parent exits at once), so that every way a job's process can
// leave its parent is in the history.
const (
	heartbeatEnv = "SOAK_HEARTBEAT"    // the history file
	ruleEnv      = "SOAK_CLAIM_RULE"   // "1": follow the claim rule
	marginEnv    = "SOAK_CLAIM_MARGIN" // the rule's margin, a Go duration
	runEnv       = "SOAK_RUN"          // the run's identity, set by its shell
	runStartEnv  = "SOAK_RUN_START"    // when the run began: /proc/uptime's first field, set by its shell
	roleEnv      = "SOAK_ROLE"         // which of the run's processes this is
	variantEnv   = "SOAK_VARIANT"      // changed by a reload storm: a changed command
)

func runHeartbeat() int {
	runtime.GOMAXPROCS(1)
	path := os.Getenv(heartbeatEnv)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		fmt.Fprintln(os.Stderr, "heartbeat:", err)
		return 1
	}
	token := os.Getenv(fence.TokenEnv)
	if token == "" {
		token = fence.NoToken
	}
	start, err := uptimeNanos(os.Getenv(runStartEnv))
	if err != nil {
		fmt.Fprintf(os.Stderr, "heartbeat: %s=%q: %v\n", runStartEnv, os.Getenv(runStartEnv), err)
	}
	rule := os.Getenv(ruleEnv) == "1"
	margin, _ := time.ParseDuration(os.Getenv(marginEnv))
	claimFile := os.Getenv(fence.ClaimFileEnv)
	rec := fence.Record{Job: os.Getenv("BERTH_JOB_ID"), Token: token, Run: os.Getenv(runEnv), RunStart: start,
		Agent: os.Getenv("BERTH_CGROUP"), PID: hostPID(), Role: os.Getenv(roleEnv) + "/" + os.Getenv(variantEnv), Rule: rule}
	for {
		now := boottime()
		rec.Kind = fence.Attempt
		if rule && claimFile != "" {
			if c, err := fence.ReadClaim(claimFile); err != nil || !c.Allows(now, margin) {
				rec.Kind = fence.Held
			}
		}
		rec.At = now
		_, _ = f.Write([]byte(rec.Line() + "\n"))
		time.Sleep(50*time.Millisecond + rand.N(50*time.Millisecond))
	}
}

// boottime is CLOCK_BOOTTIME (clock_gettime(2)).
func boottime() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		panic(err) // every kernel since 2.6.39 has it
	}
	return time.Duration(ts.Nano())
}

// uptimeNanos reads seconds with two decimals, /proc/uptime's first field
// (CLOCK_BOOTTIME), as nanoseconds.
func uptimeNanos(s string) (time.Duration, error) {
	whole, frac, _ := strings.Cut(s, ".")
	sec, err := strconv.ParseInt(whole, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("want seconds: %w", err)
	}
	ns := int64(0)
	if frac != "" {
		if len(frac) > 9 {
			frac = frac[:9]
		}
		if ns, err = strconv.ParseInt(frac+strings.Repeat("0", 9-len(frac)), 10, 64); err != nil {
			return 0, fmt.Errorf("want seconds: %w", err)
		}
	}
	return time.Duration(sec)*time.Second + time.Duration(ns), nil
}

// hostPID is this process's pid in the outermost PID namespace that its
// /proc shows (the first field of NSpid in /proc/self/status, proc(5)):
// the host's, when the job runs in a PID namespace of its own but sees
// the host's /proc; os.Getpid() otherwise.
func hostPID() int {
	b, err := os.ReadFile("/proc/self/status")
	if err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if rest, ok := strings.CutPrefix(l, "NSpid:"); ok {
				if f := strings.Fields(rest); len(f) > 0 {
					if pid, err := strconv.Atoi(f[0]); err == nil {
						return pid
					}
				}
			}
		}
	}
	return os.Getpid()
}

// heartbeatScript is the job's shell: it names the run (a random UUID
// from the kernel, so that no PID namespace can make two runs look
// alike) and its start, forks the three writers that leave their parent
// in different ways, then becomes the fourth. It holds no "${": berth
// expands those in a command.
func heartbeatScript() string {
	q := shellQuote(selfBin)
	return strings.Join([]string{
		"read -r run < /proc/sys/kernel/random/uuid",
		"read -r up idle < /proc/uptime",
		"export " + runEnv + "=\"$run\" " + runStartEnv + "=\"$up\"",
		roleEnv + "=child " + q + " &",
		roleEnv + "=setsid /usr/bin/setsid " + q + " &",
		"( " + roleEnv + "=double " + q + " & )",
		roleEnv + "=main exec " + q,
	}, "\n")
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// heartbeatCommand is the TOML command and env of a heartbeat job writing
// to history; rule makes it follow the claim rule with margin.
func heartbeatCommand(history string, rule bool, margin time.Duration, variant int) string {
	r := 0
	if rule {
		r = 1
	}
	return fmt.Sprintf("command = [\"/bin/sh\", \"-c\", %q]\n  env = { %s = %q, %s = \"%d\", %s = %q, %s = \"%d\" }",
		heartbeatScript(), heartbeatEnv, history, ruleEnv, r, marginEnv, margin.String(), variantEnv, variant)
}
