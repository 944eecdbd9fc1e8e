package test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berthd/berth/internal/kernfile"
	"github.com/berthd/berth/internal/testutil"
	"github.com/prometheus/procfs"
)

// tmuxServer is a tmux server of this test alone (its own socket, no
// configuration file), killed at cleanup.
type tmuxServer struct {
	t      *testing.T
	bin    string
	socket string
}

func newTmux(t *testing.T) *tmuxServer {
	t.Helper()
	bin, err := exec.LookPath("tmux")
	if err != nil {
		t.Skip("tmux not installed (Debian: apt-get install tmux; test/deps.sh installs it)")
	}
	s := &tmuxServer{t: t, bin: bin, socket: "berth-test-" + randSuffix()}
	t.Cleanup(func() { _ = exec.Command(bin, "-L", s.socket, "kill-server").Run() })
	return s
}

// run runs a tmux command against this server and returns its output.
func (s *tmuxServer) run(args ...string) string {
	s.t.Helper()
	out, err := exec.Command(s.bin, append([]string{"-L", s.socket, "-f", "/dev/null"}, args...)...).CombinedOutput()
	if err != nil {
		s.t.Fatalf("tmux %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// capture returns the visible text of the session's pane.
func (s *tmuxServer) capture(session string) string {
	s.t.Helper()
	return s.run("capture-pane", "-p", "-t", session)
}

// topRows parses berth top's table in a captured pane: job ID -> fields.
func topTable(pane string) (order []string, rows map[string][]string) {
	rows = map[string][]string{}
	in := false
	for _, l := range strings.Split(pane, "\n") {
		f := strings.Fields(l)
		if len(f) > 0 && f[0] == "JOB" {
			in = true
			continue
		}
		if in && len(f) >= 13 {
			order = append(order, f[0])
			rows[f[0]] = f
		}
	}
	return order, rows
}

// berth top in a real terminal (a tmux pane) against a real agent: a row
// per job with its state and rates, sort keys reorder the rows, q quits
// with status 0 and gives the terminal back.
func TestTopInTmux(t *testing.T) {
	tm := newTmux(t)
	e := newEnv(t)
	e.write(showcase(e))
	e.start()
	waitShowcase(e)

	// berth top runs under sh, which writes berth top's exit status to a
	// file: tmux cannot be relied on for it. tmux 3.3a built with
	// libutempter (Debian's) loses it now and then: when the pane's
	// terminal closes it removes the pane's utmp record through
	// libutempter's helper, with SIGCHLD at its default (discarded) while
	// it waits for the helper, so a pane process whose exit completes in
	// that window is never reaped: the pane is dead, but
	// #{pane_dead_status} stays empty for good and the process a zombie.
	// remain-on-exit is on before the pane starts, so that the pane (and
	// what berth top printed) stays whenever it ends.
	status := filepath.Join(t.TempDir(), "status")
	tm.run("set-option", "-wg", "remain-on-exit", "on", ";",
		"new-session", "-d", "-s", "top", "-x", "200", "-y", "40",
		"sh", "-c", `"$1" top --addr "$2" --delay 500ms; echo $? >"$3.new" && mv "$3.new" "$3"`,
		"sh", berthBin, e.addr, status)

	var pane string
	var rows map[string][]string
	var order []string
	testutil.Eventually(t, 30*time.Second, "berth top shows every job with a CPU rate", func() bool {
		pane = tm.capture("top")
		order, rows = topTable(pane)
		for _, id := range []string{"orders-sink", "orders-sink-0", "orders-sink-1", "flaky", "balloon"} {
			if _, ok := rows[id]; !ok {
				return false
			}
		}
		_, err := strconv.ParseFloat(rows["orders-sink-0"][3], 64) // CPU%, "-" in the first frame
		return err == nil
	})
	t.Logf("berth top in a 200x40 pane:\n%s", pane)
	if !strings.Contains(pane, "berth top: host-a member") || !strings.Contains(pane, "sort: cpu") {
		t.Errorf("header:\n%s", pane)
	}
	for _, id := range []string{"orders-sink", "orders-sink-0", "orders-sink-1"} {
		r := rows[id]
		if r[1] != "running" {
			t.Errorf("%s: state %q, want running\n%s", id, r[1], pane)
		}
		if r[5] == "-" || r[7] == "-" { // MEMORY, MEM LIM
			t.Errorf("%s: memory %q of %q: want usage beside the limit\n%s", id, r[5], r[7], pane)
		}
	}
	// Pressure: a rate wherever the agent reports PSI for the job.
	if j := e.jobs()["orders-sink-0"]; j.Usage != nil && j.Usage.Pressure != nil {
		if r := rows["orders-sink-0"]; r[10] == "-" {
			t.Errorf("orders-sink-0 has pressure in /v1/jobs, but PSI-C is %q\n%s", r[10], pane)
		}
	} else {
		t.Logf("the kernel keeps no pressure for the jobs: PSI columns not checked")
	}
	if r := rows["orders-sink-0"]; r[4] != "0.25" {
		t.Errorf("orders-sink-0: CPU LIM %q, want 0.25\n%s", r[4], pane)
	}
	if r := rows["flaky"]; r[2] == "0" {
		t.Errorf("flaky: RESTARTS 0, want the restarts the agent reports\n%s", pane)
	}
	// Sorted by CPU, highest first ("-": unknown, last).
	last := 1e9
	for _, id := range order {
		cpu, err := strconv.ParseFloat(rows[id][3], 64)
		if err != nil {
			cpu = -1
		}
		if cpu > last {
			t.Errorf("rows not sorted by CPU%%: %s has %v after %v\n%s", id, cpu, last, pane)
		}
		last = cpu
	}

	tm.run("send-keys", "-t", "top", "j")
	testutil.Eventually(t, 10*time.Second, "rows sorted by job ID after j", func() bool {
		pane = tm.capture("top")
		order, _ = topTable(pane)
		return strings.Contains(pane, "sort: job") && strings.Join(order, " ") == "balloon flaky orders-sink orders-sink-0 orders-sink-1"
	})
	tm.run("send-keys", "-t", "top", "m")
	testutil.Eventually(t, 10*time.Second, "sort: memory after m", func() bool {
		return strings.Contains(tm.capture("top"), "sort: memory")
	})

	failedBefore := t.Failed()
	tm.run("send-keys", "-t", "top", "q")
	sent := time.Now()
	defer func() {
		if t.Failed() && !failedBefore {
			t.Logf("after q: %s", tm.paneState("top", status))
		}
	}()
	var code string
	testutil.Eventually(t, 10*time.Second, "berth top exits after q", func() bool {
		b, err := os.ReadFile(status)
		code = strings.TrimSpace(string(b))
		return err == nil
	})
	t.Logf("berth top exited %v after q", time.Since(sent).Round(time.Millisecond))
	if code != "0" {
		t.Errorf("berth top exited with status %q after q, want 0 (128+N: killed by signal N)", code)
	}
	testutil.Eventually(t, 5*time.Second, "the table gone from the terminal after q (alternate screen left)", func() bool {
		return !strings.Contains(tm.capture("top"), "RESTARTS")
	})
}

// paneState describes a pane for a failure: the exit status the wrapper
// wrote to status, tmux's view of the pane, the pane's processes and its
// text.
func (s *tmuxServer) paneState(target, status string) string {
	var b strings.Builder
	if st, err := os.ReadFile(status); err != nil {
		fmt.Fprintf(&b, "no exit status recorded (%v)\n", err)
	} else {
		fmt.Fprintf(&b, "exit status %q recorded\n", strings.TrimSpace(string(st)))
	}
	out, err := exec.Command(s.bin, "-L", s.socket, "-f", "/dev/null", "display-message", "-p", "-t", target,
		"pane_pid=#{pane_pid} pane_dead=#{pane_dead} pane_dead_status=#{pane_dead_status} pane_dead_signal=#{pane_dead_signal}").CombinedOutput()
	fmt.Fprintf(&b, "tmux: %s (%v)\n", strings.TrimSpace(string(out)), err)
	if f := strings.Fields(string(out)); len(f) > 0 {
		if pid, err := strconv.Atoi(strings.TrimPrefix(f[0], "pane_pid=")); err == nil {
			b.WriteString(procTree(pid))
		}
	}
	out, err = exec.Command(s.bin, "-L", s.socket, "-f", "/dev/null", "capture-pane", "-p", "-t", target).CombinedOutput()
	fmt.Fprintf(&b, "pane (%v):\n%s", err, out)
	return b.String()
}

// procTree describes pid and the processes below it, a line each: its
// name, state and wait channel, and for a zombie (exited, not reaped by
// its parent) the wait status the kernel keeps for the parent.
func procTree(pid int) string {
	var b strings.Builder
	procs, _ := procfs.AllProcs()
	var walk func(pid int, indent string)
	walk = func(pid int, indent string) {
		p, err := procfs.NewProc(pid)
		var st procfs.ProcStat
		if err == nil {
			st, err = p.Stat()
		}
		if err != nil {
			fmt.Fprintf(&b, "%spid %d: %v\n", indent, pid, err)
			return
		}
		dir := "/proc/" + strconv.Itoa(pid)
		wchan, _ := os.ReadFile(dir + "/wchan")
		fmt.Fprintf(&b, "%spid %d (%s) state %s wchan %s", indent, pid, st.Comm, st.State, wchan)
		if raw, err := os.ReadFile(dir + "/stat"); err == nil && st.State == "Z" {
			if code, err := kernfile.ProcStatField(raw, 52); err == nil { // exit_code
				fmt.Fprintf(&b, ", not reaped, wait status %s", code)
			}
		}
		b.WriteString("\n")
		for _, c := range procs {
			if cs, err := c.Stat(); err == nil && cs.PPID == pid {
				walk(c.PID, indent+"  ")
			}
		}
	}
	walk(pid, "")
	return b.String()
}

// berth top --batch prints plain frames (no escape codes), one per refresh.
func TestTopBatch(t *testing.T) {
	e := newEnv(t)
	e.write(showcase(e))
	e.start()
	e.waitRunning("orders-sink", "orders-sink-0", "orders-sink-1")
	out, err := exec.Command(berthBin, "top", "--addr", e.addr, "--batch", "-n", "2", "-d", "300ms").CombinedOutput()
	if err != nil {
		t.Fatalf("berth top --batch: %v\n%s", err, out)
	}
	if strings.Contains(string(out), "\x1b") {
		t.Errorf("batch output has escape codes:\n%q", out)
	}
	frames := strings.Split(strings.TrimSpace(string(out)), "\n\nberth top:")
	if len(frames) != 2 {
		t.Fatalf("want 2 frames, got %d:\n%s", len(frames), out)
	}
	_, rows := topTable(frames[1])
	if r, ok := rows["orders-sink-0"]; !ok || r[3] == "-" {
		t.Errorf("second frame has no CPU rate for orders-sink-0:\n%s", frames[1])
	}
	// No agent: exit status 1 and a reason.
	out, err = exec.Command(berthBin, "top", "--addr", testutil.FreePort(t), "--batch", "-n", "1").CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(out), "is the agent running?") {
		t.Errorf("berth top against no agent: %v\n%s", err, out)
	}
}
