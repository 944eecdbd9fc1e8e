package host

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func writeSecret(t *testing.T, body string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(p, []byte(body), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil { // not reduced by the umask
		t.Fatal(err)
	}
	return p
}

func TestReadEnvFile(t *testing.T) {
	p := writeSecret(t, `# the sink's secrets
; also a comment

DB_PASSWORD=s3cr=t $HOME \n
  SPACED  =  kept as written
QUOTED="a b"
SINGLE='c d'
HALF="e
EMPTY=
DB_PASSWORD=second wins
`, 0o600)
	got, err := ReadEnvFile(p)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"DB_PASSWORD": "second wins",
		"SPACED":      "  kept as written",
		"QUOTED":      "a b",
		"SINGLE":      "c d",
		"HALF":        `"e`,
		"EMPTY":       "",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ReadEnvFile = %#v, want %#v", got, want)
	}
}

func TestReadEnvFileRefusesBadLines(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{"A=1\nno equals sign\n", ":2: not KEY=VALUE"},
		{"1A=x\n", `:1: "1A" is not a valid variable name`},
		{"A-B=x\n", `:1: "A-B" is not a valid variable name`},
		{"=x\n", `:1: "" is not a valid variable name`},
		{"BERTH_JOB_ID=x\n", ":1: BERTH_JOB_ID is set by berth"},
		{"A=x\x00y\n", ":1: A: value must not contain a NUL byte"},
	} {
		p := writeSecret(t, tc.body, 0o600)
		_, err := ReadEnvFile(p)
		if err == nil || !strings.Contains(err.Error(), "env_file "+p+tc.want) {
			t.Errorf("%q: error %v, want it to contain %q", tc.body, err, "env_file "+p+tc.want)
		}
	}
}

// A file that group or others may read or write is refused with the mode
// to set; so is a directory and a missing file.
func TestSecretFileMode(t *testing.T) {
	for _, mode := range []os.FileMode{0o644, 0o640, 0o604, 0o620, 0o602, 0o660} {
		p := writeSecret(t, "A=1\n", mode)
		_, err := ReadEnvFile(p)
		if !errors.Is(err, ErrSecretFileMode) || !strings.Contains(err.Error(), "chmod 0600 "+p) {
			t.Errorf("mode %04o: ReadEnvFile error %v, want ErrSecretFileMode naming chmod 0600", mode, err)
		}
		_, err = ReadPasswordFile(p)
		if !errors.Is(err, ErrSecretFileMode) {
			t.Errorf("mode %04o: ReadPasswordFile error %v, want ErrSecretFileMode", mode, err)
		}
	}
	for _, mode := range []os.FileMode{0o600, 0o400} {
		if _, err := ReadEnvFile(writeSecret(t, "A=1\n", mode)); err != nil {
			t.Errorf("mode %04o: %v", mode, err)
		}
	}
	if _, err := ReadEnvFile(t.TempDir()); !errors.Is(err, ErrSecretFileMode) {
		t.Errorf("a directory: error %v, want ErrSecretFileMode", err)
	}
	if _, err := ReadEnvFile("/nonexistent/berth.env"); !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), "env_file /nonexistent/berth.env") {
		t.Errorf("missing file: error %v", err)
	}
}

// A file owned by another user than root and the reader is refused even
// with mode 0600: that user can read it.
func TestSecretFileOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: changes a file's owner")
	}
	p := writeSecret(t, "A=1\n", 0o600)
	if err := os.Chown(p, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	_, err := ReadEnvFile(p)
	if !errors.Is(err, ErrSecretFileMode) || !strings.Contains(err.Error(), "owned by uid 65534") {
		t.Errorf("error %v, want ErrSecretFileMode naming uid 65534", err)
	}
}

func TestReadPasswordFile(t *testing.T) {
	for body, want := range map[string]string{"pw\n": "pw", "pw\r\n": "pw", "pw": "pw", "p w \n\n": "p w \n"} {
		got, err := ReadPasswordFile(writeSecret(t, body, 0o600))
		if err != nil || got != want {
			t.Errorf("%q: %q, %v; want %q", body, got, err, want)
		}
	}
	if _, err := ReadPasswordFile(writeSecret(t, "\n", 0o600)); err == nil || !strings.Contains(err.Error(), "is empty") {
		t.Errorf("empty password: error %v", err)
	}
}
