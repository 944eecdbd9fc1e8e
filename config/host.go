package config

import (
	"github.com/berthd/berth/host"
)

// LocalHost returns host.Local without the lookups of a process's user,
// program and working directory (LookupUser, LookPath and StatDir nil):
// the facts a file is checked against where its processes need not exist
// (a definition checked on a host that may not run it, a test).
func LocalHost() *host.Host {
	h := host.Local()
	h.LookupUser, h.LookPath, h.StatDir = nil, nil, nil
	return h
}
