package host

import (
	"errors"
	"fmt"
	"runtime"
	"sort"
	"strings"

	"github.com/berthd/berth/limits"
	"github.com/berthd/berth/spec"
)

// Host holds the facts of a machine that validation checks a file against:
// which CPUs exist for cpu and cpuset limits, which block devices exist for
// io limits, and whether a process's user, program and working directory
// exist. Parsing (package config) never reads the machine itself; the
// caller passes the facts in (Local for the running machine, nil to skip every host
// check, as when a definition is checked away from the hosts that run it;
// LimitsOnly for a definition stored for the whole cluster, whose programs
// and users need exist only where it runs).
type Host struct {
	// OnlineCPUs are the CPU numbers online, ascending; nil when unknown
	// (then cpu limits are checked against runtime.NumCPU and cpuset CPUs
	// are not checked).
	OnlineCPUs []int
	// ResolveDevice maps an io limit's device to its whole disk; nil skips
	// the check.
	ResolveDevice limits.DeviceResolver

	// LookupUser checks that a process's user ("user" or "user:group",
	// names or numeric IDs) exists; nil skips the check.
	LookupUser func(spec string) error
	// LookPath finds a process's program (command[0]) as its start will:
	// as it is when it has a slash (relative to dir), else in the PATH of
	// env ("KEY=value"), or the agent's PATH when env has none; an error
	// when no executable file is found. nil skips the check.
	LookPath func(file string, env []string, dir string) (string, error)
	// StatDir checks that a process's working directory exists and is a
	// directory; nil skips the check.
	StatDir func(dir string) error
	// CheckEnvFile checks that a process's env_file can be used: it reads
	// and only root may read or write it (ReadEnvFile); nil skips the
	// check.
	CheckEnvFile func(path string) error

	// MemoryCgroup is the cgroup version that accounts the jobs' memory
	// on this host: 1 (the v1 memory controller: legacy and hybrid
	// hosts), 2 (a unified host), 0 when unknown. It decides what a
	// memory_pressure = "restart" needs (CheckPressure).
	MemoryCgroup int

	// CheckPasswordFile checks a password_file ([cluster] and
	// [agent.client]) as the agent reads it (ReadPasswordFile); nil skips
	// the check.
	CheckPasswordFile func(path string) error
	// CheckTLS checks the PEM files of a tls table ([cluster] and
	// [agent.client]) as a client loads them (CheckTLSFiles): it returns
	// the error of each failing key, "ca", "cert" or "key"; nil skips the
	// check.
	CheckTLS func(t spec.TLS) map[string]error
	// CheckWebConfig checks agent.web_config_file as the agent's listener
	// loads it (the exporter-toolkit's web configuration; the api package
	// has the check); nil skips it.
	CheckWebConfig func(path string) error
}

// LimitsOnly returns a copy of h without the process facts (user, program,
// working directory, env_file): what a definition stored for the whole cluster is
// checked against on every host (CPUs, devices), since its programs and
// users need exist only on the hosts that run it. nil stays nil.
func (h *Host) LimitsOnly() *Host {
	if h == nil {
		return nil
	}
	c := *h
	c.LookupUser, c.LookPath, c.StatDir, c.CheckEnvFile = nil, nil, nil, nil
	c.CheckPasswordFile, c.CheckTLS, c.CheckWebConfig = nil, nil, nil
	return &c
}

// CheckPressure checks that p's memory pressure action can work with its
// limits on h, and returns what is wrong ("" when it can): a restart
// needs a threshold of the job's own. On cgroup v1 memory (MemoryCgroup
// 1) the job's pressure (PSI) gives no warning before the v1 limit, where
// anonymous memory without swap is OOM-killed after a few milliseconds of
// stall, so the action fires when the usage crosses memory_high
// (Documentation/admin-guide/cgroup-v1/memory.rst, "Memory thresholds"),
// which v1 cannot enforce: memory_high is required. On cgroup v2 (and
// when h is nil or the version unknown) the stall rises as the job nears
// memory.high or memory.max: one of memory_high and memory is required,
// since a job without either is never under pressure of its own.
func (h *Host) CheckPressure(p *spec.Process) string {
	if p.MemoryPressure.Action != spec.PressureRestart {
		return ""
	}
	l := p.Limits
	if h != nil && h.MemoryCgroup == 1 {
		if l.MemoryHigh == 0 {
			return `"restart" needs limits.memory_high on this host: its memory is accounted by cgroup v1, whose pressure stall gives no warning before the limit, so the restart fires when the job's usage crosses memory_high (which v1 does not enforce)`
		}
		return ""
	}
	if l.MemoryHigh == 0 && l.Memory == 0 {
		return `"restart" needs limits.memory_high or limits.memory: a job without a memory limit of its own is never under memory pressure of its own (on cgroup v1 memory_high is the threshold it fires at)`
	}
	return ""
}

// ProcessProblem is one process fact that does not hold on the host.
type ProcessProblem struct {
	// Key is the key inside the process: "user", "working_directory",
	// "env_file" or "command[0]".
	Key string
	// Msg says what is wrong, e.g. `"nobdy" does not resolve on this
	// host: ...`.
	Msg string
}

