package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/berthd/berth/host"
	"github.com/berthd/berth/internal/testutil"
	"github.com/berthd/berth/limits"
	"github.com/berthd/berth/spec"
)

// fullExample is the file shape of the brief, verbatim.
const fullExample = `[agent]
id = "host-a"                 # default: os.Hostname()
data_dir = "/var/lib/berth"   # default /var/lib/berth
log_dir = "/var/log/berth"    # per-job logs <log_dir>/<job_id>.log ; default /var/log/berth
log_max_size = "10MiB"        # rotate a job log at this size (default 10MiB); log_max_files = 5 (default)
log_sink = "file"             # file | journal (default file)
listen = "127.0.0.1:9750"     # default 127.0.0.1:9750
cgroup_root = "berth"         # default "berth"; "" = the cgroup systemd delegated to the agent
stop_timeout = "10s"          # Go duration, default 10s

[static]
connectors = ["orders-sink"]
tasks = ["orders-sink-0", "orders-sink-1", "clicks-0"]

[cluster]                     # parsed and validated now, used later
name = "prod"                 # default "berth"
endpoints = ["https://etcd-1.example:2379"]   # empty: embedded etcd
session_ttl = "10s"           # default 10s, >= 2s
rebalance_delay = "0s"        # default 0s
protocol = "static"           # static | balanced (default static)
tls = { ca = "/etc/berth/etcd-ca.pem", cert = "/etc/berth/etcd.pem", key = "/etc/berth/etcd-key.pem" }

[[group]]                     # optional sharing group; limits cap the group's sum
name = "sinks"
limits = { cpu = 2, memory = "1GiB" }

[[connector]]
name = "orders-sink"
tasks = 2                     # jobs orders-sink-0 and orders-sink-1 (0 allowed)
group = "sinks"               # optional; must name a [[group]]
  [connector.run]             # the connector's own job (job ID = connector name); optional
  command = ["/bin/sh", "-c", "exec sleep infinity"]
  limits = { cpu = 0.1, memory = "32MiB" }
  [connector.task]            # each task; required when tasks > 0
  command = ["/opt/sink/bin/sink", "--task=${BERTH_TASK}"]
  env = { SINK_URL = "http://127.0.0.1:8080" }
  user = "nobody"             # optional; "user" or "user:group" (names or numeric ids)
  working_directory = "/"     # optional working directory
  restart = "on-failure"      # always | on-failure | never (default on-failure)
  stop_timeout = "10s"        # optional, overrides [agent]
  [connector.task.limits]
  cpu = 1.5                   # cores (float); cpu_period = "100ms" optional (1ms..1s)
  cpu_weight = 100            # 1..10000 (cgroup v2 cpu.weight)
  cpuset = "0-1"              # cpus list syntax "0-3,6"; each CPU must exist on the host
  memory = "512MiB"           # hard limit
  memory_high = "448MiB"      # v2 only; must be <= memory
  memory_swap = "0"           # swap allowed in addition to memory; default 0 (swap off)
  pids = 128
  io_weight = 100             # 1..10000
  io = [{ device = "/dev/vda", read_bps = "50MiB", write_bps = "20MiB", read_iops = 1000, write_iops = 500 }]
`

