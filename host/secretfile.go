package host

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"

	"github.com/berthd/berth/spec"
)

// maxSecretFile bounds what ReadPasswordFile and ReadEnvFile read: a file
// of secrets is small, and a mistaken path (a log, a disk image) must not
// be read whole into the agent.
const maxSecretFile = 1 << 20

// ErrSecretFileMode is wrapped by ReadPasswordFile and ReadEnvFile when
// the file is not a regular file owned by root (or by the user reading it)
// that only its owner can read and write.
var ErrSecretFileMode = errors.New("a file of secrets must be a regular file owned by root (or by the user that reads it), with no access for group or others")

// readSecretFile reads the file at path after checking, on the open file,
// that it is a regular file owned by root or by the effective user and
// that its mode grants nothing to group and others (as OpenSSH requires of
// a private key): a secret that anyone else on the host can read, or
// change, is refused with ErrSecretFileMode and the mode to set.
func readSecretFile(what, path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", what, path, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", what, path, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s %s: is not a regular file (%s): %w", what, path, fi.Mode().Type(), ErrSecretFileMode)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("%s %s: mode %04o lets group or others read or write it (chmod 0600 %s): %w", what, path, perm, path, ErrSecretFileMode)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid != 0 && int(st.Uid) != os.Geteuid() {
		return nil, fmt.Errorf("%s %s: owned by uid %d, not root (chown root %s): %w", what, path, st.Uid, path, ErrSecretFileMode)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxSecretFile+1))
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", what, path, err)
	}
	if len(b) > maxSecretFile {
		return nil, fmt.Errorf("%s %s: larger than %d bytes", what, path, maxSecretFile)
	}
	return b, nil
}

// ReadPasswordFile returns the password held in the file at path
// (password_file of [cluster] and [agent.client]): its content with one
// trailing newline ("\n" or "\r\n") removed. It returns an error wrapping
// ErrSecretFileMode when group or others may read or write the file or it
// is owned by neither root nor the effective user, an error naming the
// file when it cannot be read or is larger than 1 MiB, and an error when
// the password is empty.
func ReadPasswordFile(path string) (string, error) {
	b, err := readSecretFile("password_file", path)
	if err != nil {
		return "", err
	}
	s := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
	if s == "" {
		return "", fmt.Errorf("password_file %s: is empty", path)
	}
	return s, nil
}

// ReadEnvFile reads an env_file: environment variables for a job, one
// KEY=VALUE per line, as systemd's EnvironmentFile= reads them
// (systemd.exec(5)), in a deliberately small form:
//
//   - blank lines, and lines whose first non-blank character is '#' or
//     ';', are ignored;
//   - KEY is everything before the first '=', blanks around it removed; it
//     must be a POSIX name ([A-Za-z_][A-Za-z0-9_]*) other than the BERTH_*
//     names berth sets itself;
//   - VALUE is everything after that '=', verbatim, except that one pair of
//     matching quotes around it ('...' or "...") is removed; nothing is
//     expanded and backslashes have no special meaning;
//   - a KEY given twice takes its last value.
//
// The file must satisfy the rules of a file of secrets (only its owner,
// root, may read or write it: ErrSecretFileMode). Errors name the file and
// the line: "env_file /etc/berth/orders.env:3: ...".
func ReadEnvFile(path string) (map[string]string, error) {
	b, err := readSecretFile("env_file", path)
	if err != nil {
		return nil, err
	}
	env := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64<<10), maxSecretFile)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSuffix(sc.Text(), "\r")
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || trimmed[0] == '#' || trimmed[0] == ';' {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			return nil, fmt.Errorf("env_file %s:%d: not KEY=VALUE", path, n)
		}
		k = strings.TrimSpace(k)
		switch {
		case !envName(k):
			return nil, fmt.Errorf("env_file %s:%d: %q is not a valid variable name ([A-Za-z_][A-Za-z0-9_]*)", path, n, k)
		case spec.ReservedEnv(k):
			return nil, fmt.Errorf("env_file %s:%d: %s is set by berth for every job and cannot be overridden", path, n, k)
		case strings.ContainsRune(v, 0):
			return nil, fmt.Errorf("env_file %s:%d: %s: value must not contain a NUL byte", path, n, k)
		}
		if len(v) >= 2 && (v[0] == '"' || v[0] == '\'') && v[len(v)-1] == v[0] {
			v = v[1 : len(v)-1]
		}
		env[k] = v
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("env_file %s: %w", path, err)
	}
	return env, nil
}

// envName reports whether s is a POSIX environment variable name.
func envName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9' {
			continue
		}
		return false
	}
	return true
}
