//go:build soak

package soak

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/berthd/berth/internal/testutil"
	"github.com/berthd/berth/test/soak/fence"
)

// The heartbeat writer as a berth with tokens and claim files will run
// it, without berth: with a token it writes it; without one it writes
// "-" and goes on; following the rule, it writes while the claim file's
// deadline is more than the margin away and holds back once it is not, or
// once the file is gone.
func TestHeartbeatWriterFollowsTheClaimRule(t *testing.T) {
	dir := t.TempDir()
	h := newHistoryTail(t, filepath.Join(dir, "history"))
	claim := filepath.Join(dir, "claim")
	writeClaim := func(in time.Duration) {
		t.Helper()
		d := boottime() + in
		body := fmt.Sprintf("token=42\ndeadline=%d.%09d\n", d/time.Second, d%time.Second)
		if err := os.WriteFile(claim+".new", []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(claim+".new", claim); err != nil {
			t.Fatal(err)
		}
	}
	writeClaim(time.Minute)
	start := func(job string, env ...string) {
		cmd := exec.Command(selfBin)
		cmd.Env = append(os.Environ(), heartbeatEnv+"="+h.path, "BERTH_JOB_ID="+job, runEnv+"=run-"+job,
			runStartEnv+"=12.34", roleEnv+"=main", variantEnv+"=0", marginEnv+"=500ms")
		cmd.Env = append(cmd.Env, env...)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	}
	start("ruled", fence.TokenEnv+"=42", fence.ClaimFileEnv+"="+claim, ruleEnv+"=1")
	start("bare")

	counts := func(job string) (attempts, held int, last fence.Record) {
		return h.byJob[job][fence.Attempt], h.byJob[job][fence.Held], h.last[job]
	}
	wait := func(what string, cond func() bool) {
		t.Helper()
		if !testutil.Poll(10*time.Second, func() bool { h.refresh(); return cond() }) {
			a, hd, _ := counts("ruled")
			t.Fatalf("%s: not within 10 s (ruled: %d attempts, %d held)", what, a, hd)
		}
	}
	wait("both write", func() bool {
		a, _, _ := counts("ruled")
		b, _, _ := counts("bare")
		return a >= 2 && b >= 2
	})
	if _, _, r := counts("ruled"); r.Token != "42" || r.RunStart != 12340*time.Millisecond || r.Role != "main/0" || !r.Rule {
		t.Errorf("ruled writer's record %+v: want token 42, run start 12.34 s, role main/0, rule", r)
	}
	if _, _, r := counts("bare"); r.Token != fence.NoToken || r.Rule || r.PID == 0 {
		t.Errorf("bare writer's record %+v: want no token, no rule, a pid", r)
	}
	// The deadline comes within the margin: held back.
	writeClaim(200 * time.Millisecond)
	_, heldBefore, _ := counts("ruled")
	wait("held back with the deadline 200 ms away (margin 500 ms)", func() bool {
		_, hd, _ := counts("ruled")
		return hd >= heldBefore+2
	})
	// Far again: it writes; then the file is gone: held back.
	writeClaim(time.Minute)
	a0, _, _ := counts("ruled")
	wait("writes again with the deadline a minute away", func() bool {
		a, _, _ := counts("ruled")
		return a >= a0+2
	})
	if err := os.Remove(claim); err != nil {
		t.Fatal(err)
	}
	_, h0, _ := counts("ruled")
	wait("held back with the claim file gone", func() bool {
		_, hd, _ := counts("ruled")
		return hd >= h0+2
	})
}
