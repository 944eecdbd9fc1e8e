//go:build soak

package soak

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berthd/berth/internal/testutil"
	"github.com/berthd/berth/worker"
	"github.com/vishvananda/netns"
)

// chattyJob prints a ~900-byte line every 10 ms, each starting with the
// time it was printed, and writes that time to heartbeat (outside log_dir):
// a job whose output is blocked stops beating.
func chattyJob(name, heartbeat string) string {
	script := fmt.Sprintf(`while :; do ts=$(/bin/date +%%s%%N); echo "$ts" > %s; printf '%%s %%0880d\n' "$ts" 0; /bin/sleep 0.01; done`, heartbeat)
	return fmt.Sprintf("[[connector]]\nname = %q\n  [connector.run]\n  command = [\"/bin/sh\", \"-c\", %q]\n", name, script)
}

// readNanos reads a file holding one unix-nanosecond time.
func readNanos(file string) time.Time {
	b, err := os.ReadFile(file)
	if err != nil {
		return time.Time{}
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return time.Time{}
	}
	return time.Unix(0, n)
}

// lastLogLine is the time at the start of the last complete line of a
// chatty job's log file.
func lastLogLine(file string) time.Time {
	b, err := os.ReadFile(file)
	if err != nil {
		return time.Time{}
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		f := strings.Fields(lines[i])
		if len(f) == 2 && len(f[1]) == 880 {
			if n, err := strconv.ParseInt(f[0], 10, 64); err == nil {
				return time.Unix(0, n)
			}
		}
	}
	return time.Time{}
}

