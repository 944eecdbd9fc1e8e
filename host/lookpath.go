package host

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// errNotFound is returned by LookPath when no directory of PATH holds an
// executable file of that name.
var errNotFound = errors.New("executable file not found in $PATH")

// LookPath resolves a command name the way execvp(3) does: a name with a
// slash is used as it is (relative to dir when relative); a bare name is
// searched in the PATH of env, or the agent's PATH when env has none. The
// result is absolute or relative to the job's working directory.
func LookPath(file string, env []string, dir string) (string, error) {
	if file == "" {
		return "", errors.New("empty command")
	}
	if strings.Contains(file, "/") {
		if !filepath.IsAbs(file) && dir != "" {
			return filepath.Join(dir, file), nil
		}
		return file, nil
	}
	path, ok := envValue(env, "PATH")
	if !ok {
		path = os.Getenv("PATH")
	}
	for _, d := range filepath.SplitList(path) {
		if d == "" {
			d = "."
		}
		if !filepath.IsAbs(d) && dir != "" {
			d = filepath.Join(dir, d)
		}
		cand := filepath.Join(d, file)
		if isExecutable(cand) {
			return cand, nil
		}
	}
	return "", fmt.Errorf("look up %q: %w", file, errNotFound)
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	if err != nil {
		return false
	}
	m := fi.Mode()
	return m.Type()&fs.ModeType == 0 && m.Perm()&0o111 != 0
}

// envValue returns the last value of key in env ("KEY=value" entries).
func envValue(env []string, key string) (string, bool) {
	var (
		val string
		ok  bool
	)
	for _, kv := range env {
		if k, v, found := strings.Cut(kv, "="); found && k == key {
			val, ok = v, true
		}
	}
	return val, ok
}
