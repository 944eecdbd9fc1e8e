package test

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berthd/berth/api"
	"github.com/berthd/berth/internal/testutil"
)

// prevRelease is the commit of the previous release, the one lane 2
// upgrades from (test/vm/lane2.sh, LANE2_PREV): its guard serves two
// sockets, guard.sock (deadlines in 16-byte packets) and guard-runs.sock
// (the runs).
const prevRelease = "09df814"

// prevBerth builds berth at commit rev of this repository (git archive,
// then go build) into a directory of the test's and returns its path. It
// skips the test where that cannot be done: a prebuilt binary without Go
// (the qemu lanes: lane 2 upgrades from the previous release's package),
// or a clone without that commit.
func prevBerth(t *testing.T, rev string) string {
	t.Helper()
	if os.Getenv("BERTH_TEST_BIN") != "" {
		t.Skip("a prebuilt binary, no Go toolchain to build the previous release (lane 2 upgrades from its package)")
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Skipf("no Go toolchain to build the previous release: %v", err)
	}
	if out, err := exec.Command("git", "-C", "..", "rev-parse", "--verify", "--quiet", rev+"^{commit}").CombinedOutput(); err != nil {
		t.Skipf("the previous release's commit %s is not in this clone: %v %s", rev, err, out)
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	archive := exec.Command("git", "-C", "..", "archive", "--format=tar", rev)
	out, err := archive.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	archive.Stderr = os.Stderr
	if err := archive.Start(); err != nil {
		t.Fatal(err)
	}
	untar(t, tar.NewReader(out), src)
	if err := archive.Wait(); err != nil {
		t.Fatalf("git archive %s: %v", rev, err)
	}
	bin := filepath.Join(dir, "berth-"+rev)
	build := exec.Command("go", "build", "-o", bin, "./cmd/berth")
	build.Dir = src
	build.Env = append(os.Environ(), "GOFLAGS=-buildvcs=false")
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build berth %s: %v\n%s", rev, err, b)
	}
	return bin
}

