package main

import (
	"bytes"
	"testing"
	"time"

	"github.com/berthd/berth/api"
	"github.com/berthd/berth/limits"
	"github.com/berthd/berth/worker"
)

// berth status's tables: "-" where nothing is known, the cgroup's limits
// over the configured ones, byte sizes as limits are written.
func TestStatusTables(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	started := now.Add(-90 * time.Second)
	u := api.GroupUsage{CPUSeconds: 12.34, CPULimitCores: 0.5, MemoryBytes: 32 << 20, MemoryLimitBytes: 64 << 20,
		OOMKills: 2, Pids: 3, PidsLimit: 8, IOReadBytes: 1536, IOWriteBytes: 512}
	var b bytes.Buffer
	printJobs(&b, []api.Job{
		{ID: "a", Kind: "connector", State: worker.Running, PID: 42, StartedAt: &started, Limits: limits.Limits{CPU: 1},
			Usage: &api.Usage{GroupUsage: u}},
		{ID: "a-0", Kind: "task", Group: "g", State: worker.Failed, Limits: limits.Limits{CPU: 1.5}, Reason: "exec: not found"},
	}, false, now)
	printGroups(&b, []api.Group{
		{Name: "g", Jobs: []string{"a-0", "b-0"}, Limits: limits.Limits{CPU: 2}, Usage: &u, Cgroup: "/berth/groups/g"},
		{Name: "h", Jobs: []string{}, Cgroup: "/berth/groups/h"},
	})
	want := `JOB  KIND       GROUP  STATE    PID  UPTIME  RESTARTS  CPU    CPU LIMIT  MEMORY   MEM LIMIT  OOM  LAST EXIT  REASON
a    connector  -      running  42   1m30s   0         12.3s  0.5        32.0MiB  64.0MiB    2    -          -
a-0  task       g      failed   -    -       0         -      1.5        -        -          -    -          exec: not found
GROUP  JOBS     CPU    CPU LIMIT  MEMORY   MEM LIMIT  PIDS  PIDS LIMIT  OOM  IO READ  IO WRITE  CGROUP
g      a-0,b-0  12.3s  0.5        32.0MiB  64.0MiB    3     8           2    1.5KiB   512B      /berth/groups/g
h               -      -          -        -          -     -           -    -        -         /berth/groups/h
`
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}

	// --wide: the run's fencing token, the cgroup and the command.
	b.Reset()
	printJobs(&b, []api.Job{
		{ID: "a", Kind: "connector", State: worker.Running, PID: 42, StartedAt: &started, FencingToken: 4211,
			Cgroup: "/berth/jobs/a", Command: []string{"sleep", "60"}},
		{ID: "b", Kind: "connector", State: worker.Waiting, Cgroup: "/berth/jobs/b", Command: []string{"true"}, Reason: "claim held by m2"},
	}, true, now)
	want = `JOB  KIND       GROUP  STATE    PID  UPTIME  RESTARTS  CPU  CPU LIMIT  MEMORY  MEM LIMIT  OOM  LAST EXIT  TOKEN  CGROUP         COMMAND   REASON
a    connector  -      running  42   1m30s   0         -    -          -       -          -    -          4211   /berth/jobs/a  sleep 60  -
b    connector  -      waiting  -    -       0         -    -          -       -          -    -          -      /berth/jobs/b  true      claim held by m2
`
	if b.String() != want {
		t.Errorf("--wide: got\n%s\nwant\n%s", b.String(), want)
	}
}
