package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/berthd/berth/internal/testutil"
	"github.com/berthd/berth/spec"
)

// The keys of the API's and etcd's security: web_config_file,
// [agent.client], [cluster] username/password/password_file and tls,
// env_file.
func TestParseSecurityKeys(t *testing.T) {
	src := `[agent]
web_config_file = "/etc/berth/web.yml"
  [agent.client]
  username = "berth"
  password_file = "/etc/berth/api-password"
  tls = { ca = "/etc/berth/ca.pem", cert = "/etc/berth/client.pem", key = "/etc/berth/client-key.pem", server_name = "host-a" }

[cluster]
endpoints = ["https://etcd-1:2379"]
username = "berth-prod"
password = "pw"
tls = { ca = "/etc/berth/etcd-ca.pem" }

[[connector]]
name = "c"
tasks = 1
  [connector.task]
  command = ["/bin/true"]
  env = { A = "1" }
  env_file = "/etc/berth/c.env"
`
	c, err := Parse("t.toml", []byte(src), nil)
	if err != nil {
		t.Fatal(err)
	}
	wantClient := spec.APIClient{Username: "berth", PasswordFile: "/etc/berth/api-password",
		TLS: spec.TLS{CA: "/etc/berth/ca.pem", Cert: "/etc/berth/client.pem", Key: "/etc/berth/client-key.pem", ServerName: "host-a"}}
	if c.Agent.WebConfigFile != "/etc/berth/web.yml" || c.Agent.Client != wantClient {
		t.Errorf("agent = %+v", c.Agent)
	}
	if c.Cluster.Username != "berth-prod" || c.Cluster.Password != "pw" || c.Cluster.PasswordFile != "" ||
		c.Cluster.TLS != (spec.TLS{CA: "/etc/berth/etcd-ca.pem"}) || !c.Cluster.TLS.Enabled() {
		t.Errorf("cluster = %+v", c.Cluster)
	}
	if p := c.Connectors[0].Task; p.EnvFile != "/etc/berth/c.env" || p.Env["A"] != "1" {
		t.Errorf("task process = %+v", p)
	}
	if (spec.TLS{}).Enabled() {
		t.Error("zero TLS is enabled")
	}
}

