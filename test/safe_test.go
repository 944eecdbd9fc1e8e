package test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berthd/berth/api"
	"github.com/berthd/berth/internal/testutil"
)

// runBerth runs the real binary with args and returns its combined output
// and exit status.
func runBerth(t *testing.T, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Deadline(2*time.Minute))
	defer cancel()
	out, err := exec.CommandContext(ctx, berthBin, args...).CombinedOutput()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return string(out), 0
	case errors.As(err, &ee):
		return string(out), ee.ExitCode()
	}
	t.Fatalf("berth %v: %v\n%s", args, err, out)
	return "", -1
}

// agentInfo is GET /v1/agent.
func (e *env) agentInfo() api.Agent {
	e.t.Helper()
	var a api.Agent
	if code := getJSON(e.t, "http://"+e.addr+"/v1/agent", &a); code != 200 {
		e.t.Fatalf("GET /v1/agent: %d", code)
	}
	return a
}

// C19: a [static] entry that names no job is a warning with its position
// and the nearest job ID in `berth validate` (an error with --strict), and
// a reload to it names it in its result and in the agent's log.
func TestC19DeclarationsThatNameNoJob(t *testing.T) {
	e := newEnv(t)
	good := e.header("1s") + `
[static]
tasks = ["ingest-0", "ingest-1", "ingest-2"]

[[connector]]
name = "ingest"
tasks = 3
  [connector.task]
  command = ["sleep", "infinity"]
`
	typo := strings.Replace(good, `"ingest-2"]`, `"ingset-2"]`, 1)
	e.write(typo)
	want := e.config + `:10:34: static.tasks[2]: "ingset-2" names no task of a connector in this file (did you mean "ingest-2"?)`
	out, code := runBerth(t, "validate", "--config", e.config)
	if code != 0 || !strings.Contains(out, "warning: "+want) || !strings.Contains(out, "1 warning") {
		t.Fatalf("validate: exit %d, want 0 and the warning %q:\n%s", code, want, out)
	}
	if out, code := runBerth(t, "validate", "--strict", "--config", e.config); code != 2 || !strings.Contains(out, want) {
		t.Fatalf("validate --strict: exit %d, want 2 naming ingset-2:\n%s", code, out)
	}

	e.write(good)
	e.start()
	e.waitRunning("ingest-0", "ingest-1", "ingest-2")
	e.write(typo)
	out, code = runBerth(t, "reload", "--config", e.config)
	if code != 0 || !strings.Contains(out, `static.tasks: ["ingest-0", "ingest-1", "ingest-2"] → ["ingest-0", "ingest-1", "ingset-2"]`) ||
		!strings.Contains(out, `"ingset-2" names no task of a connector in this file or the cluster's store (did you mean "ingest-2"?)`) {
		t.Fatalf("reload: exit %d, want 0 with the change and the warning:\n%s", code, out)
	}
	testutil.Eventually(t, 10*time.Second, "the agent's log names ingset-2", func() bool {
		return strings.Contains(e.out.String(), `static.tasks[2]: \"ingset-2\" names no task`)
	})
	// What the file asked for: ingest-2 is declared by nobody now.
	testutil.Eventually(t, 20*time.Second, "ingest-2 stopped and counted unassigned", func() bool {
		_, running := e.jobs()["ingest-2"]
		v := e.metrics()["berth_jobs_unassigned"]
		return !running && v == 1
	})

	// The file lowers the task count while [static] still names the task
	// it removed: the reload warns at once, although the store still holds
	// the connector's previous version when the warning is made.
	fewer := strings.Replace(good, "tasks = 3", "tasks = 2", 1)
	e.write(fewer)
	out, code = runBerth(t, "reload", "--config", e.config)
	if code != 0 || !strings.Contains(out, `static.tasks[2]: task 2 of connector "ingest" is out of range`) {
		t.Fatalf("reload lowering tasks: exit %d, want 0 with the out-of-range warning:\n%s", code, out)
	}
}

