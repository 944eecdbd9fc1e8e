package worker

import (
	"fmt"
	"strings"
	"syscall"

	"github.com/moby/sys/user"
)

// DefaultPath is the PATH a job gets when its environment sets none: the
// fixed value systemd gives every service (systemd.exec(5), "Environment
// Variables in Spawned Processes", $PATH; a merged-/usr system).
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin"

// jobEnv returns env completed as systemd completes a service's
// environment (systemd.exec(5), "Environment Variables in Spawned
// Processes"): PATH=DefaultPath when env has no PATH and, when the job runs
// as another user (cred not nil), USER and LOGNAME (the user's name), HOME
// and SHELL (from the user's passwd(5) entry), as systemd sets them for
// User=. A variable env already sets is kept: the job's own env overrides.
// It returns an error when cred's uid has no passwd entry.
func jobEnv(env []string, cred *syscall.Credential) ([]string, error) {
	set := map[string]bool{}
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		set[k] = true
	}
	out := append([]string(nil), env...)
	add := func(k, v string) {
		if !set[k] {
			out = append(out, k+"="+v)
			set[k] = true
		}
	}
	if cred != nil {
		u, err := user.LookupUid(int(cred.Uid))
		if err != nil {
			return nil, fmt.Errorf("passwd entry of uid %d for HOME, USER, LOGNAME, SHELL: %w", cred.Uid, err)
		}
		add("USER", u.Name)
		add("LOGNAME", u.Name)
		add("HOME", u.Home)
		add("SHELL", u.Shell)
	}
	add("PATH", DefaultPath)
	return out, nil
}