// TestSoakLogDirFull: log_dir on a 2 MiB tmpfs that the test fills while a
// job writes ~90 KB/s to its log. Right is: the job keeps running, never
// blocked by its output (its heartbeat outside log_dir goes on) and never
// restarted; the agent says once, clearly, that the job's log cannot be
// written and why, and keeps serving its API and metrics; when space
// returns, the job's output reaches its log again and the agent says how
// much was lost.
func TestSoakLogDirFull(t *testing.T) {
	testutil.NeedRoot(t)
	dir := t.TempDir()
	logDir := filepath.Join(dir, "log")
	mountTmpfs(t, logDir, 2<<20)
	tag := randHex(3)
	job, hb := tag+"-chatty", filepath.Join(dir, "heartbeat")
	f := agentFile{id: "full-" + tag, dir: dir, logDir: logDir, listen: freePort(t, "127.0.0.1"), root: "berth-soak-full-" + tag,
		cluster: "soak-full-" + tag, body: fmt.Sprintf("[static]\nconnectors = [%q]\n\n%s", job, chattyJob(job, hb))}
	testutil.TrackCgroupRoot(t, f.root)
	a := startAgent(t, f.write(t), f.listen, filepath.Join(dir, "agent.log"), netns.None())
	jobLog := filepath.Join(logDir, job+".log")
	var pid int
	testutil.Eventually(t, 60*time.Second, "the job running and its log written", func() bool {
		js, err := jobsOf(a.addr)
		if err != nil || js[job].State != worker.Running {
			return false
		}
		pid = js[job].PID
		return !lastLogLine(jobLog).IsZero()
	})

	filler := fill(t, logDir)
	fullAt := time.Now()
	testutil.Eventually(t, 20*time.Second, "the agent saying the job's log cannot be written", func() bool {
		return a.out.count("job log write failed") > 0
	})
	// The job goes on, unblocked, for 3 s with the disk full.
	testutil.Eventually(t, 30*time.Second, "3 s of heartbeats with log_dir full", func() bool {
		return readNanos(hb).After(fullAt.Add(3 * time.Second))
	})
	js, err := jobsOf(a.addr)
	if err != nil || js[job].PID != pid || js[job].State != worker.Running || js[job].Restarts != 0 {
		t.Errorf("with log_dir full the job is %+v (err %v), want still running as pid %d, never restarted", js[job], err, pid)
	}
	var m map[string]any
	if err := get(a.addr, "/v1/agent", &m); err != nil {
		t.Errorf("the API with log_dir full: %v", err)
	}
	errLines := a.out.matching("job log write failed")
	if len(errLines) != 1 || !strings.Contains(errLines[0], "no space left on device") || !strings.Contains(errLines[0], job) {
		t.Errorf("want one clear line naming the job and ENOSPC, got %q", errLines)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	freeAt := time.Now()
	testutil.Eventually(t, 30*time.Second, "the job's output in its log again", func() bool {
		return lastLogLine(jobLog).After(freeAt)
	})
	resumed := time.Since(freeAt)
	again := a.out.matching("job log written again")
	if len(again) != 1 || !strings.Contains(again[0], "bytes_lost=") {
		t.Errorf("want one line saying the log is written again and how much was lost, got %q", again)
	}
	a.signal(syscall.SIGTERM)
	if err := a.waitExit(30 * time.Second); err != nil {
		t.Errorf("stop: %v", err)
	}
	lost := "?"
	if len(again) == 1 {
		_, lost, _ = strings.Cut(again[0], "bytes_lost=")
	}
	writeFigures(t, "log_dir full", [][2]string{
		{"the job while log_dir was full", fmt.Sprintf("same pid, %d restarts, heartbeat through %s after the disk filled", js[job].Restarts, readNanos(hb).Sub(fullAt).Round(time.Millisecond))},
		{"agent log", fmt.Sprintf("%d \"job log write failed\" line naming the job and ENOSPC; %d \"job log written again\" line, bytes_lost=%s", len(errLines), len(again), lost)},
		{"output in the log again after space returned", resumed.Round(time.Millisecond).String()},
	})
}

// TestSoakDataDirFull: data_dir (the embedded etcd's) on a tmpfs. Right is:
//   - full at start (smaller than the store's first WAL segment): the agent
//     exits 1 saying the store cannot be created and why, and leaves no
//     process and no cgroup behind;
//   - space back: it starts and runs its jobs;
//   - full while running, then a reload that stores a large definition:
//     when the store cannot commit it, the agent kills every job (a
//     daemonised grandchild included) and removes its cgroups before it
//     exits 1, saying why: no job runs on unseen once its claims' store is
//     gone;
//   - space back: it starts and runs its jobs again.
func TestSoakDataDirFull(t *testing.T) {
	testutil.NeedRoot(t)
	dir := t.TempDir()
	dataDir := filepath.Join(dir, "data")
	mountTmpfs(t, dataDir, 32<<20)
	tag := randHex(3)
	body := func(big int) (string, []string) {
		b, jobs := killWorkload(tag, 0)
		if big > 0 {
			b += fmt.Sprintf("\n[[connector]]\nname = %q\n  [connector.run]\n  command = [\"/bin/sleep\", \"100000\"]\n  env = { BIG = %q }\n",
				tag+"-big", strings.Repeat("x", big))
		}
		return b, jobs
	}
	b, jobs := body(0)
	f := agentFile{id: "data-" + tag, dir: dir, dataDir: dataDir, listen: freePort(t, "127.0.0.1"), root: "berth-soak-data-" + tag,
		cluster: "soak-data-" + tag, body: b}
	testutil.TrackCgroupRoot(t, f.root)
	cfg := f.write(t)
	logFile := filepath.Join(dir, "agent.log")
	leftBehind := func(when string) {
		t.Helper()
		if ps := tagged("SOAK_TAG", tag); len(ps) > 0 {
			t.Errorf("%s: job processes left running: %v", when, ps)
		}
		if dirs := cgroupTree(f.root); len(dirs) > 0 {
			t.Errorf("%s: cgroup directories left: %v", when, sortedKeys(dirs))
		}
	}
	runs := func(a *agentProc) {
		t.Helper()
		testutil.Eventually(t, 90*time.Second, "every job running", func() bool {
			js, err := jobsOf(a.addr)
			if err != nil || !healthy(a.addr) {
				return false
			}
			for _, id := range jobs {
				if js[id].PID == 0 && !strings.HasSuffix(id, "-crash") {
					return false
				}
			}
			return true
		})
	}
	var figures [][2]string

	// Full at start.
	a := startAgent(t, cfg, f.listen, logFile, netns.None())
	err := a.waitExit(60 * time.Second)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Errorf("data_dir full at start: agent exit %v, want status 1\n%s", err, a.out.tail(20))
	}
	lines := a.out.matching("the embedded etcd cannot go on")
	if len(lines) != 1 || !strings.Contains(lines[0], "no space left on device") {
		t.Errorf("data_dir full at start: want one line saying the store cannot go on and why, got %q\n%s", lines, a.out.tail(20))
	}
	leftBehind("data_dir full at start")
	figures = append(figures, [2]string{"full at start", fmt.Sprintf("exit %v; %q", err, lines)})

	// Space back.
	resizeTmpfs(t, dataDir, 512<<20)
	a = startAgent(t, cfg, f.listen, logFile, netns.None())
	runs(a)

	// Full while running; a reload stores a 512 KiB definition.
	filler := fill(t, dataDir)
	f.body, _ = body(512 << 10)
	f.write(t)
	a.signal(syscall.SIGHUP)
	err = a.waitExit(60 * time.Second)
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Errorf("data_dir full while running: agent exit %v, want status 1\n%s", err, a.out.tail(20))
	}
	lines = a.out.matching("the embedded etcd")
	if len(lines) < 2 || !strings.Contains(strings.Join(lines, "\n"), "no space left on device") {
		t.Errorf("data_dir full while running: want the store's failure and the kill of every job in the log, got %q\n%s", lines, a.out.tail(20))
	}
	leftBehind("data_dir full while running")
	figures = append(figures, [2]string{"full while running, reload stores 512 KiB", fmt.Sprintf("exit %v; %q", err, lines)})

	// Space back again: the file still holds the big definition.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	a = startAgent(t, cfg, f.listen, logFile, netns.None())
	runs(a)
	a.signal(syscall.SIGTERM)
	if err := a.waitExit(30 * time.Second); err != nil {
		t.Errorf("stop: %v", err)
	}
	leftBehind("clean stop")
	writeFigures(t, "data_dir full", figures)
}