func TestParseFullExample(t *testing.T) {
	testutil.RootDisk(t)
	if runtime.NumCPU() < 2 {
		t.Skip("skip: the example needs 2 CPUs (cpu = 2, cpuset = \"0-1\")")
	}
	c, err := Parse("berth.toml", []byte(fullExample), limitsHost())
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if c.Agent.ID != "host-a" || c.Agent.LogMaxSize != 10<<20 || c.Agent.StopTimeout != 10*time.Second {
		t.Errorf("agent = %+v", c.Agent)
	}
	if c.Cluster.Name != "prod" || c.Cluster.TLS.Key != "/etc/berth/etcd-key.pem" || c.Cluster.Protocol != spec.ProtocolStatic {
		t.Errorf("cluster = %+v", c.Cluster)
	}
	if len(c.Groups) != 1 || c.Groups[0].Limits.CPU != 2 || c.Groups[0].Limits.Memory != 1<<30 {
		t.Errorf("groups = %+v", c.Groups)
	}
	if d := c.Connectors[0].Task.Dir; d != "/" {
		t.Errorf("task working_directory = %q, want /", d)
	}
	l := c.Connectors[0].Task.Limits
	want := limits.Limits{CPU: 1.5, CPUWeight: 100, Cpuset: "0-1", Memory: 512 << 20, MemoryHigh: 448 << 20, Pids: 128, IOWeight: 100,
		IO: []limits.IOLimit{{Device: "/dev/vda", ReadBPS: 50 << 20, WriteBPS: 20 << 20, ReadIOPS: 1000, WriteIOPS: 500}}}
	if fmt.Sprint(l) != fmt.Sprint(want) {
		t.Errorf("task limits = %+v\nwant %+v", l, want)
	}
	jobs := c.Jobs()
	var ids []string
	for _, j := range jobs {
		ids = append(ids, fmt.Sprintf("%s/%s/%d/%s", j.ID, j.Kind, j.Task, j.Group))
	}
	if got := strings.Join(ids, " "); got != "orders-sink/connector/-1/sinks orders-sink-0/task/0/sinks orders-sink-1/task/1/sinks" {
		t.Errorf("jobs = %s", got)
	}
	if got := strings.Join(jobs[2].Process.Command, " "); got != "/opt/sink/bin/sink --task=1" {
		t.Errorf("task 1 command = %q", got)
	}
	if jobs[0].Process.Restart != spec.RestartOnFailure || jobs[0].Process.StopTimeout != 10*time.Second {
		t.Errorf("connector job defaults: %+v", jobs[0].Process)
	}
}

func TestDefaults(t *testing.T) {
	c, err := Parse("min.toml", nil, limitsHost())
	if err != nil {
		t.Fatalf("Parse(empty, limitsHost()): %v", err)
	}
	host, _ := os.Hostname()
	a := c.Agent
	if a.ID != host || a.DataDir != "/var/lib/berth" || a.LogDir != "/var/log/berth" || a.LogMaxSize != 10<<20 ||
		a.LogMaxFiles != 5 || a.LogSink != "file" || a.Listen != "127.0.0.1:9750" || a.CgroupRoot != "berth" ||
		a.StopTimeout != 10*time.Second {
		t.Errorf("agent defaults = %+v", a)
	}
	cl := c.Cluster
	if cl.Name != "berth" || len(cl.Endpoints) != 0 || cl.SessionTTL != 10*time.Second || cl.RebalanceDelay != 0 || cl.Protocol != spec.ProtocolStatic {
		t.Errorf("cluster defaults = %+v", cl)
	}
	c, err = Parse("d.toml", []byte("[agent]\ncgroup_root = \"\"\nstop_timeout = \"3s\"\n[[connector]]\nname = \"c\"\ntasks = 1\n[connector.task]\ncommand = [\"x\"]\n"), limitsHost())
	if err != nil {
		t.Fatal(err)
	}
	if c.Agent.CgroupRoot != "" {
		t.Errorf("cgroup_root = %q, want \"\"", c.Agent.CgroupRoot)
	}
	j := c.Jobs()
	if len(j) != 1 || j[0].Process.Restart != spec.RestartOnFailure || j[0].Process.StopTimeout != 3*time.Second || j[0].Process.Limits.CPU != 0 {
		t.Errorf("jobs = %+v", j)
	}
}

// conn wraps a [connector.task] body into a valid file; the body starts on
// line 5.
func conn(body string) string {
	return "[[connector]]\nname = \"c\"\ntasks = 1\n[connector.task]\n" + body
}

