package scope

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path"
	"strconv"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
)

// Jobs is the scope unit that holds a service's jobs.
type Jobs struct {
	// Unit is the scope's unit name, "berth-jobs.scope".
	Unit string
	// Cgroup is its cgroup path in the cgroup2 hierarchy,
	// "/system.slice/berth-jobs.scope": berth's cgroup root.
	Cgroup string
	// Created is true when Ensure made the scope, false when it found it
	// active (the jobs of an earlier agent of the service run in it).
	Created bool
}

// Ensure returns the jobs' scope of service s, making it when it is not
// active: a transient scope unit s.JobsScope() in s's slice with
// Delegate=yes and Before=s.Unit (systemd.scope(5), systemd.resource-
// control(5) Delegate=, systemd.unit(5) Before=). systemd makes a scope
// only around a process and removes it once it is empty, so a scope made
// here is made around this process, as `systemd-run --scope` does: the
// caller prepares the scope's cgroup (which moves it into the scope's
// agent leaf), starts the lease guard, which enters the scope's guard
// leaf and keeps the scope, and then calls Return. A scope found active
// holds the guard or jobs of an earlier agent, and this process stays
// where it is (Created is false).
//
// Errors: the system bus cannot be reached (no systemd, no D-Bus); systemd
// refuses the unit or its start job does not complete as done (this
// process is then back in its own cgroup, or the error says why not); the
// scope has no cgroup.
func Ensure(ctx context.Context, s Service) (Jobs, error) {
	conn, err := connect(ctx)
	if err != nil {
		return Jobs{}, fmt.Errorf("connect to systemd (system bus, then its private socket): %w", err)
	}
	defer conn.Close()
	j := Jobs{Unit: s.JobsScope()}
	state, err := unitString(ctx, conn, j.Unit, "", "ActiveState")
	if err != nil {
		return Jobs{}, err
	}
	switch state {
	case "active":
		j.Cgroup, err = unitString(ctx, conn, j.Unit, "Scope", "ControlGroup")
		if err == nil && j.Cgroup == "" {
			err = fmt.Errorf("scope %s has no cgroup", j.Unit)
		}
		if err == nil {
			// A scope made by an agent that did not set it yet; best
			// effort: the jobs in it are adopted whatever it says.
			_ = conn.SetUnitPropertiesContext(ctx, j.Unit, true, tasksMaxInfinity)
		}
		return j, err
	case "failed":
		// A scope that ended failed stays loaded until its failure is
		// reset, and its name cannot be used again until then.
		if err := conn.ResetFailedUnitContext(ctx, j.Unit); err != nil {
			return Jobs{}, fmt.Errorf("reset the failed scope %s: %w", j.Unit, err)
		}
	}
	props := []sddbus.Property{
		sddbus.PropDescription("jobs of " + s.Unit + " (berth)"),
		sddbus.PropSlice(s.Slice()),
		{Name: "Delegate", Value: dbus.MakeVariant(true)},
		// The jobs' processes are capped by berth, per job (pids.max):
		// systemd's DefaultTasksMax (15 % of the kernel's limit) would cap
		// all of them together, as the service's TasksMax=infinity says.
		tasksMaxInfinity,
		sddbus.PropBefore(s.Unit),
		sddbus.PropPids(uint32(os.Getpid())),
	}
	done := make(chan string, 1)
	if _, err := conn.StartTransientUnitContext(ctx, j.Unit, "fail", props, done); err != nil {
		return Jobs{}, errors.Join(fmt.Errorf("start the scope %s: %w", j.Unit, err), Return(s))
	}
	var result string
	select {
	case result = <-done:
	case <-ctx.Done():
		result = ctx.Err().Error()
	}
	if result != "done" {
		return Jobs{}, errors.Join(fmt.Errorf("start the scope %s: job %s", j.Unit, result), Return(s))
	}
	j.Created = true
	j.Cgroup, err = unitString(ctx, conn, j.Unit, "Scope", "ControlGroup")
	if err == nil && j.Cgroup == "" {
		err = fmt.Errorf("scope %s has no cgroup", j.Unit)
	}
	if err != nil {
		return Jobs{}, errors.Join(err, Return(s))
	}
	return j, nil
}

// tasksMaxInfinity is TasksMax=infinity (systemd.resource-control(5)).
var tasksMaxInfinity = sddbus.Property{Name: "TasksMax", Value: dbus.MakeVariant(uint64(math.MaxUint64))}

// Return moves this process back into its service's cgroup,
// s.Cgroup+s.Leaf (cgroup.procs: every thread moves), after Ensure made
// the scope around it and the lease guard holds the scope.
//
// Errors: the cgroup.procs file cannot be written.
func Return(s Service) error {
	f := path.Join(mountRoot, s.Cgroup, s.Leaf, "cgroup.procs")
	if err := os.WriteFile(f, []byte(strconv.Itoa(os.Getpid())), 0); err != nil {
		return fmt.Errorf("move the agent back into its service's cgroup %s: %w", f, err)
	}
	return nil
}

// unitString reads the string property name of unit (of its type's
// interface, e.g. "Scope", or of the Unit interface when typ is "").
func unitString(ctx context.Context, conn *sddbus.Conn, unit, typ, name string) (string, error) {
	var p *sddbus.Property
	var err error
	if typ == "" {
		p, err = conn.GetUnitPropertyContext(ctx, unit, name)
	} else {
		p, err = conn.GetUnitTypePropertyContext(ctx, unit, typ, name)
	}
	if err != nil {
		return "", fmt.Errorf("read %s of %s: %w", name, unit, err)
	}
	v, ok := p.Value.Value().(string)
	if !ok {
		return "", fmt.Errorf("read %s of %s: not a string but %s", name, unit, p.Value.Signature())
	}
	return v, nil
}

// Restarting reports whether systemd is restarting unit: a restart job
// of it is running or waiting (systemctl restart, try-restart,
// reload-or-restart; during the stop half of a restart the job's type is
// still "restart"). A stop job, or none (a signal sent by hand), is no
// restart.
//
// Errors: the system bus cannot be reached or the job list read.
func Restarting(ctx context.Context, unit string) (bool, error) {
	conn, err := connect(ctx)
	if err != nil {
		return false, fmt.Errorf("connect to systemd (system bus, then its private socket): %w", err)
	}
	defer conn.Close()
	jobs, err := conn.ListJobsContext(ctx)
	if err != nil {
		return false, fmt.Errorf("list systemd's jobs: %w", err)
	}
	for _, j := range jobs {
		if j.Unit == unit && (j.JobType == "restart" || j.JobType == "try-restart") {
			return true, nil
		}
	}
	return false, nil
}

// Active reports whether unit is active (or reloading).
//
// Errors: the system bus cannot be reached or the state read.
func Active(ctx context.Context, unit string) (bool, error) {
	conn, err := connect(ctx)
	if err != nil {
		return false, fmt.Errorf("connect to systemd (system bus, then its private socket): %w", err)
	}
	defer conn.Close()
	state, err := unitString(ctx, conn, unit, "", "ActiveState")
	if err != nil {
		return false, err
	}
	return state == "active" || state == "reloading", nil
}

// connect reaches systemd's manager: over the system bus (dbus-daemon),
// else, as root, over systemd's private socket /run/systemd/private, so
// that a host without a D-Bus daemon still gets the jobs' scope.
func connect(ctx context.Context) (*sddbus.Conn, error) {
	return sddbus.NewWithContext(ctx)
}
