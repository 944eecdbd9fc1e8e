//go:build soak

package soak

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/prometheus/procfs"
)

// proc is one live process as /proc shows it.
type proc struct {
	pid   int
	start uint64 // start time, clock ticks after boot (proc(5) stat field 22)
	comm  string
	argv  []string
}

func (p proc) String() string {
	return fmt.Sprintf("pid %d (%s) started at tick %d: %q", p.pid, p.comm, p.start, p.argv)
}

// stat reads /proc/pid/stat (prometheus/procfs): the command name, the
// start time and whether the process is a zombie. ok is false when the
// process is gone.
func stat(pid int) (comm string, start uint64, zombie, ok bool) {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return "", 0, false, false
	}
	st, err := p.Stat()
	if err != nil {
		return "", 0, false, false
	}
	return st.Comm, st.Starttime, st.State == "Z", true
}

// liveSince reports whether pid is still the process that started at
// tick start and is not a zombie: a PID reused by a newer process is not.
func liveSince(pid int, start uint64) bool {
	_, s, zombie, ok := stat(pid)
	return ok && !zombie && s == start
}

// tagged lists every live process (zombies excluded) whose environment
// holds name=value: the processes a soak's agents started as jobs, however
// they were daemonised.
func tagged(name, value string) []proc {
	want := []byte(name + "=" + value)
	entries, _ := os.ReadDir("/proc")
	var out []proc
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		if err != nil {
			continue
		}
		cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		argv := strings.Split(strings.TrimSuffix(string(cmd), "\x00"), "\x00")
		mine := false
		for _, kv := range bytes.Split(env, []byte{0}) {
			mine = mine || bytes.Equal(kv, want)
		}
		if !mine {
			continue
		}
		comm, start, zombie, ok := stat(pid)
		if !ok || zombie {
			continue
		}
		out = append(out, proc{pid: pid, start: start, comm: comm, argv: argv})
	}
	return out
}

// fdCount is the number of open file descriptors of pid.
func fdCount(pid int) (int, error) {
	es, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	return len(es), err
}

// fdTargets names what each open descriptor of pid points at, for a
// failure message ("socket:[123]", "pipe:[456]", a path).
func fdTargets(pid int) []string {
	es, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	var out []string
	for _, e := range es {
		l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, e.Name()))
		if err == nil {
			out = append(out, e.Name()+"->"+l)
		}
	}
	return out
}

// cgroupsOf is /proc/pid/cgroup, one "hierarchy-ID:controllers:path" per
// line.
func cgroupsOf(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	return strings.TrimSpace(string(b))
}

// withArgv lists every live process whose command line is argv: a copy of
// the agent forked but not yet exec'd has the agent's.
func withArgv(argv []string) []proc {
	want := strings.Join(argv, "\x00")
	entries, _ := os.ReadDir("/proc")
	var out []proc
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil || strings.TrimSuffix(string(cmd), "\x00") != want {
			continue
		}
		if comm, start, zombie, ok := stat(pid); ok && !zombie {
			out = append(out, proc{pid: pid, start: start, comm: comm, argv: argv})
		}
	}
	return out
}

// holders describes every process that has path open: PID, state, parent,
// what it waits in, command line and cgroups; for a failure message.
func holders(path string) []string {
	var out []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		for _, fd := range fds {
			if l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())); err != nil || l != path {
				continue
			}
			st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
			wchan, _ := os.ReadFile(fmt.Sprintf("/proc/%d/wchan", pid))
			cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			out = append(out, fmt.Sprintf("pid %d fd %s: stat %s; wchan %s; cmdline %q; cgroups:\n%s",
				pid, fd.Name(), strings.TrimSpace(string(st)), wchan, strings.Split(string(cmd), "\x00"), cgroupsOf(pid)))
		}
	}
	return out
}