func TestValidationErrors(t *testing.T) {
	ncpu := LocalHost().NumCPU()
	cases := []struct {
		name, toml string
		want       string // exact "FILE:LINE:COL: key: message"; or a prefix ending in ": " + "…" + message part
	}{
		{"syntax error keeps the parser's position", "[agent]\nid = \n", "t.toml:2:6: agent.id: expected value but found '\\n' instead"},
		{"unknown key", "[agent]\nidd = \"x\"\n", "t.toml:2:1: agent.idd: unknown key \"idd\" (did you mean \"id\"?)"},
		{"unknown top-level table", "[agnt]\nid = \"x\"\n", "t.toml:1:1: agnt: unknown key \"agnt\" (did you mean \"agent\"?)"},
		{"unknown key in task", conn("command = [\"x\"]\nrestrat = \"never\"\n"), "t.toml:6:1: connector[0].task.restrat: unknown key \"restrat\" (did you mean \"restart\"?)"},
		{"unknown key in inline table", conn("command = [\"x\"]\nlimits = { cpu = 1, mem = \"1MiB\" }\n"), "t.toml:6:21: connector[0].task.limits.mem: unknown key \"mem\"; allowed in connector[0].task.limits: "},
		{"wrong type", "[agent]\nlisten = 9750\n", "t.toml:2:1: agent.listen: must be a string, not integer"},
		{"wrong type table", "agent = 5\n", "t.toml:1:1: agent: must be a table, not integer"},
		{"wrong type duration", "[agent]\nstop_timeout = 10\n", "t.toml:2:1: agent.stop_timeout: must be a duration string like \"10s\", not integer"},
		{"bad duration", "[agent]\nstop_timeout = \"10\"\n", "t.toml:2:1: agent.stop_timeout: invalid duration \"10\" (Go duration syntax, e.g. \"1m30s\", \"500ms\")"},
		{"bad unit", conn("command = [\"x\"]\n[connector.task.limits]\nmemory = \"512mb\"\n"), "t.toml:7:1: connector[0].task.limits.memory: byte size \"512mb\" has an unknown unit \"mb\""},
		{"negative size", conn("command = [\"x\"]\n[connector.task.limits]\nmemory = -5\n"), "t.toml:7:1: connector[0].task.limits.memory: byte size -5 is negative"},
		{"size as float", conn("command = [\"x\"]\n[connector.task.limits]\nmemory = 1.5\n"), "t.toml:7:1: connector[0].task.limits.memory: must be a byte size"},
		{"duplicate connector", "[[connector]]\nname = \"a\"\n[[connector]]\nname = \"a\"\n", "t.toml:4:1: connector[1].name: connector \"a\" is already defined by connector[0]"},
		{"duplicate group", "[[group]]\nname = \"g\"\n[[group]]\nname = \"g\"\n", "t.toml:4:1: group[1].name: group \"g\" is already defined by group[0]"},
		{"job ID clash", "[[connector]]\nname = \"a-0\"\n[[connector]]\nname = \"a\"\ntasks = 1\n[connector.task]\ncommand = [\"x\"]\n",
			"t.toml:5:1: connector[1].tasks: task 0 has job ID \"a-0\", which connector \"a-0\" already uses"},
		{"unknown group", "[[connector]]\nname = \"a\"\ngroup = \"nope\"\n", "t.toml:3:1: connector[0].group: group \"nope\" is not defined by any [[group]]"},
		{"cpu above host", conn(fmt.Sprintf("command = [\"x\"]\nlimits = { cpu = %d }\n", ncpu+1)),
			fmt.Sprintf("t.toml:6:12: connector[0].task.limits.cpu: %d cores is more than the %d CPUs of this host", ncpu+1, ncpu)},
		{"cpu zero", conn("command = [\"x\"]\nlimits = { cpu = 0 }\n"), "t.toml:6:12: connector[0].task.limits.cpu: must be > 0 cores, not 0"},
		{"cpu negative", conn("command = [\"x\"]\nlimits = { cpu = -0.5 }\n"), "t.toml:6:12: connector[0].task.limits.cpu: must be > 0 cores, not -0.5"},
		{"cpu quota below 1ms", conn("command = [\"x\"]\nlimits = { cpu = 0.005 }\n"), "t.toml:6:12: connector[0].task.limits.cpu: 0.005 cores gives a quota of 500 µs per 100ms period, below the kernel's minimum of 1000 µs (Documentation/scheduler/sched-bwc.rst)"},
		{"cpu_period out of range", conn("command = [\"x\"]\nlimits = { cpu = 1, cpu_period = \"2s\" }\n"), "t.toml:6:21: connector[0].task.limits.cpu_period: must be between 1ms and 1s (Documentation/scheduler/sched-bwc.rst), not 2s"},
		{"cpu_weight out of range", conn("command = [\"x\"]\nlimits = { cpu_weight = 0 }\n"), "t.toml:6:12: connector[0].task.limits.cpu_weight: must be between 1 and 10000 (cgroup v2 weight), not 0"},
		{"io_weight out of range", conn("command = [\"x\"]\nlimits = { io_weight = 10001 }\n"), "t.toml:6:12: connector[0].task.limits.io_weight: must be between 1 and 10000 (cgroup v2 weight), not 10001"},
		{"memory below 1MiB", conn("command = [\"x\"]\nlimits = { memory = \"1023KiB\" }\n"), "t.toml:6:12: connector[0].task.limits.memory: 1047552 bytes is below the minimum of 1MiB"},
		{"memory_high above memory", conn("command = [\"x\"]\nlimits = { memory = \"64MiB\", memory_high = \"65MiB\" }\n"), "t.toml:6:30: connector[0].task.limits.memory_high: 68157440 bytes is above memory (67108864 bytes)"},
		{"memory_low zero", conn("command = [\"x\"]\nlimits = { memory_low = 0 }\n"), "t.toml:6:12: connector[0].task.limits.memory_low: must be > 0 bytes"},
		{"memory_low above memory", conn("command = [\"x\"]\nlimits = { memory = \"64MiB\", memory_low = \"65MiB\" }\n"), "t.toml:6:30: connector[0].task.limits.memory_low: 68157440 bytes is above memory (67108864 bytes)"},
		{"memory_low above memory_high", conn("command = [\"x\"]\nlimits = { memory_high = \"32MiB\", memory_low = \"33MiB\" }\n"), "t.toml:6:35: connector[0].task.limits.memory_low: 34603008 bytes is above memory_high (33554432 bytes)"},
		{"memory_low of a group", "[[group]]\nname = \"g\"\nlimits = { memory = \"64MiB\", memory_low = \"1GiB\" }\n", "t.toml:3:30: group[0].limits.memory_low: 1073741824 bytes is above memory (67108864 bytes)"},
		{"memory_low not a size", conn("command = [\"x\"]\n[connector.task.limits]\nmemory_low = \"lots\"\n"), "t.toml:7:1: connector[0].task.limits.memory_low: byte size \"lots\" must start with a digit"},
		{"pids above the kernel's maximum", conn("command = [\"x\"]\nlimits = { pids = 5000000 }\n"), "t.toml:6:12: connector[0].task.limits.pids: must be between 1 and 4194304 (the kernel's PID_MAX_LIMIT), not 5000000"},
		{"pids zero", conn("command = [\"x\"]\nlimits = { pids = 0 }\n"), "t.toml:6:12: connector[0].task.limits.pids: must be between 1 and 4194304 (the kernel's PID_MAX_LIMIT), not 0"},
		{"empty command", conn("command = []\n"), "t.toml:5:1: connector[0].task.command: must not be empty"},
		{"empty program", conn("command = [\"\", \"x\"]\n"), "t.toml:5:12: connector[0].task.command[0]: program must not be an empty string"},
		{"command as string", conn("command = \"x\"\n"), "t.toml:5:1: connector[0].task.command: must be an array of strings (argv), not a string: write each argument as its own string: [\"x\"]"},
		{"command line as string", conn("command = \"dd if=x of=y\"\n"), "t.toml:5:1: connector[0].task.command: must be an array of strings (argv), not a string: write each argument as its own string: [\"dd\", \"if=x\", \"of=y\"]"},
		{"shell line as string", conn("command = \"sleep 1 && echo done\"\n"), "t.toml:5:1: connector[0].task.command: must be an array of strings (argv), not a string: it needs a shell: write [\"/bin/sh\", \"-c\", \"sleep 1 && echo done\"]"},
		{"missing command", conn("user = \"nobody\"\n"), "t.toml:4:1: connector[0].task: command is required"},
		{"missing task table", "[[connector]]\nname = \"c\"\ntasks = 2\n", "t.toml:1:1: connector[0]: [connector.task] is required when tasks > 0"},
		{"bad restart", conn("command = [\"x\"]\nrestart = \"sometimes\"\n"), "t.toml:6:1: connector[0].task.restart: \"sometimes\" is not a restart policy (allowed: always, on-failure, never)"},
		{"bad cpuset syntax", conn("command = [\"x\"]\nlimits = { cpuset = \"1-0\" }\n"), "t.toml:6:12: connector[0].task.limits.cpuset: CPU list \"1-0\": range \"1-0\" ends before it starts"},
		{"cpuset CPU not on host", conn("command = [\"x\"]\nlimits = { cpuset = \"4000\" }\n"), "t.toml:6:12: connector[0].task.limits.cpuset: CPU 4000 of \"4000\" is not online on this host"},
		{"device does not exist", conn("command = [\"x\"]\nlimits = { io = [{ device = \"/dev/nope-berth\", read_iops = 1 }] }\n"),
			"t.toml:6:20: connector[0].task.limits.io[0].device: resolve device /dev/nope-berth: no such file or directory"},
		{"device is a character device", conn("command = [\"x\"]\nlimits = { io = [{ device = \"/dev/null\", read_iops = 1 }] }\n"),
			"t.toml:6:20: connector[0].task.limits.io[0].device: resolve device /dev/null: not a block device nor a path on a file system"},
		{"device on a file system without a disk", conn("command = [\"x\"]\nlimits = { io = [{ device = \"/proc/self\", read_iops = 1 }] }\n"),
			"t.toml:6:20: connector[0].task.limits.io[0].device: resolve device /proc/self: its file system (device"},
		{"bad connector name", "[[connector]]\nname = \"-a\"\n", "t.toml:2:1: connector[0].name: connector name \"-a\" is not a valid name (allowed: [A-Za-z0-9][A-Za-z0-9._-]*, at most 128 bytes)"},
		{"name with slash", "[[group]]\nname = \"a/b\"\n", "t.toml:2:1: group[0].name: group name \"a/b\" is not a valid name"},
		{"connector named like a kernel file (C15)", "[[connector]]\nname = \"tasks\"\n", "t.toml:2:1: connector[0].name: connector name \"tasks\" is the name of a file the kernel puts in every cgroup"},
		{"group named with a controller prefix (C15)", "[[group]]\nname = \"memory.max\"\n", "t.toml:2:1: group[0].name: group name \"memory.max\" starts with \"memory.\", the prefix of the kernel's memory interface files"},
		{"relative working directory", "[[connector]]\nname = \"a\"\n[connector.run]\ncommand = [\"x\"]\nworking_directory = \"tmp\"\n", "t.toml:5:1: connector[0].run.working_directory: must be an absolute path, not \"tmp\""},
		{"working directory by both names", "[[connector]]\nname = \"a\"\n[connector.run]\ncommand = [\"x\"]\nworking_directory = \"/tmp\"\ndir = \"/\"\n", "t.toml:6:1: connector[0].run.dir: is the older name of working_directory: set only working_directory"},
		{"name too long", "[[group]]\nname = \"" + strings.Repeat("g", 129) + "\"\n", "t.toml:2:1: group[0].name: group name \"" + strings.Repeat("g", 129) + "\" is longer than 128 bytes"},
		{"unknown reference", conn("command = [\"x\", \"${HOME}\"]\n"), "t.toml:5:17: connector[0].task.command[1]: unknown reference ${HOME} in \"${HOME}\""},
		{"unterminated reference", conn("command = [\"x\", \"${BERTH_TASK\"]\n"), "t.toml:5:17: connector[0].task.command[1]: unterminated \"${\""},
		{"reserved env", conn("command = [\"x\"]\nenv = { BERTH_TASK = \"9\" }\n"), "t.toml:6:9: connector[0].task.env.BERTH_TASK: is set by berth for every job and cannot be overridden"},
		{"session_ttl below 2s", "[cluster]\nsession_ttl = \"1s\"\n", "t.toml:2:1: cluster.session_ttl: must be at least 2s, not 1s"},
		{"bad protocol", "[cluster]\nprotocol = \"eager\"\n", "t.toml:2:1: cluster.protocol: \"eager\" is not a protocol (allowed: static, balanced)"},
		{"bad log sink", "[agent]\nlog_sink = \"syslog\"\n", "t.toml:2:1: agent.log_sink: \"syslog\" is not a log sink (allowed: file, journal)"},
		{"listen port above 65535", "[agent]\nlisten = \"127.0.0.1:99999\"\n", "t.toml:2:1: agent.listen: \"127.0.0.1:99999\" is not host:port: port \"99999\" must be a number from 0 to 65535"},
		{"listen port not a number", "[agent]\nlisten = \"127.0.0.1:http\"\n", "t.toml:2:1: agent.listen: \"127.0.0.1:http\" is not host:port: port \"http\" must be a number from 0 to 65535"},
		{"listen without port", "[agent]\nlisten = \"127.0.0.1\"\n", "t.toml:2:1: agent.listen: \"127.0.0.1\" is not host:port: missing port in address"},
		{"advertise unspecified", "[agent]\nadvertise = \"0.0.0.0:9750\"\n", "t.toml:2:1: agent.advertise: \"0.0.0.0:9750\": 0.0.0.0 is no address another host can reach: give this host's address or name"},
		{"advertise without host", "[agent]\nadvertise = \":9750\"\n", "t.toml:2:1: agent.advertise: \":9750\": no host: give the address or name other members reach this agent at"},
		{"advertise port 0", "[agent]\nadvertise = \"10.0.0.7:0\"\n", "t.toml:2:1: agent.advertise: \"10.0.0.7:0\": port 0: give the port the agent listens on"},
		{"advertise not host:port", "[agent]\nadvertise = \"http://10.0.0.7:9750\"\n", "t.toml:2:1: agent.advertise: \"http://10.0.0.7:9750\": not host:port: too many colons in address"},
		{"listen host not a name", "[agent]\nlisten = \"a b:80\"\n", "t.toml:2:1: agent.listen: \"a b:80\" is not host:port: host \"a b\" is not an IP address or a host name"},
		{"unknown key without a close one lists the table's keys", "[agent]\ncolour = \"red\"\n", "t.toml:2:1: agent.colour: unknown key \"colour\"; allowed in agent: id, data_dir, log_dir,"},
		{"misspelt key in an inline table", "[[connector]]\nname = \"a\"\n[connector.run]\ncommand = [\"x\"]\nlimits = { cpu = 1, memroy = \"1MiB\" }\n", "t.toml:5:21: connector[0].run.limits.memroy: unknown key \"memroy\" (did you mean \"memory\"?)"},
		{"group limits checked too", "[[group]]\nname = \"g\"\nlimits = { memory = \"1k\" }\n", "t.toml:3:12: group[0].limits.memory: byte size \"1k\" has an unknown unit \"k\""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse("t.toml", []byte(c.toml), limitsHost())
			var errs *Problems
			if !errors.As(err, &errs) {
				t.Fatalf("Parse error = %v (%T), want *Problems", err, err)
			}
			for _, e := range errs.List {
				if strings.HasPrefix(e.Error(), c.want) {
					return
				}
			}
			t.Errorf("errors:\n%v\nwant one starting with:\n%s", err, c.want)
		})
	}
}

