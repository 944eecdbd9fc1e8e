package host_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/berthd/berth/config"
	"github.com/berthd/berth/host"
	"github.com/berthd/berth/spec"
)

// Validation and a reload check a definition against this host with the
// start's own lookups: config.Parse and Host.CheckJob with Local.

// C20: with host.Local the user, the program (absolute, relative to dir, or on PATH) and
// the working directory are checked against this host when the host has
// those facts, at their keys; LimitsOnly skips them.
func TestProcessFactsOnThisHost(t *testing.T) {
	dir := t.TempDir()
	prog := filepath.Join(dir, "prog")
	if err := os.WriteFile(prog, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	plain := filepath.Join(dir, "plain")
	if err := os.WriteFile(plain, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	file := func(run string) string {
		// agent.id: a lane-1 guest has no host name to default to.
		return "[agent]\nid = \"t\"\n[[connector]]\nname = \"c\"\n  [connector.run]\n" + run
	}
	for _, tc := range []struct {
		name, run string
		want      []string // substrings of the problems, in order; nil: valid
	}{
		{"all there", `command = ["sleep", "1"]` + "\nuser = \"nobody\"\ndir = \"/tmp\"\n", nil},
		{"absolute program", "command = [" + quote(prog) + "]\n", nil},
		{"relative program in dir", "command = [\"./prog\"]\ndir = " + quote(dir) + "\n", nil},
		{"program on the job's PATH", "command = [\"prog\"]\nenv = { PATH = " + quote(dir) + " }\n", nil},
		{"unknown user", "command = [\"sleep\"]\nuser = \"nobdy\"\n",
			[]string{`w.toml:7:1: connector[0].run.user: "nobdy" does not resolve on this host: look up user "nobdy"`}},
		{"unknown group", "command = [\"sleep\"]\nuser = \"nobody:nogroupzz\"\n",
			[]string{`connector[0].run.user: "nobody:nogroupzz" does not resolve on this host: look up group "nogroupzz"`}},
		{"missing program", "command = [\"sleeep\", \"1\"]\n",
			[]string{`w.toml:6:12: connector[0].run.command[0]: program not found on this host: "sleeep" is not an executable file in any directory of PATH=`}},
		{"program not on the job's PATH", "command = [\"sleep\"]\nenv = { PATH = " + quote(dir) + " }\n",
			[]string{`connector[0].run.command[0]: program not found on this host: "sleep" is not an executable file in any directory of PATH=` + dir}},
		{"absolute program missing", "command = [\"/nonexistent/berth-prog\"]\n",
			[]string{`connector[0].run.command[0]: program not found on this host: stat /nonexistent/berth-prog: no such file or directory`}},
		{"not executable", "command = [" + quote(plain) + "]\n",
			[]string{`connector[0].run.command[0]: program not found on this host: ` + plain + ` is not executable`}},
		{"missing dir", "command = [\"sleep\"]\ndir = \"/nonexistent/berth-dir\"\n",
			[]string{`connector[0].run.dir: working directory on this host: stat /nonexistent/berth-dir: no such file or directory`}},
		{"dir is a file", "command = [\"sleep\"]\ndir = " + quote(prog) + "\n",
			[]string{`connector[0].run.dir: working directory on this host: ` + prog + ` is not a directory`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := config.Parse("w.toml", []byte(file(tc.run)), host.Local())
			if tc.want == nil {
				if err != nil {
					t.Fatalf("Parse: %v", err)
				}
				return
			}
			var ps *config.Problems
			if !errors.As(err, &ps) || len(ps.List) != len(tc.want) {
				t.Fatalf("Parse error:\n%v\nwant %d problems", err, len(tc.want))
			}
			for i, w := range tc.want {
				if !strings.Contains(ps.List[i].Error(), w) {
					t.Errorf("problem %d:\n%s\nwant it to contain:\n%s", i, ps.List[i], w)
				}
			}
			if d := ps.List[0].Def; d.Kind != spec.DefConnector || d.Name != "c" {
				t.Errorf("problem Def = %+v, want connector c", d)
			}
			// Without the process facts (a definition for the whole
			// cluster) the same file validates.
			if _, err := config.Parse("w.toml", []byte(file(tc.run)), host.Local().LimitsOnly()); err != nil {
				t.Errorf("LimitsOnly: %v", err)
			}
		})
	}
}

// CheckJob (with Local) checks an expanded job as the agent does before it stops a
// running job for a new definition.
func TestCheckJob(t *testing.T) {
	h := host.Local()
	ok := spec.Job{ID: "a", Process: spec.Process{Command: []string{"sleep", "1"}}}
	if err := h.CheckJob(ok); err != nil {
		t.Errorf("CheckJob(sleep) = %v", err)
	}
	bad := spec.Job{ID: "a", Process: spec.Process{Command: []string{"sleeep"}, User: "nobdy", Dir: "/nonexistent/berth-dir"}}
	err := h.CheckJob(bad)
	if err == nil {
		t.Fatal("CheckJob of a job that cannot start = nil")
	}
	for _, want := range []string{"command[0]: program not found", `working_directory: working directory on this host`, `user: "nobdy" does not resolve`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("CheckJob = %v\nwant it to contain %q", err, want)
		}
	}
	if err := h.LimitsOnly().CheckJob(bad); err != nil {
		t.Errorf("LimitsOnly().CheckJob = %v", err)
	}
	var none *host.Host
	if err := none.CheckJob(bad); err != nil || none.LimitsOnly() != nil {
		t.Errorf("nil host: CheckJob = %v", err)
	}
}

func quote(s string) string { return `"` + s + `"` }
