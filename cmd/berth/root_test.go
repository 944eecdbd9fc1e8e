package main

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/berthd/berth/api"
	"github.com/berthd/berth/config"
)

// execute runs berth with args as main does (without printing) and
// returns the exit status run would give and the error.
func execute(t *testing.T, args ...string) (int, error) {
	t.Helper()
	root := newRoot()
	root.SetArgs(args)
	root.SetOut(io.Discard)
	root.SetErr(io.Discard)
	_, err := root.ExecuteC()
	if err == nil {
		return 0, nil
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code, err
	}
	return 1, err
}

// A negative --lines is a bad command line, named, not "print everything".
func TestLogsNegativeLines(t *testing.T) {
	code, err := execute(t, "logs", "-n", "-3", "some-job")
	if code != 2 || err == nil || !strings.Contains(err.Error(), "--lines (-n)") || !strings.Contains(err.Error(), "-3") {
		t.Errorf("berth logs -n -3: exit %d, %v; want exit 2 naming --lines", code, err)
	}
}

// A shell cobra has no script for is a bad command line naming the shells
// there are; without a shell, the help.
func TestCompletionUnknownShell(t *testing.T) {
	code, err := execute(t, "completion", "tcsh")
	if code != 2 || err == nil {
		t.Fatalf("berth completion tcsh: exit %d, %v; want exit 2", code, err)
	}
	for _, want := range []string{`"tcsh"`, "bash", "zsh", "fish"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("berth completion tcsh: %v; want it to name %s", err, want)
		}
	}
	if code, err := execute(t, "completion"); code != 0 {
		t.Errorf("berth completion: exit %d, %v; want its help", code, err)
	}
	if code, err := execute(t, "completion", "bash"); code != 0 {
		t.Errorf("berth completion bash: exit %d, %v", code, err)
	}
}

// Several problems print as a header line with the command and the file,
// then one problem per line; one error of one line keeps the prefix.
func TestPrintErrorProblems(t *testing.T) {
	_, err := config.Parse("t.toml", []byte("[agent]\nidd = 1\nlisten = \"x\"\n"), nil)
	if err == nil {
		t.Fatal("bad file accepted")
	}
	var b bytes.Buffer
	printError(&b, "berth validate", configError(err))
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(lines) != 3 || lines[0] != "berth validate: t.toml: 2 problems" ||
		!strings.HasPrefix(lines[1], "t.toml:2:1: agent.idd: ") || !strings.HasPrefix(lines[2], "t.toml:3:1: agent.listen: ") {
		t.Errorf("printed:\n%s", b.String())
	}
	b.Reset()
	_, err = config.Parse("t.toml", []byte("[agent]\nidd = 1\n"), nil)
	printError(&b, "berth validate", configError(err))
	if !strings.HasPrefix(b.String(), "berth validate: t.toml:2:1: agent.idd: ") || strings.Count(b.String(), "\n") != 1 {
		t.Errorf("printed:\n%s", b.String())
	}
	b.Reset()
	printError(&b, "berth reload", errors.New("refused:\nf.toml:1:1: x: y"))
	if b.String() != "berth reload: refused:\nf.toml:1:1: x: y\n" {
		t.Errorf("printed:\n%s", b.String())
	}
}

// The agent's file and --config are the same file when they resolve to
// one path: relative to each one's working directory, through symbolic
// links; another file, even with the same content, is not.
func TestSameConfigFile(t *testing.T) {
	dir := t.TempDir()
	a := filepath.Join(dir, "a.toml")
	b := filepath.Join(dir, "b.toml")
	for _, p := range []string{a, b} {
		if err := os.WriteFile(p, []byte("[agent]\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	link := filepath.Join(dir, "link.toml")
	if err := os.Symlink(a, link); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	pid := os.Getpid() // its cwd is dir now
	for _, c := range []struct {
		agent, path string
		same        bool
	}{
		{a, a, true},
		{a, link, true},
		{link, a, true},
		{"a.toml", a, true},
		{a, "./sub/../a.toml", true},
		{a, b, false},
		{a, "b.toml", false},
		{"/etc/berth/berth.toml", a, false},
	} {
		if got := sameConfigFile(c.agent, pid, c.path); got != c.same {
			t.Errorf("sameConfigFile(%q, %q) = %v, want %v", c.agent, c.path, got, c.same)
		}
	}
}

// The first request's error says whether the agent could not be reached or
// refused the request, and a 401 says which credentials to set.
func TestReachError(t *testing.T) {
	refused := reachError(&api.Error{Code: 401, Message: "Unauthorized"})
	if !strings.HasPrefix(refused.Error(), "the agent refused the request: HTTP 401") {
		t.Errorf("401: %v", refused)
	}
	down := reachError(errors.New("connect: connection refused"))
	if !strings.HasPrefix(down.Error(), "is the agent running? ") {
		t.Errorf("transport error: %v", down)
	}
}