func TestAllErrorsReported(t *testing.T) {
	src := `[agent]
idd = 1
listen = "nope"
[[group]]
name = "g"
[[group]]
name = "g"
[[connector]]
name = "a"
tasks = 2
[connector.task]
command = ["x"]
[[connector]]
name = "a-0"
group = "missing"
  [connector.task]
  command = ["y"]
  [connector.task.limits]
  memory = "1.5.2MiB"
  pids = 0
  io = [{ device = "/dev/null", read_iops = 1 }, { device = "/", read_bps = "-1" }]
`
	_, err := Parse("many.toml", []byte(src), limitsHost())
	want := []string{
		"many.toml:2:1: agent.idd: unknown key \"idd\" (did you mean \"id\"?)",
		"many.toml:3:1: agent.listen: \"nope\" is not host:port: missing port in address",
		"many.toml:7:1: group[1].name: group \"g\" is already defined by group[0]",
		"many.toml:10:1: connector[0].tasks: task 0 has job ID \"a-0\", which connector \"a-0\" already uses",
		"many.toml:15:1: connector[1].group: group \"missing\" is not defined by any [[group]]",
		"many.toml:19:3: connector[1].task.limits.memory: byte size \"1.5.2MiB\" has more than one decimal point",
		"many.toml:20:3: connector[1].task.limits.pids: must be between 1 and 4194304 (the kernel's PID_MAX_LIMIT), not 0",
		"many.toml:21:11: connector[1].task.limits.io[0].device: resolve device /dev/null: not a block device nor a path on a file system",
		"many.toml:21:66: connector[1].task.limits.io[1].read_bps: byte size \"-1\" must start with a digit",
	}
	if err == nil || err.Error() != strings.Join(want, "\n") {
		t.Errorf("got:\n%v\nwant:\n%s", err, strings.Join(want, "\n"))
	}
}

