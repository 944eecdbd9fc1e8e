package test

import (
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berthd/berth/internal/testutil"
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

	cmd := berthBin + " top --addr " + e.addr + " --delay 500ms"
	tm.run("new-session", "-d", "-s", "top", "-x", "200", "-y", "40", cmd, ";", "set-option", "-t", "top", "remain-on-exit", "on")

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

	tm.run("send-keys", "-t", "top", "q")
	sent := time.Now()
	// tmux marks the pane dead when its terminal closes, and records the
	// exit status only once it has reaped the process: wait for both.
	testutil.Eventually(t, 10*time.Second, "berth top exits after q", func() bool {
		st := strings.TrimSpace(tm.run("display-message", "-p", "-t", "top", "#{pane_dead}:#{pane_dead_status}#{pane_dead_signal}"))
		return strings.HasPrefix(st, "1:") && st != "1:"
	})
	t.Logf("berth top exited %v after q", time.Since(sent).Round(time.Millisecond))
	if st := strings.TrimSpace(tm.run("display-message", "-p", "-t", "top", "#{pane_dead_status}")); st != "0" {
		t.Errorf("berth top exited with status %q (signal %q) after q, want 0", st,
			strings.TrimSpace(tm.run("display-message", "-p", "-t", "top", "#{pane_dead_signal}")))
	}
	if pane = tm.capture("top"); strings.Contains(pane, "RESTARTS") {
		t.Errorf("the terminal still shows the table after q (alternate screen not left):\n%s", pane)
	}
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
