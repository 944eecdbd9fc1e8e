package memwatch

// systemd's memory pressure service protocol (systemd.io/MEMORY_PRESSURE,
// systemd.resource-control(5) MemoryPressureWatch=): a service gets the
// path of a pressure file to watch and the trigger to write to it; it
// opens the file, writes the trigger and polls for POLLPRI, and sheds
// caches at each event. Libraries that follow it (sd-event's
// sd_event_add_memory_pressure, GLib's GMemoryMonitor) then work in a job
// as they do in a systemd service.

import (
	"encoding/base64"
	"errors"
	"fmt"
	"os"
)

// The protocol's environment variables.
const (
	// EnvWatch holds the absolute path of the pressure file to watch.
	EnvWatch = "MEMORY_PRESSURE_WATCH"
	// EnvWrite holds the Base64 of what to write to it right after
	// opening it.
	EnvWrite = "MEMORY_PRESSURE_WRITE"
)

// ErrNoPressureFile is returned (wrapped) by Notify and Delegate for a
// Target without a memory.pressure file: a legacy v1 host has no cgroup2
// hierarchy to keep PSI per cgroup in.
var ErrNoPressureFile = errors.New("no memory.pressure file: the host has no cgroup2 hierarchy")

// Notify returns the protocol's environment for a job with cgroup t and
// rule r: EnvWatch, t's memory.pressure (the job's cgroup, which covers
// each of its runs), and EnvWrite, the Base64 of the trigger "some
// <threshold µs> <window µs>" and a NUL byte, as systemd writes it. The
// window is r.Duration rounded to a multiple of 2 s, from 2 s to 10 s,
// because the job writes the trigger itself and an unprivileged trigger
// (without CAP_SYS_RESOURCE) must have such a window (psi.rst); the
// threshold is r.Limit percent of it. Limit 10 % over 2 s gives systemd's
// own default, "some 200000 2000000".
//
// On a hybrid host the file is in the tracking tree: its stalls are the
// job's reclaim and refaults, but the v1 limit itself gives no warning
// there.
//
// A job with `user` cannot open the file for writing until it is given to
// its user (Delegate).
//
// Errors: ErrNoPressureFile; ErrRule (wrapped) for a Limit or Duration out
// of bounds.
func Notify(t Target, r Rule) (env []string, err error) {
	if t.PressureFile == "" {
		return nil, fmt.Errorf("memory pressure notification: %w", ErrNoPressureFile)
	}
	if err := r.checkPressure(); err != nil {
		return nil, fmt.Errorf("memory pressure notification of %s: %w", t.PressureFile, err)
	}
	trig := append([]byte(notifyTrigger(r).String()), 0)
	return []string{
		EnvWatch + "=" + t.PressureFile,
		EnvWrite + "=" + base64.StdEncoding.EncodeToString(trig),
	}, nil
}

// Delegate gives t's memory.pressure to uid and gid, so that a job
// running as that user can open it for writing and write its trigger, as
// systemd relaxes the file's permissions for a service with
// MemoryPressureWatch=. Only that file changes owner: the job can add a
// trigger to its own cgroup's pressure and do nothing else there.
//
// Errors: ErrNoPressureFile; the file cannot be chowned (it is gone).
func Delegate(t Target, uid, gid int) error {
	if t.PressureFile == "" {
		return fmt.Errorf("delegate memory pressure: %w", ErrNoPressureFile)
	}
	if err := os.Lchown(t.PressureFile, uid, gid); err != nil {
		return fmt.Errorf("delegate memory pressure: %w", err)
	}
	return nil
}
