package config

import (
	"time"
)

// Defaults of the agent file (docs/config.md lists every key).
const (
	DefaultDataDir = "/var/lib/berth"
	// MaxDataDirLen is the longest data_dir, bytes: the lease guard's
	// socket <data_dir>/guard.sock (11 bytes more) must fit in sun_path,
	// 108 bytes with the terminating NUL (unix(7)).
	MaxDataDirLen      = 107 - len("/guard.sock")
	DefaultLogDir      = "/var/log/berth"
	DefaultLogMaxSize  = 10 << 20 // bytes
	DefaultLogMaxFiles = 5
	DefaultListen      = "127.0.0.1:9750"
	// DefaultCgroupRoot is cgroup_root: a path below each hierarchy's root.
	DefaultCgroupRoot = "berth"
	// DefaultClusterName is the key prefix "/berth/<name>/" in etcd.
	DefaultClusterName = "berth"
	// DefaultSessionTTL is the session lease TTL, whole seconds.
	DefaultSessionTTL = 10 * time.Second
	// MinSessionTTL is the shortest session_ttl: the fencing margin is
	// max(1 s, TTL/5), so a shorter lease leaves no time to renew.
	MinSessionTTL = 2 * time.Second
)