// untar writes the regular files and directories of r under dir.
func untar(t *testing.T, r *tar.Reader, dir string) {
	t.Helper()
	for {
		h, err := r.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, filepath.FromSlash(h.Name))
		if !strings.HasPrefix(p, dir+string(filepath.Separator)) {
			t.Fatalf("archive entry %q outside %s", h.Name, dir)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(p, 0o755)
		case tar.TypeReg:
			err = writeFrom(p, r, os.FileMode(h.Mode)&0o777)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

func writeFrom(path string, r io.Reader, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// sockets lists the unix sockets in dir.
func sockets(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if e.Type()&os.ModeSocket != 0 {
			out = append(out, e.Name())
		}
	}
	return out
}

// An agent of this build takes the jobs over from an agent of the
// previous release and goes on with its guard, which speaks the previous
// protocols on two sockets and is not replaced while jobs run: by
// `berth upgrade` (the old agent execs this build, installed at its
// path, as the .deb does), and by a start after a crash. The old agent
// and its guard run in a time namespace 10 minutes ahead and the second
// agent of this build does not, so the deadline must reach the old guard
// on its own clock: it does not kill the jobs at once, and kills them at
// the real deadline once that agent is SIGKILLed. Beside another guard
// of the previous release, a clean stop of this build releases it. A
// start after that makes a guard of this release: one socket. This build
// ran on the data_dir first, so its fencing record holds tokens older than
// the previous release's claims: the previous release's runs, which have
// no token, are adopted all the same.
func TestAgentTakesOverFromPreviousRelease(t *testing.T) {
	old := prevBerth(t, prevRelease)
	ns := inTimeNamespace(t)
	e := newEnv(t)
	e.write(e.header("2s") + timensJob)
	data := filepath.Join(e.dir, "data")
	// This build ran on the data_dir before the previous release was
	// installed (as lane 2 does: a package removed, the older one
	// installed): its fencing record holds tokens of the job from before
	// the older agent's claims, which are not the runs' own.
	e.start()
	e.jobProcs()
	if err := e.stop(syscall.SIGTERM); err != nil {
		t.Fatalf("clean stop of this build: %v", err)
	}
	e.bin = filepath.Join(e.dir, "berth")
	copyFile(t, old, e.bin)
	e.wrap = ns
	e.start()
	procs := e.jobProcs()
	guards := e.guardPids()
	if len(guards) != 1 {
		t.Fatalf("processes in the guard's cgroup: %v, want one", guards)
	}
	if s := strings.Join(sockets(t, data), " "); s != "guard-runs.sock guard.sock" {
		t.Fatalf("sockets of the previous release's guard: %s, want guard-runs.sock guard.sock", s)
	}
	var ag0 api.Agent
	getJSON(t, "http://"+e.addr+"/v1/agent", &ag0)

	// This build at the agent's path (as a package upgrade renames its
	// file in), then the hand-over. The program there fails its first
	// "version", as the previous release's own check fails at random
	// (its reaper takes the exit status): that agent refuses in silence,
	// and berth upgrade signals it again.
	failOnce := filepath.Join(e.dir, "version-failed-once")
	script := fmt.Sprintf("#!/bin/sh\nif [ \"$1\" = version ] && mkdir %s 2>/dev/null; then echo 'the first version fails (the test)' >&2; exit 1; fi\nexec %s \"$@\"\n", failOnce, berthBin)
	if err := os.WriteFile(e.bin+".new", []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(e.bin+".new", e.bin); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(berthBin, "upgrade", "--config", e.config).CombinedOutput()
	if err != nil {
		t.Fatalf("berth upgrade from the previous release: %v\n%s\n%s", err, out, e.out)
	}
	if !strings.Contains(string(out), "1 of 1 runs adopted") {
		t.Errorf("berth upgrade printed:\n%s", out)
	}
	if !strings.Contains(string(out), "refused in silence") || !strings.Contains(string(out), "signalling again (2 of 4)") {
		t.Errorf("berth upgrade did not signal again the agent that refused in silence:\n%s", out)
	}
	if !strings.Contains(e.out.String(), "the first version fails (the test)") {
		t.Errorf("the previous release's agent never ran the failing version:\n%s", e.out)
	}
	var ag api.Agent
	getJSON(t, "http://"+e.addr+"/v1/agent", &ag)
	if ag.PID != ag0.PID || !ag.ImageStarted.After(ag0.ImageStarted) {
		t.Errorf("agent pid %d image_started %s after the hand-over, pid %d image_started %s before: no new image", ag.PID, ag.ImageStarted, ag0.PID, ag0.ImageStarted)
	}
	if !strings.Contains(e.out.String(), "lease guard of the previous release connected") {
		t.Errorf("the new image did not take the previous release's guard:\n%s", e.out)
	}
	check := func(when string) {
		t.Helper()
		if again := e.jobProcs(); again[0] != procs[0] || again[1] != procs[1] {
			t.Fatalf("%s: job processes %v, %v before: not adopted", when, again, procs)
		}
		if g := e.guardPids(); len(g) != 1 || g[0] != guards[0] {
			t.Fatalf("%s: guard %v, %v before", when, g, guards)
		}
	}
	check("after the upgrade")

	// A crash, and a start of this build outside the time namespace.
	if err := e.stop(syscall.SIGKILL); err == nil {
		t.Fatal("agent killed by SIGKILL reported success")
	}
	e.wrap = nil
	e.start()
	check("after a crash and a start outside the time namespace")
	// Past a whole session TTL: the old guard holds the deadlines of
	// this agent, on its own clock.
	renewed := time.Now()
	testutil.Eventually(t, 2*timensTTL, "a session TTL of renewals", func() bool { return time.Since(renewed) > timensTTL })
	check("a session TTL later")

	killed := time.Now()
	if err := e.stop(syscall.SIGKILL); err == nil {
		t.Fatal("agent killed by SIGKILL reported success")
	}
	e.checkGuardKilled(procs, guards)
	if d := time.Since(killed); d > testutil.Deadline(timensTTL+5*time.Second) {
		t.Errorf("the previous release's guard killed the job %s after the agent's SIGKILL, more than the session TTL (%s) allows", d, timensTTL)
	}

	// The previous release again, and this build after it crashed: a
	// clean stop releases the old guard (version 1's release), which
	// exits without killing.
	copyFile(t, old, e.bin)
	e.start()
	procs = e.jobProcs()
	guards = e.guardPids()
	if err := e.stop(syscall.SIGKILL); err == nil {
		t.Fatal("agent killed by SIGKILL reported success")
	}
	e.bin = ""
	e.start()
	check("this build after the previous release crashed")
	if err := e.stop(syscall.SIGTERM); err != nil {
		t.Fatalf("clean stop beside the previous release's guard: %v", err)
	}
	testutil.Eventually(t, 20*time.Second, "the previous release's guard exits", func() bool { return !testutil.Alive(guards[0]) })
	if !strings.Contains(e.guardLog(), "released by the agent") {
		t.Errorf("the previous release's guard was not released:\n%s", e.guardLog())
	}

	// No guard runs: this build starts one of its own release.
	e.start()
	if again := e.jobProcs(); again[0] == procs[0] {
		t.Fatalf("the job runs as pid %d after the clean stop", again[0])
	}
	if s := strings.Join(sockets(t, data), " "); s != "guard.sock" {
		t.Errorf("sockets of this release's guard: %s, want guard.sock alone", s)
	}
	if err := e.stop(syscall.SIGTERM); err != nil {
		t.Fatalf("clean stop: %v", err)
	}
}
