package config

import (
	"strings"
	"testing"
	"time"

	"github.com/berthd/berth/spec"
)

func TestJobsAndEnv(t *testing.T) {
	src := `[[connector]]
name = "b"
tasks = 2
[connector.run]
command = ["run", "${BERTH_JOB_ID}", "${BERTH_TASK}", "$${BERTH_TASK}"]
stop_timeout = "2s"
[connector.task]
command = ["task", "${BERTH_CONNECTOR}:${BERTH_TASK}"]
env = { Z = "z", A = "a=b" }
restart = "always"
[[connector]]
name = "a"
tasks = 0
`
	c, err := Parse("j.toml", []byte(src), limitsHost())
	if err != nil {
		t.Fatal(err)
	}
	jobs := c.Jobs()
	var got []string
	for _, j := range jobs {
		got = append(got, j.ID+"="+strings.Join(j.Process.Command, " "))
	}
	want := "b=run b  ${BERTH_TASK}|b-0=task b:0|b-1=task b:1"
	if strings.Join(got, "|") != want {
		t.Errorf("jobs = %q, want %q", strings.Join(got, "|"), want)
	}
	if jobs[0].Process.StopTimeout != 2*time.Second || jobs[1].Process.StopTimeout != 10*time.Second || jobs[1].Process.Restart != spec.RestartAlways {
		t.Errorf("stop timeouts/restart: %v %v %v", jobs[0].Process.StopTimeout, jobs[1].Process.StopTimeout, jobs[1].Process.Restart)
	}
	env := strings.Join(jobs[2].Env("/sys/fs/cgroup/memory/berth/jobs/b-1"), " ")
	if env != "A=a=b BERTH_CGROUP=/sys/fs/cgroup/memory/berth/jobs/b-1 BERTH_CONNECTOR=b BERTH_JOB_ID=b-1 BERTH_TASK=1 Z=z" {
		t.Errorf("env = %s", env)
	}
	if env := strings.Join(jobs[0].Env("cg"), " "); env != "BERTH_CGROUP=cg BERTH_CONNECTOR=b BERTH_JOB_ID=b BERTH_TASK=" {
		t.Errorf("connector env = %s", env)
	}
	// Jobs are copies: changing one does not change the connector.
	jobs[1].Process.Env["A"] = "x"
	jobs[1].Process.Command[0] = "x"
	if c.Connectors[0].Task.Env["A"] != "a=b" || c.Connectors[0].Task.Command[0] != "task" {
		t.Error("Jobs shares maps or slices with the Config")
	}
}

// TestPositionsOfTOMLForms checks the key locator on forms that move keys
// around: dotted keys, quoted keys, multi-line strings holding "key = ",
// arrays of inline tables spanning lines, comments.
func TestPositionsOfTOMLForms(t *testing.T) {
	src := `# comment with pids = 0
[[connector]]
"name" = "c"   # quoted key
tasks = 1
[connector.task]
command = ["sh", "-c", """
limits = { pids = 0 }
""", '''x = 1''']
limits.pids = 0
[[connector]]
name = "d"
tasks = 1
task.command = ["x"]
task.limits = { memory = "1MiB", io = [
  { device = "/dev/null", read_iops = 1 },
  { device = "/", read_iops = 0 },
] }
`
	_, err := Parse("f.toml", []byte(src), limitsHost())
	want := []string{
		"f.toml:9:1: connector[0].task.limits.pids: must be between 1 and 4194304 (the kernel's PID_MAX_LIMIT), not 0",
		"f.toml:15:5: connector[1].task.limits.io[0].device: resolve device /dev/null: not a block device nor a path on a file system",
		"f.toml:16:19: connector[1].task.limits.io[1].read_iops: must be >= 1, not 0",
	}
	if err == nil || err.Error() != strings.Join(want, "\n") {
		t.Errorf("got:\n%v\nwant:\n%s", err, strings.Join(want, "\n"))
	}
}