func TestSecurityKeyErrors(t *testing.T) {
	for _, c := range []struct{ name, toml, want string }{
		{"relative web config", "[agent]\nweb_config_file = \"web.yml\"\n", `t.toml:2:1: agent.web_config_file: must be an absolute path, not "web.yml"`},
		{"client password and file", "[agent.client]\nusername = \"u\"\npassword = \"p\"\npassword_file = \"/p\"\n", "t.toml:4:1: agent.client.password_file: password and password_file are exclusive"},
		{"client user without password", "[agent.client]\nusername = \"u\"\n", "t.toml:2:1: agent.client.username: needs password or password_file"},
		{"client password without user", "[agent.client]\npassword = \"p\"\n", "t.toml:1:1: agent.client: password and password_file need username"},
		{"client relative password file", "[agent.client]\nusername = \"u\"\npassword_file = \"p\"\n", `t.toml:3:1: agent.client.password_file: must be an absolute path, not "p"`},
		{"client cert without key", "[agent.client]\ntls = { cert = \"/c.pem\" }\n", "t.toml:2:1: agent.client.tls: cert and key must be given together"},
		{"client relative ca", "[agent.client]\ntls = { ca = \"ca.pem\" }\n", `t.toml:2:9: agent.client.tls.ca: must be an absolute path, not "ca.pem"`},
		{"client unknown key", "[agent.client]\nuser = \"u\"\n", "t.toml:2:1: agent.client.user: unknown key \"user\""},
		{"etcd user on the embedded etcd", "[cluster]\nusername = \"u\"\npassword = \"p\"\n", "t.toml:2:1: cluster.username: needs endpoints: the embedded etcd (no endpoints) has no users"},
		{"etcd empty user", "[cluster]\nendpoints = [\"http://e:2379\"]\nusername = \"\"\n", "t.toml:3:1: cluster.username: must not be empty"},
		{"relative env_file", conn("command = [\"x\"]\nenv_file = \"c.env\"\n"), `t.toml:6:1: connector[0].task.env_file: must be an absolute path, not "c.env"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse("t.toml", []byte(c.toml), nil)
			var ps *Problems
			if !errors.As(err, &ps) {
				t.Fatalf("Parse error = %v, want *Problems", err)
			}
			for _, p := range ps.List {
				if strings.HasPrefix(p.Error(), c.want) {
					return
				}
			}
			t.Errorf("errors:\n%v\nwant one starting with:\n%s", err, c.want)
		})
	}
}

// On this host (LocalHost) an env_file is read at validation: a file
// others can read is a problem of the key, with the mode to set; a stored
// definition (LimitsOnly) is not checked, since the file need exist only
// where the job runs.
func TestEnvFileCheckedOnThisHost(t *testing.T) {
	p := writeSecret(t, "A=1\n", 0o644)
	src := conn("command = [\"/bin/true\"]\nenv_file = \"" + p + "\"\n")
	_, err := Parse("t.toml", []byte(src), LocalHost())
	want := "t.toml:6:1: connector[0].task.env_file: on this host: env_file " + p + ": mode 0644"
	if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "chmod 0600") {
		t.Errorf("Parse error:\n%v\nwant one starting with %q", err, want)
	}
	if _, err := Parse("t.toml", []byte(src), LocalHost().LimitsOnly()); err != nil {
		t.Errorf("LimitsOnly: %v", err)
	}
	if err := os.Chmod(p, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Parse("t.toml", []byte(src), LocalHost()); err != nil {
		t.Errorf("a 0600 env_file: %v", err)
	}
}

// Changes name a changed secret, never its value: env values, the
// env_file's path shown, passwords hidden.
func TestDiffHidesSecrets(t *testing.T) {
	parse := func(env, pw string) *Config {
		t.Helper()
		c, err := Parse("d.toml", []byte(`[agent]
id = "h"
[cluster]
endpoints = ["http://e:2379"]
username = "u"
password = "`+pw+`"
[[connector]]
name = "c"
tasks = 1
  [connector.task]
  command = ["x"]
  env = { TOKEN = "`+env+`" }
  env_file = "/etc/berth/`+env+`.env"
`), nil)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	var got []string
	for _, c := range DiffConfig(parse("old-secret", "old-pw"), parse("new-secret", "new-pw")) {
		got = append(got, c.String())
	}
	want := []string{
		"cluster.password: [hidden] → [hidden]",
		"connector c: task.env.TOKEN: [hidden] → [hidden]",
		"connector c: task.env_file: /etc/berth/old-secret.env → /etc/berth/new-secret.env",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("DiffConfig:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// On this host (LocalHost) every file the agent reads for its security is
// checked at validation, each a problem of its own key at its position,
// all in one run: password_file of [cluster] and [agent.client], and the
// ca, cert and key of both tls tables. The same files, valid, pass.
func TestSecurityFilesCheckedOnThisHost(t *testing.T) {
	loose := writeSecret(t, "pw\n", 0o644)
	notPEM := writeSecret(t, "not a certificate\n", 0o600)
	src := "[agent.client]\n" +
		"username = \"u\"\n" +
		"password_file = \"" + loose + "\"\n" +
		"tls = { ca = \"" + notPEM + "\" }\n" +
		"[cluster]\n" +
		"endpoints = [\"https://127.0.0.1:2379\"]\n" +
		"tls = { ca = \"/nonexistent-berth-ca.pem\", cert = \"" + notPEM + "\", key = \"/nonexistent-berth-key.pem\" }\n" +
		"username = \"u\"\n" +
		"password_file = \"/nonexistent-berth-pw\"\n"
	_, err := Parse("t.toml", []byte(src), LocalHost())
	want := []string{
		"t.toml:3:1: agent.client.password_file: on this host: password_file " + loose + ": mode 0644",
		"t.toml:4:9: agent.client.tls.ca: on this host: CA file " + notPEM + ": holds no PEM certificate",
		"t.toml:7:9: cluster.tls.ca: on this host: CA file: open /nonexistent-berth-ca.pem: no such file or directory",
		"t.toml:7:",
		"t.toml:9:1: cluster.password_file: on this host: password_file /nonexistent-berth-pw: open /nonexistent-berth-pw: no such file or directory",
	}
	var ps *Problems
	if !errors.As(err, &ps) || len(ps.List) != len(want) {
		t.Fatalf("Parse error:\n%v\nwant %d problems", err, len(want))
	}
	for i, w := range want {
		if !strings.HasPrefix(ps.List[i].Error(), w) {
			t.Errorf("problem %d = %q, want it to start with %q", i, ps.List[i].Error(), w)
		}
	}
	if got := ps.List[3].Key; got != "cluster.tls.key" {
		t.Errorf("problem 3 key = %q, want cluster.tls.key", got)
	}

	ca := testutil.NewCA(t, "berth-test")
	cert, key := ca.Issue("client")
	pw := writeSecret(t, "pw\n", 0o600)
	good := "[agent.client]\nusername = \"u\"\npassword_file = \"" + pw + "\"\ntls = { ca = \"" + ca.File + "\" }\n" +
		"[cluster]\nendpoints = [\"https://127.0.0.1:2379\"]\n" +
		"tls = { ca = \"" + ca.File + "\", cert = \"" + cert + "\", key = \"" + key + "\" }\n" +
		"username = \"u\"\npassword_file = \"" + pw + "\"\n"
	if _, err := Parse("t.toml", []byte(good), LocalHost()); err != nil {
		t.Errorf("valid files refused: %v", err)
	}
	// A stored definition is checked on every host: none of these files.
	if _, err := Parse("t.toml", []byte(src), LocalHost().LimitsOnly()); err != nil {
		t.Errorf("LimitsOnly: %v", err)
	}
}

// writeSecret writes body to a new file of the given mode and returns its
// path.
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