// C20: a user, program or working directory this host does not have is
// caught by `berth validate`; a reload to it is refused and the running
// job keeps running; a definition that reaches the agent through the
// store anyway (berth apply checks limits only: its users and programs
// need exist only where it runs) does not stop the running job either: it
// keeps running its previous definition, and the reason shows in the log,
// in `berth status` and in berth_job_update_blocked.
func TestC20HostFactsCheckedBeforeAJobIsStopped(t *testing.T) {
	e := newEnv(t)
	good := e.header("1s") + `
[static]
connectors = ["web"]

[[connector]]
name = "web"
  [connector.run]
  command = ["sleep", "infinity"]
`
	e.write(good)
	e.start()
	before := e.waitRunning("web")["web"]

	bad := strings.Replace(good, `command = ["sleep", "infinity"]`, `command = ["sleep", "infinity"]`+"\n  user = \"nobdy\"", 1)
	e.write(bad)
	userErr := e.config + `:16:3: connector[0].run.user: "nobdy" does not resolve on this host`
	if out, code := runBerth(t, "validate", "--config", e.config); code != 2 || !strings.Contains(out, userErr) {
		t.Fatalf("validate: exit %d, want 2 with %q:\n%s", code, userErr, out)
	}
	out, code := runBerth(t, "reload", "--config", e.config)
	if code != 1 || !strings.Contains(out, "refused; the agent keeps its previous configuration") || !strings.Contains(out, userErr) {
		t.Fatalf("reload: exit %d, want 1 with the refusal:\n%s", code, out)
	}
	if a := e.agentInfo(); a.Config.LastReload == nil || a.Config.LastReload.Successful || a.Config.Reloads != 1 {
		t.Errorf("/v1/agent after a refused reload: %+v", a.Config)
	}
	if v, ok := e.metrics()["berth_config_last_reload_successful"]; !ok || v != 0 {
		t.Errorf("berth_config_last_reload_successful = %v (%v) after a refused reload, want 0", v, ok)
	}
	if j := e.jobs()["web"]; j.PID != before.PID || j.State != "running" {
		t.Fatalf("a refused reload touched web: %s pid %d, was pid %d", j.State, j.PID, before.PID)
	}

	// The same definition through the store.
	conns := filepath.Join(e.dir, "connectors.toml")
	if err := os.WriteFile(conns, []byte("[[connector]]\nname = \"web\"\n  [connector.run]\n  command = [\"sleep\", \"infinity\"]\n  user = \"nobdy\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, code := runBerth(t, "apply", "--config", e.config, "-f", conns, "--prune=false"); code != 0 || !strings.Contains(out, "updated connector/web") {
		t.Fatalf("apply: exit %d:\n%s", code, out)
	}
	testutil.Eventually(t, 20*time.Second, "web held on its previous definition", func() bool {
		return strings.Contains(e.jobs()["web"].UpdateBlocked, `user: "nobdy" does not resolve on this host`)
	})
	if j := e.jobs()["web"]; j.PID != before.PID || j.State != "running" {
		t.Fatalf("web stopped for a definition that cannot start: %s pid %d, was pid %d", j.State, j.PID, before.PID)
	}
	if v, _ := metric(e.metrics(), "berth_job_update_blocked", `job_id="web"`); v != 1 {
		t.Errorf("berth_job_update_blocked{job_id=web} = %v, want 1", v)
	}
	if !strings.Contains(e.out.String(), "job keeps its previous definition: the new one cannot start on this host") {
		t.Error("the agent's log does not say why web keeps its previous definition")
	}
	out, _ = runBerth(t, "status", "--addr", e.addr)
	row := statusRow(t, out, "web")
	if row[3] != "running" || !strings.Contains(strings.Join(row, " "), "new definition cannot start on this host") {
		t.Errorf("status row of web: %q", row)
	}

	// The file restated: the stored definition is the running one again.
	e.write(good)
	if out, code := runBerth(t, "reload", "--config", e.config); code != 0 {
		t.Fatalf("reload of the good file: exit %d:\n%s", code, out)
	}
	testutil.Eventually(t, 20*time.Second, "web no longer held", func() bool {
		v, _ := metric(e.metrics(), "berth_job_update_blocked", `job_id="web"`)
		return e.jobs()["web"].UpdateBlocked == "" && v == 0
	})
	if j := e.jobs()["web"]; j.PID != before.PID {
		t.Errorf("web restarted although its definition is the running one: pid %d, was %d", j.PID, before.PID)
	}
	if m := e.metrics(); m["berth_config_last_reload_successful"] != 1 || m["berth_config_last_reload_success_timestamp_seconds"] < float64(time.Now().Add(-time.Minute).Unix()) {
		t.Errorf("reload metrics after a good reload: successful %v, timestamp %v", m["berth_config_last_reload_successful"], m["berth_config_last_reload_success_timestamp_seconds"])
	}
	if a := e.agentInfo(); a.Config.SHA256 != fileSum(t, e.config) {
		t.Errorf("/v1/agent config sha256 %s, want the file's %s", a.Config.SHA256, fileSum(t, e.config))
	}

	// No agent: berth reload says so.
	if err := e.stop(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if out, code := runBerth(t, "reload", "--config", e.config); code != 1 || !strings.Contains(out, "no agent runs with this data_dir") {
		t.Errorf("reload without an agent: exit %d:\n%s", code, out)
	}
}

// C21: on one host with the embedded store, a connector removed from the
// agent's own file is deleted from the store by the reload (no longer
// listed, no longer unassigned); one stored by `berth apply` stays.
func TestC21DefinitionsLeaveWithTheirFile(t *testing.T) {
	e := newEnv(t)
	conn := func(name string) string {
		return fmt.Sprintf("\n[[connector]]\nname = %q\n  [connector.run]\n  command = [\"sleep\", \"infinity\"]\n", name)
	}
	both := e.header("1s") + "\n[static]\nconnectors = [\"a\", \"b\", \"c\"]\n" + conn("a") + conn("b")
	e.write(both)
	e.start()
	e.waitRunning("a", "b")
	ops := filepath.Join(e.dir, "connectors.toml")
	if err := os.WriteFile(ops, []byte(conn("c")), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, code := runBerth(t, "apply", "--config", e.config, "-f", ops, "--prune=false"); code != 0 {
		t.Fatalf("apply c: exit %d:\n%s", code, out)
	}
	e.waitRunning("a", "b", "c")

	e.write(strings.Replace(both, conn("b"), "", 1))
	out, code := runBerth(t, "reload", "--config", e.config)
	if code != 0 || !strings.Contains(out, "connector b: defined → (unset)") {
		t.Fatalf("reload without b: exit %d:\n%s", code, out)
	}
	testutil.Eventually(t, 20*time.Second, "b gone from the store, its job stopped, nothing unassigned", func() bool {
		var names []string
		getJSON(t, "http://"+e.addr+"/connectors", &names)
		_, running := e.jobs()["b"]
		v := e.metrics()["berth_jobs_unassigned"]
		return strings.Join(names, ",") == "a,c" && !running && v == 0
	})
	if out, code := runBerth(t, "connectors", "--config", e.config); code != 0 || strings.Contains(out, "\nb ") || !strings.Contains(out, "c") {
		t.Errorf("berth connectors after the reload: exit %d:\n%s", code, out)
	}
	// c (berth apply's) survives another reload of a file without it.
	if out, code := runBerth(t, "reload", "--config", e.config); code != 0 {
		t.Fatalf("second reload: exit %d:\n%s", code, out)
	}
	e.waitRunning("a", "c")
}

// Sharing groups are visible: GET /v1/groups, the berth_group_* series
// and the group rows of `berth status`; the status table has UPTIME,
// CPU LIMIT and REASON columns, and a failed job's STATE stays bare.
func TestGroupsAndStatus(t *testing.T) {
	e := newEnv(t)
	e.write(e.header("1s") + `
[static]

[[group]]
name = "pair"
limits = { cpu = 1, memory = "64MiB", pids = 50 }

[[connector]]
name = "x"
group = "pair"
  [connector.run]
  command = ["sleep", "infinity"]
  limits = { cpu = 0.5 }

[[connector]]
name = "y"
group = "pair"
  [connector.run]
  command = ["sleep", "infinity"]
`)
	e.start()
	e.waitRunning("x", "y")
	var groups []api.Group
	if code := getJSON(t, "http://"+e.addr+"/v1/groups", &groups); code != 200 || len(groups) != 1 {
		t.Fatalf("GET /v1/groups: %d %+v", code, groups)
	}
	g := groups[0]
	if g.Name != "pair" || strings.Join(g.Jobs, ",") != "x,y" || g.Limits.Memory != 64<<20 || g.Usage == nil ||
		g.Usage.MemoryLimitBytes != 64<<20 || g.Usage.PidsLimit != 50 || g.Usage.CPULimitCores != 1 || g.Usage.Pids < 2 ||
		g.Cgroup != "/"+e.root+"/groups/pair" {
		t.Errorf("group: %+v usage %+v", g, g.Usage)
	}
	m := e.metrics()
	for name, want := range map[string]float64{"berth_group_jobs": 2, "berth_group_memory_limit_bytes": 64 << 20,
		"berth_group_pids_limit": 50, "berth_group_cpu_limit_cores": 1} {
		if v, ok := metric(m, name, `group="pair"`); !ok || v != want {
			t.Errorf("%s{group=pair} = %v (%v), want %v", name, v, ok, want)
		}
	}
	for _, name := range []string{"berth_group_cpu_seconds_total", "berth_group_memory_bytes", "berth_group_pids", "berth_group_io_bytes_total", "berth_group_oom_kills_total"} {
		if _, ok := metric(m, name, `group="pair"`); !ok {
			t.Errorf("%s{group=pair} not exported", name)
		}
	}

	// A job that cannot start, through the store (apply checks limits only).
	ops := filepath.Join(e.dir, "connectors.toml")
	if err := os.WriteFile(ops, []byte("[[connector]]\nname = \"broken\"\n  [connector.run]\n  command = [\"/nonexistent/berth-prog\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, code := runBerth(t, "apply", "--config", e.config, "-f", ops, "--prune=false"); code != 0 {
		t.Fatalf("apply: exit %d:\n%s", code, out)
	}
	testutil.Eventually(t, 20*time.Second, "broken failed", func() bool { return e.jobs()["broken"].State == "failed" })
	out, code := runBerth(t, "status", "--config", e.config)
	if code != 0 {
		t.Fatalf("status: exit %d:\n%s", code, out)
	}
	lines := strings.Split(out, "\n")
	for _, col := range []string{"STATE", "UPTIME", "CPU LIMIT", "REASON"} {
		if !strings.Contains(lines[0], col) {
			t.Errorf("status header lacks %s: %q", col, lines[0])
		}
	}
	if row := statusRow(t, out, "broken"); row[3] != "failed" || !strings.Contains(strings.Join(row, " "), "no such file or directory") {
		t.Errorf("status row of broken: %q (STATE must be bare, the reason in REASON)", row)
	}
	if row := statusRow(t, out, "x"); row[3] != "running" || row[8] != "0.5" || !regexp.MustCompile(`^\d+s$`).MatchString(row[5]) {
		t.Errorf("status row of x: %q (want running, uptime in seconds, CPU LIMIT 0.5)", row)
	}
	if !regexp.MustCompile(`(?m)^GROUP\s+JOBS\s+CPU\s+CPU LIMIT\s+MEMORY\s+MEM LIMIT\s+PIDS\s+PIDS LIMIT`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^pair\s+x,y\s+\S+\s+1\s+\S+\s+64\.0MiB\s+\d+\s+50\s`).MatchString(out) {
		t.Errorf("status lacks the group row:\n%s", out)
	}
}

// statusRow returns the blank-separated cells of the status row of job id.
func statusRow(t *testing.T, out, id string) []string {
	t.Helper()
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 3 && f[0] == id {
			return f
		}
	}
	t.Fatalf("no status row for %s:\n%s", id, out)
	return nil
}

// `berth logs CONNECTOR` prints every job of the connector, each line
// prefixed by its job ID; -f -t follows them together with the time each
// line arrived; all of it while the configuration file does not validate.
func TestLogsOfAConnector(t *testing.T) {
	e := newEnv(t)
	e.write(e.header("1s") + `
[static]
connectors = ["talk"]
tasks = ["talk-0", "talk-1"]

[[connector]]
name = "talk"
tasks = 2
  [connector.run]
  command = ["/bin/sh", "-c", "while :; do echo own line; sleep 0.2; done"]
  [connector.task]
  command = ["/bin/sh", "-c", "i=0; while :; do echo line $i of ${BERTH_JOB_ID}; i=$((i+1)); sleep 0.2; done"]
`)
	e.start()
	e.waitRunning("talk", "talk-0", "talk-1")
	// A broken file: only log_dir is needed.
	e.write(e.header("1s") + "\n[agent.bogus]\n")
	testutil.Eventually(t, 10*time.Second, "lines of every job", func() bool {
		out, code := runBerth(t, "logs", "--config", e.config, "talk")
		return code == 0 && strings.Contains(out, "talk   | own line") &&
			strings.Contains(out, "talk-0 | line 0 of talk-0") && strings.Contains(out, "talk-1 | line 0 of talk-1") &&
			strings.Contains(out, "does not validate")
	})
	// -n 1 prints the last line alone. The agent's "berth: started pid"
	// line may follow the job's first line (the job runs as soon as it is
	// forked), so wait for a job line to be the last one.
	lastLine := regexp.MustCompile(`^(?s).*\nline \d+ of talk-1\n$`)
	testutil.Eventually(t, 10*time.Second, "berth logs -n 1 talk-1 printing the job's last line", func() bool {
		out, code := runBerth(t, "logs", "--config", e.config, "-n", "1", "talk-1")
		return code == 0 && lastLine.MatchString(out) && strings.Count(out, "of talk-1") == 1
	})

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := exec.CommandContext(ctx, berthBin, "logs", "--config", e.config, "-f", "-t", "-n", "1", "talk")
	out := &testutil.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stamped := regexp.MustCompile(`(?m)^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\S* (talk-0|talk-1) \| line \d+ of (talk-0|talk-1)$`)
	testutil.Eventually(t, 10*time.Second, "followed lines of both tasks, stamped", func() bool {
		seen := map[string]bool{}
		for _, m := range stamped.FindAllStringSubmatch(out.String(), -1) {
			if m[1] == m[2] {
				seen[m[1]] = true
			}
		}
		return seen["talk-0"] && seen["talk-1"]
	})
	if !regexp.MustCompile(`(?m)^-\s+talk-0 \| `).MatchString(out.String()) {
		t.Errorf("backlog lines are not marked as of unknown time:\n%s", out)
	}
	cancel()
	_ = cmd.Wait()
}

// fileSum is the hex SHA-256 of the file at path.
func fileSum(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
