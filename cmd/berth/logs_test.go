package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/berthd/berth/config"
)

// berth logs needs only the log directory: a configuration file that is
// not TOML at all (mid-edit during an incident) does not stop it. With
// --log-dir the file is not read; without, the command warns and reads the
// default log_dir.
func TestLogsWithoutParsableConfig(t *testing.T) {
	dir := t.TempDir()
	logs := filepath.Join(dir, "logs")
	if err := os.Mkdir(logs, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(logs, "orders-sink-0.log"), []byte("hello\nberth: exited with status 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "berth.toml")
	if err := os.WriteFile(bad, []byte("[agent\nlog_dir = \""+logs+"\"\n= = =\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	run := func(args ...string) (string, string, error) {
		root := newRoot()
		var out, errOut bytes.Buffer
		root.SetArgs(args)
		root.SetOut(&out)
		root.SetErr(&errOut)
		_, err := root.ExecuteC()
		return out.String(), errOut.String(), err
	}

	out, _, err := run("logs", "--config", bad, "--log-dir", logs, "orders-sink-0")
	if err != nil || out != "hello\nberth: exited with status 1\n" {
		t.Errorf("berth logs --log-dir with an unparsable --config: %q, %v; want the log", out, err)
	}

	_, stderr, _ := run("logs", "--config", bad, "orders-sink-0")
	if !strings.Contains(stderr, "warning:") || !strings.Contains(stderr, bad) || !strings.Contains(stderr, config.DefaultLogDir) ||
		!strings.Contains(stderr, "--log-dir") {
		t.Errorf("berth logs with an unparsable --config: stderr %q; want a warning naming the file, the default log_dir %s and --log-dir", stderr, config.DefaultLogDir)
	}
}