func TestStaticTasks(t *testing.T) {
	src := "[static]\nconnectors = [\"elsewhere\"]\ntasks = [\"elsewhere-7\", \"c-0\", \"c-00\", \"c-x\"]\n" + conn("command = [\"x\"]\n")
	c, err := Parse("s.toml", []byte(src), limitsHost())
	if err != nil {
		t.Fatalf("unknown connectors and non-task IDs must be allowed: %v", err)
	}
	if len(c.Static.Tasks) != 4 || c.Static.Connectors[0] != "elsewhere" {
		t.Errorf("static = %+v", c.Static)
	}
}

func TestParseConnectorsAndSingles(t *testing.T) {
	w, err := ParseConnectors("apply.toml", []byte("[[group]]\nname = \"g\"\n[[connector]]\nname = \"c\"\ngroup = \"g\"\ntasks = 3\n[connector.task]\ncommand = [\"x\"]\n"), limitsHost())
	if err != nil {
		t.Fatal(err)
	}
	if len(w.Jobs(time.Second)) != 3 {
		t.Errorf("jobs = %v", w.Jobs(time.Second))
	}
	_, err = ParseConnectors("apply.toml", []byte("[agent]\nid = \"x\"\n"), limitsHost())
	if err == nil || err.Error() != "apply.toml:1:1: agent: unknown key \"agent\"; allowed at the top level: group, connector" {
		t.Errorf("ParseConnectors with [agent] = %v", err)
	}
	c, err := ParseConnector("etcd:/c", []byte("name = \"c\"\ntasks = 1\n[task]\ncommand = [\"x\"]\n[task.limits]\nmemory = \"64MiB\"\n"), limitsHost())
	if err != nil || c.Task.Limits.Memory != 64<<20 {
		t.Fatalf("ParseConnector = %+v, %v", c, err)
	}
	_, err = ParseConnector("etcd:/c", []byte("name = \"c\"\ntasks = 1\n[task]\ncommand = [\"x\"]\n[task.limits]\nmemory = \"64Mb\"\n"), limitsHost())
	if err == nil || !strings.HasPrefix(err.Error(), "etcd:/c:6:1: task.limits.memory: ") {
		t.Errorf("ParseConnector bad = %v", err)
	}
	g, err := ParseGroup("etcd:/g", []byte("name = \"g\"\nlimits = { pids = 10 }\n"), limitsHost())
	if err != nil || g.Limits.Pids != 10 {
		t.Fatalf("ParseGroup = %+v, %v", g, err)
	}
	ws := spec.Workload{Groups: []spec.Group{*g}, Connectors: []spec.Connector{*c, {Name: "c-0"}, {Name: "d", Group: "h"}}}
	err = ValidateWorkload(&ws)
	want := "connector[0].tasks: task 0 has job ID \"c-0\", which connector \"c-0\" already uses\n" +
		"connector[2].group: group \"h\" is not defined by any [[group]]"
	if err == nil || err.Error() != want {
		t.Errorf("Validate = %v\nwant %s", err, want)
	}
}

