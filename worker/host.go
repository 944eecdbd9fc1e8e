package worker

import "github.com/berthd/berth/config"

// LocalHost returns config.LocalHost (online CPUs, devices, env_file
// checks) with the lookups a start does on this host: CheckUser,
// FindProgram and CheckDir, so that validation and a reload check a
// definition exactly as its start will (docs/cases.md C20).
func LocalHost() *config.Host {
	h := config.LocalHost()
	h.LookupUser, h.LookPath, h.StatDir = CheckUser, FindProgram, CheckDir
	return h
}