// CheckProcess checks p's user, working directory, env_file and program
// against h, with env the job's environment (for PATH; ProcessEnv). A
// program that still holds a ${...} reference is not looked up (it is
// known per job only). It returns one ProcessProblem per failing key, nil
// when every check passes or h is nil; a nil hook skips its check.
func (h *Host) CheckProcess(p *spec.Process, env []string) []ProcessProblem {
	if h == nil {
		return nil
	}
	var out []ProcessProblem
	// A string with a NUL byte is the decoder's problem; a lookup would
	// only add a second, less clear one.
	nul := func(s string) bool { return strings.ContainsRune(s, 0) }
	if p.User != "" && h.LookupUser != nil && !nul(p.User) {
		if err := h.LookupUser(p.User); err != nil {
			out = append(out, ProcessProblem{"user", fmt.Sprintf("%q does not resolve on this host: %v", p.User, err)})
		}
	}
	dirOK := p.Dir == "" || (strings.HasPrefix(p.Dir, "/") && !nul(p.Dir))
	// A relative directory is reported by the decoder (it must be
	// absolute); a stat would read it against the agent's own cwd.
	if p.Dir != "" && h.StatDir != nil && strings.HasPrefix(p.Dir, "/") && !nul(p.Dir) {
		if err := h.StatDir(p.Dir); err != nil {
			dirOK = false
			out = append(out, ProcessProblem{"working_directory", fmt.Sprintf("working directory on this host: %v", err)})
		}
	}
	if p.EnvFile != "" && h.CheckEnvFile != nil && !nul(p.EnvFile) {
		if err := h.CheckEnvFile(p.EnvFile); err != nil {
			out = append(out, ProcessProblem{"env_file", fmt.Sprintf("on this host: %v", err)})
		}
	}
	if len(p.Command) > 0 && p.Command[0] != "" && h.LookPath != nil && !strings.Contains(p.Command[0], "${") && !nul(p.Command[0]) {
		relative := strings.Contains(p.Command[0], "/") && !strings.HasPrefix(p.Command[0], "/")
		if dirOK || !relative {
			if _, err := h.LookPath(p.Command[0], env, p.Dir); err != nil {
				out = append(out, ProcessProblem{"command[0]", fmt.Sprintf("program not found on this host: %v", err)})
			}
		}
	}
	return out
}

// ProcessEnv is the part of a process's environment that decides where
// its program is found: "PATH=..." when the process sets PATH, else nil.
func ProcessEnv(p *spec.Process) []string {
	if v, ok := p.Env["PATH"]; ok {
		return []string{"PATH=" + v}
	}
	return nil
}

// CheckJob checks that j's process can start on h: its user resolves, its
// working directory exists, its env_file can be used, and its (expanded)
// program is an executable file, found as the start will find it. It returns nil when every check
// passes or h has no process facts, else an error naming each key that
// fails (user: "nobdy" does not resolve on this host: ...).
func (h *Host) CheckJob(j spec.Job) error {
	ps := h.CheckProcess(&j.Process, ProcessEnv(&j.Process))
	if len(ps) == 0 {
		return nil
	}
	sort.SliceStable(ps, func(a, b int) bool { return ps[a].Key < ps[b].Key })
	errs := make([]error, len(ps))
	for i, p := range ps {
		errs[i] = fmt.Errorf("%s: %s", p.Key, p.Msg)
	}
	return errors.Join(errs...)
}

// NumCPU is the number of CPUs a cpu limit may use: the online CPUs, or
// runtime.NumCPU() when they are unknown; 0 with a nil h (no check).
func (h *Host) NumCPU() int {
	if h == nil {
		return 0
	}
	if len(h.OnlineCPUs) > 0 {
		return len(h.OnlineCPUs)
	}
	return runtime.NumCPU()
}

// CheckCpuset parses s, a cpuset list ("0-3,6"; limits.ParseCPUList), and
// checks that every CPU in it is online on h. It returns the CPUs, or the
// parse error, or an error naming the first CPU that is not online. A nil
// h, or one whose OnlineCPUs are unknown, only parses.
func (h *Host) CheckCpuset(s string) ([]int, error) {
	cpus, err := limits.ParseCPUList(s)
	if err != nil {
		return nil, err
	}
	if h == nil || h.OnlineCPUs == nil {
		return cpus, nil
	}
	on := map[int]bool{}
	for _, c := range h.OnlineCPUs {
		on[c] = true
	}
	for _, c := range cpus {
		if !on[c] {
			return nil, fmt.Errorf("CPU %d of %q is not online on this host (online: %s)", c, s, limits.FormatCPUList(h.OnlineCPUs))
		}
	}
	return cpus, nil
}

// CheckDevice checks that path, an io limit's device, resolves to a whole
// disk on h (ResolveDevice); it returns the resolver's error. A nil h or
// ResolveDevice skips the check.
func (h *Host) CheckDevice(path string) error {
	if h == nil || h.ResolveDevice == nil {
		return nil
	}
	_, err := h.ResolveDevice(path)
	return err
}
