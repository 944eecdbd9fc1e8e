package config

import (
	"github.com/berthd/berth/host"
	"github.com/berthd/berth/spec"
)

// The facts of a host that validation checks a file against, and the
// reading of secret and TLS files, live in package host; the names below
// are for the transition of the packages that still name them through
// config: new code uses host's.

// Host is host.Host, for the transition.
type Host = host.Host

// LocalHost returns host.Local without the lookups of a process's user,
// program and working directory (LookupUser, LookPath and StatDir nil), as
// config.LocalHost did before package host; for the transition: new code
// uses host.Local, or host.Local().LimitsOnly().
func LocalHost() *Host {
	h := host.Local()
	h.LookupUser, h.LookPath, h.StatDir = nil, nil, nil
	return h
}

// ErrSecretFileMode is host.ErrSecretFileMode, for the transition.
var ErrSecretFileMode = host.ErrSecretFileMode

// ReadPasswordFile is host.ReadPasswordFile, for the transition.
func ReadPasswordFile(path string) (string, error) { return host.ReadPasswordFile(path) }

// ReadEnvFile is host.ReadEnvFile, for the transition.
func ReadEnvFile(path string) (map[string]string, error) { return host.ReadEnvFile(path) }

// CheckTLSFiles is host.CheckTLSFiles, for the transition.
func CheckTLSFiles(t TLS) map[string]error { return host.CheckTLSFiles(t) }

// Environment variables berth sets for every job: spec's, for the
// transition.
const (
	EnvJobID     = spec.EnvJobID
	EnvConnector = spec.EnvConnector
	EnvTask      = spec.EnvTask
	EnvCgroup    = spec.EnvCgroup
)