func TestLoad(t *testing.T) {
	p := filepath.Join(t.TempDir(), "berth.toml")
	if err := os.WriteFile(p, []byte("[agent]\nstop_timeout = \"-1s\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load(p, limitsHost())
	if err == nil || err.Error() != p+":2:1: agent.stop_timeout: duration \"-1s\" is negative" {
		t.Errorf("Load = %v", err)
	}
	if _, err := Load(p+".missing", limitsHost()); err == nil || !strings.Contains(err.Error(), "load config "+p+".missing") {
		t.Errorf("Load(missing, limitsHost()) = %v", err)
	}
}

func TestStaticDuplicatesRejected(t *testing.T) {
	_, err := Parse("dup.toml", []byte("[static]\nconnectors = [\"a\", \"a\"]\ntasks = [\"b-0\", \"c-1\", \"b-0\"]\n"), limitsHost())
	if err == nil {
		t.Fatal("duplicate static entries accepted")
	}
	for _, want := range []string{"static.connectors[1]: \"a\" is declared twice", "static.tasks[2]: \"b-0\" is declared twice"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

// TestProblemsNameTheirDefinition: every problem inside a [[connector]] or
// [[group]] block carries that definition's kind and name, and the key
// relative to it, so that callers act on data, not on message text.
func TestProblemsNameTheirDefinition(t *testing.T) {
	src := `[[group]]
name = "g"
limits = { pids = 0 }

[[connector]]
name = "a-0"
[connector.run]
command = ["x"]

[[connector]]
name = "a"
tasks = 1
group = "missing"
[connector.task]
command = ["x"]
`
	_, err := ParseConnectors("d.toml", []byte(src), nil)
	var ps *Problems
	if !errors.As(err, &ps) {
		t.Fatalf("err = %v, want *Problems", err)
	}
	got := map[string]bool{}
	for _, p := range ps.List {
		got[fmt.Sprintf("%s/%s:%s", p.Def.Kind, p.Def.Name, p.Def.Key)] = true
	}
	for _, want := range []string{"group/g:limits.pids", "connector/a:tasks", "connector/a:group"} {
		if !got[want] {
			t.Errorf("no problem for %s; got %v", want, got)
		}
	}
	_, err = ParseConnector("connectors/x", []byte("name = \"x\"\ntasks = -1\n"), nil)
	if !errors.As(err, &ps) || ps.List[0].Def != (DefRef{Kind: spec.DefConnector, Name: "x", Key: "tasks"}) {
		t.Errorf("single definition: %v, Def %+v", err, ps.List[0].Def)
	}
}

// limitsHost is this host's facts without the process checks (user,
// program, working directory), for files whose commands are placeholders.
func limitsHost() *host.Host { return LocalHost().LimitsOnly() }

// A working directory is checked against this host under the key the file
// wrote (working_directory, or its older name dir) at that key's own
// position; a relative one is only reported as relative, never looked up
// against the agent's own working directory.
func TestWorkingDirectoryOnThisHost(t *testing.T) {
	const head = "[[connector]]\nname = \"a\"\n[connector.run]\ncommand = [\"/bin/true\"]\n"
	for _, c := range []struct{ name, line, want string }{
		{"working_directory missing", "working_directory = \"/nonexistent-berth\"\n",
			"t.toml:5:1: connector[0].run.working_directory: working directory on this host: stat /nonexistent-berth: no such file or directory"},
		{"dir missing", "dir = \"/nonexistent-berth\"\n",
			"t.toml:5:1: connector[0].run.dir: working directory on this host: stat /nonexistent-berth: no such file or directory"},
		{"relative", "working_directory = \"nonexistent-berth\"\n",
			"t.toml:5:1: connector[0].run.working_directory: must be an absolute path, not \"nonexistent-berth\""},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := LocalHost()
			h.StatDir = func(dir string) error { _, err := os.Stat(dir); return err }
			_, err := Parse("t.toml", []byte(head+c.line), h)
			if err == nil || err.Error() != c.want {
				t.Errorf("Parse error:\n%v\nwant exactly:\n%s", err, c.want)
			}
		})
	}
}
