package host

import (
	"github.com/berthd/berth/cgroup"
	"github.com/berthd/berth/limits"
)

// Local returns the facts of the running machine: its online CPUs
// (sysfs), the cgroup version of its memory (MemoryCgroup), limits.ResolveDevice, the lookups a start does (CheckUser,
// FindProgram, CheckDir), and the reading of env_files (ReadEnvFile),
// password files (ReadPasswordFile) and TLS files (CheckTLSFiles), so that
// `berth validate`, a reload and a start check a definition alike
// (docs/cases.md C20). CheckWebConfig is nil here: the caller that serves
// the API sets it (api.CheckWebConfig).
func Local() *Host {
	h := &Host{
		ResolveDevice:     limits.ResolveDevice,
		LookupUser:        CheckUser,
		LookPath:          FindProgram,
		StatDir:           CheckDir,
		CheckEnvFile:      checkEnvFile,
		CheckPasswordFile: checkPasswordFile,
		CheckTLS:          CheckTLSFiles,
	}
	switch cgroup.DetectMode() {
	case cgroup.Legacy, cgroup.Hybrid:
		h.MemoryCgroup = 1
	case cgroup.Unified:
		h.MemoryCgroup = 2
	}
	if cpus, err := limits.OnlineCPUs(); err == nil {
		h.OnlineCPUs = cpus
	}
	return h
}

// checkPasswordFile is Host.CheckPasswordFile on the running machine.
func checkPasswordFile(path string) error {
	_, err := ReadPasswordFile(path)
	return err
}

// checkEnvFile is Host.CheckEnvFile on the running machine.
func checkEnvFile(path string) error {
	_, err := ReadEnvFile(path)
	return err
}
