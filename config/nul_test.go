package config

import (
	"errors"
	"strings"
	"testing"

	"github.com/berthd/berth/host"
)

// A string exec(2) cannot carry (a NUL byte: arguments, environment
// entries and paths reach the kernel as C strings) is refused with the
// key's position, in every place a job's process takes one; the host
// checks add no second, less clear problem for the same key.
func TestNULBytesRefused(t *testing.T) {
	const msg = ": must not contain a NUL byte (exec(2)"
	cases := []struct {
		name, body, want string
	}{
		{"argument", `command = ["/bin/sh", "-c", "echo a\u0000b"]`, "t.toml:5:29: connector[0].task.command[2]" + msg},
		{"program", `command = ["/bin/s\u0000h"]`, "t.toml:5:12: connector[0].task.command[0]" + msg},
		{"environment value", "command = [\"/bin/true\"]\nenv = { K = \"v\\u0000w\" }", "t.toml:6:9: connector[0].task.env.K" + msg},
		{"environment name", "command = [\"/bin/true\"]\nenv = { \"K\\u0000\" = \"v\" }", `t.toml:6:9: connector[0].task.env."K\x00": name must not contain a NUL byte`},
		{"user", "command = [\"/bin/true\"]\nuser = \"nob\\u0000ody\"", "t.toml:6:1: connector[0].task.user" + msg},
		{"user and group", "command = [\"/bin/true\"]\nuser = \"nobody:nog\\u0000roup\"", "t.toml:6:1: connector[0].task.user" + msg},
		{"working directory", "command = [\"/bin/true\"]\nworking_directory = \"/tm\\u0000p\"", "t.toml:6:1: connector[0].task.working_directory" + msg},
		{"dir", "command = [\"/bin/true\"]\ndir = \"/tm\\u0000p\"", "t.toml:6:1: connector[0].task.dir" + msg},
		{"env_file", "command = [\"/bin/true\"]\nenv_file = \"/etc/x\\u0000\"", "t.toml:6:1: connector[0].task.env_file" + msg},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, host := range []*host.Host{nil, LocalHost()} {
				_, err := Parse("t.toml", []byte(conn(c.body+"\n")), host)
				var ps *Problems
				if !errors.As(err, &ps) {
					t.Fatalf("host %v: got %v, want problems", host != nil, err)
				}
				if len(ps.List) != 1 || !strings.HasPrefix(ps.List[0].Error(), c.want) {
					t.Errorf("host %v: got\n%v\nwant one problem starting %q", host != nil, err, c.want)
				}
			}
		})
	}
}

// Every string of the agent file is checked, not only a process's: a path
// with a NUL byte (log_dir, data_dir, web_config_file, an endpoint) could
// never name what it says.
func TestNULBytesRefusedInEveryString(t *testing.T) {
	const msg = ": must not contain a NUL byte (exec(2)"
	for _, c := range []struct{ name, body, want string }{
		{"log_dir", "[agent]\nlog_dir = \"/var/log/b\\u0000\"\n", "t.toml:2:1: agent.log_dir" + msg},
		{"data_dir", "[agent]\ndata_dir = \"/var/lib/b\\u0000\"\n", "t.toml:2:1: agent.data_dir" + msg},
		{"web_config_file", "[agent]\nweb_config_file = \"/etc/b\\u0000/web.yml\"\n", "t.toml:2:1: agent.web_config_file" + msg},
		{"endpoint", "[cluster]\nendpoints = [\"http://127.0.0.1:2379\\u0000\"]\n", "t.toml:2:14: cluster.endpoints[0]" + msg},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse("t.toml", []byte(c.body), nil)
			var ps *Problems
			if !errors.As(err, &ps) {
				t.Fatalf("got %v, want problems", err)
			}
			found := false
			for _, p := range ps.List {
				found = found || strings.HasPrefix(p.Error(), c.want)
			}
			if !found {
				t.Errorf("got\n%v\nwant a problem starting %q", err, c.want)
			}
		})
	}
}

// A data_dir too long for the lease guard's socket address is refused at
// validation, with the bound, not when the agent starts its guard.
func TestDataDirFitsTheGuardSocket(t *testing.T) {
	long := "/" + strings.Repeat("d", MaxDataDirLen)
	_, err := Parse("t.toml", []byte("[agent]\ndata_dir = \""+long+"\"\n"), nil)
	if err == nil || !strings.Contains(err.Error(), "agent.data_dir: is 97 bytes long, at most 96") {
		t.Fatalf("data_dir of %d bytes: %v, want the bound", len(long), err)
	}
	if _, err := Parse("t.toml", []byte("[agent]\ndata_dir = \""+long[:MaxDataDirLen]+"\"\n"), nil); err != nil {
		t.Fatalf("data_dir of %d bytes refused: %v", MaxDataDirLen, err)
	}
}
