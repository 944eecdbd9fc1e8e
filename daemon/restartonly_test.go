package daemon

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/berthd/berth/config"
	"github.com/berthd/berth/spec"
)

// A reload logs every [agent] setting it cannot apply (log_max_size and
// log_max_files among them: a job's log writer lives as long as the agent
// run), and none that it does apply (stop_timeout, log_sink,
// [agent.client]).
func TestWarnRestartOnly(t *testing.T) {
	old := config.Agent{ID: "a", Listen: "127.0.0.1:1", CgroupRoot: "r", DataDir: "/d", LogDir: "/l",
		LogMaxSize: 1 << 20, LogMaxFiles: 3, LogSink: "file", StopTimeout: time.Second, WebConfigFile: "/w"}
	changed := config.Agent{ID: "b", Listen: "127.0.0.1:2", CgroupRoot: "s", DataDir: "/e", LogDir: "/m",
		LogMaxSize: 2 << 20, LogMaxFiles: 4, LogSink: "journal", StopTimeout: 2 * time.Second, WebConfigFile: "/x",
		Client: spec.APIClient{Username: "u", Password: "p"}}
	var buf bytes.Buffer
	ws := warnRestartOnly(slog.New(slog.NewJSONHandler(&buf, nil)), old, changed)
	var keys []string
	for _, raw := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var l struct{ Level, Key, Running, File string }
		if err := json.Unmarshal([]byte(raw), &l); err != nil {
			t.Fatalf("log line %q: %v", raw, err)
		}
		if l.Level != "WARN" {
			t.Errorf("%s logged at %s, want WARN", l.Key, l.Level)
		}
		keys = append(keys, l.Key)
		if l.Key == "agent.log_max_size" && (l.Running != "1048576" || l.File != "2097152") {
			t.Errorf("log_max_size logged running %q file %q, want 1048576 and 2097152", l.Running, l.File)
		}
	}
	want := []string{"agent.id", "agent.listen", "agent.cgroup_root", "agent.data_dir", "agent.log_dir",
		"agent.log_max_size", "agent.log_max_files", "agent.web_config_file"}
	if !slices.Equal(keys, want) {
		t.Errorf("restart-only keys logged %v, want %v", keys, want)
	}
	var warned []string
	for _, w := range ws {
		warned = append(warned, w.Key)
		if !strings.Contains(w.Msg, "takes effect only when the agent restarts") {
			t.Errorf("warning %s says %q", w.Key, w.Msg)
		}
	}
	if !slices.Equal(warned, want) {
		t.Errorf("restart-only keys in the reload's warnings %v, want %v", warned, want)
	}

	buf.Reset()
	if ws := warnRestartOnly(slog.New(slog.NewJSONHandler(&buf, nil)), old, old); buf.Len() != 0 || len(ws) != 0 {
		t.Errorf("an unchanged [agent] table logged:\n%s", &buf)
	}
}
