package host

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// The checks below are what a start needs of the host before any process
// is made: the same lookups a worker's start does (ResolveCredential,
// LookPath), so that a definition can be checked
// before a running job is stopped for it (and at validation), and a check
// that passes means the start gets past them.

// CheckUser reports whether a job's user ("name", "uid", "name:group",
// "uid:gid") resolves on this host: the user (by name or uid in the user
// database, getpwnam(3)/getpwuid(3) through os/user), the named group, and
// the user's supplementary groups. "" (run as the agent) is always fine.
// The error names the user or group that does not resolve.
func CheckUser(spec string) error {
	_, err := ResolveCredential(spec)
	return err
}

// FindProgram resolves a job's program as its start will: a name with a
// slash is taken as it is (relative to dir when relative); a bare name is
// searched in the PATH of env ("KEY=value" entries), or the agent's PATH
// when env has none, as execvp(3) does. It returns the path found. The
// error says the file does not exist, is not a regular executable file, or
// is not in any directory of PATH (naming the PATH searched).
func FindProgram(file string, env []string, dir string) (string, error) {
	p, err := LookPath(file, env, dir)
	if err != nil {
		path, ok := envValue(env, "PATH")
		if !ok {
			path = os.Getenv("PATH")
		}
		return "", fmt.Errorf("%q is not an executable file in any directory of PATH=%s", file, path)
	}
	if !strings.Contains(file, "/") {
		return p, nil // lookPath found an executable file
	}
	fi, err := os.Stat(p)
	if err != nil {
		return "", err
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("%s is not a regular file", p)
	}
	if fi.Mode().Perm()&0o111 == 0 {
		return "", fmt.Errorf("%s is not executable (mode %v)", p, fi.Mode().Perm())
	}
	return p, nil
}

// CheckDir reports whether dir, a job's working directory, is an existing
// directory; "" (the agent's working directory) is always fine. The error
// names dir.
func CheckDir(dir string) error {
	if dir == "" {
		return nil
	}
	fi, err := os.Stat(filepath.Clean(dir))
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory", dir)
	}
	return nil
}
