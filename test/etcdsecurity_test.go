package test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berthd/berth/internal/testutil"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// secureEtcd is Debian's etcd run as a child with client TLS
// (--client-cert-auth: every client presents a certificate of ca) and
// authentication enabled (users and roles).
type secureEtcd struct {
	endpoint string
	ca       *testutil.CA
	out      *testutil.SyncBuffer
}

// startSecureEtcd runs /usr/bin/etcd on free loopback ports with TLS and
// --client-cert-auth, creates the root user, enables authentication, and
// returns it; Cleanup kills it by PID. It skips when etcd is not installed.
func startSecureEtcd(t *testing.T) *secureEtcd {
	t.Helper()
	ca := testutil.NewCA(t, "etcd-e2e")
	cert, key := ca.Issue("etcd-server", "127.0.0.1")
	e := &secureEtcd{endpoint: "https://" + testutil.FreePort(t), ca: ca, out: &testutil.SyncBuffer{}}
	exited := runEtcd(t, "berth-sec", e.endpoint, e.out,
		"--cert-file", cert, "--key-file", key, "--client-cert-auth", "--trusted-ca-file", ca.File)
	// The root user authenticates by its certificate's common name.
	var root *clientv3.Client
	testutil.Eventually(t, 20*time.Second, "secure etcd answering", func() bool {
		checkRunning(t, exited, e.out)
		c, err := e.client(t, "root", "")
		if err != nil {
			return false
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if _, err := c.Get(ctx, "probe"); err != nil {
			c.Close()
			return false
		}
		root = c
		return true
	})
	defer root.Close()
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Deadline(10*time.Second))
	defer cancel()
	must := func(what string, err error) {
		t.Helper()
		if err != nil && !errors.Is(err, rpctypes.ErrRoleAlreadyExist) {
			t.Fatalf("%s: %v", what, err)
		}
	}
	_, err := root.UserAddWithOptions(ctx, "root", "", &clientv3.UserAddOptions{NoPassword: true})
	must("add user root", err)
	_, err = root.RoleAdd(ctx, "root")
	must("add role root", err)
	_, err = root.UserGrantRole(ctx, "root", "root")
	must("grant root", err)
	_, err = root.AuthEnable(ctx)
	must("enable auth", err)
	return e
}

// client is a client of e presenting a certificate whose common name is
// cn, as etcd user user/password when user is not "" (a password is then
// required), else as the certificate's common name.
func (e *secureEtcd) client(t *testing.T, cn, password string) (*clientv3.Client, error) {
	cert, key := e.ca.Issue(cn)
	tc, err := (transport.TLSInfo{CertFile: cert, KeyFile: key, TrustedCAFile: e.ca.File}).ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	cfg := clientv3.Config{Endpoints: []string{e.endpoint}, TLS: tc, DialTimeout: 3 * time.Second, Logger: zap.NewNop()}
	if password != "" {
		cfg.Username, cfg.Password = cn, password
	}
	return clientv3.New(cfg)
}

// user adds an etcd user (password "" for one that authenticates by its
// certificate's common name only) whose one role grants read and write on
// prefix and nothing else.
func (e *secureEtcd) user(t *testing.T, name, password, prefix string) {
	t.Helper()
	root, err := e.client(t, "root", "")
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Deadline(10*time.Second))
	defer cancel()
	opts := &clientv3.UserAddOptions{NoPassword: password == ""}
	steps := []func() error{
		func() error { _, err := root.RoleAdd(ctx, name); return err },
		func() error {
			_, err := root.RoleGrantPermission(ctx, name, prefix, clientv3.GetPrefixRangeEnd(prefix), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := root.UserAddWithOptions(ctx, name, password, opts); return err },
		func() error { _, err := root.UserGrantRole(ctx, name, name); return err },
	}
	for i, f := range steps {
		if err := f(); err != nil {
			t.Fatalf("etcd user %s step %d: %v", name, i, err)
		}
	}
}

// tlsTable is a [cluster] tls table with a client certificate of common
// name cn.
func (e *secureEtcd) tlsTable(cn string) string {
	cert, key := e.ca.Issue(cn)
	return fmt.Sprintf("tls = { ca = %q, cert = %q, key = %q }\n", e.ca.File, cert, key)
}

// writeSecret writes a file only its owner can read.
func writeSecret(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// berth works against an etcd that wants TLS client certificates and
// authentication, with users whose one role grants only the cluster's
// prefix /berth/<name>/: one agent authenticates as a user with a
// password (password_file), the other by its certificate's common name.
// Membership, the election, claims, the workload, the assignment, berth
// apply, connectors and members all work, and no agent ever meets a
// permission error. A user granted another prefix is refused with etcd's
// reason; a password file others can read is refused before connecting.
func TestEtcdTLSAndAuth(t *testing.T) {
	e := startSecureEtcd(t)
	name := clusterName()
	prefix := "/berth/" + name + "/"
	password := "pw-" + randSuffix()
	e.user(t, "berth-pw", password, prefix)
	e.user(t, "berth-cert", "", prefix)
	e.user(t, "berth-elsewhere", "pw-elsewhere", "/berth/elsewhere/")

	a, b := newAgent(t, "a"), newAgent(t, "b")
	pwFile := writeSecret(t, a.dir, "etcd-password", password+"\n")
	// configure writes x's file, with auth as more lines of [cluster].
	write := func(x *agent, auth, body string) {
		x.configure(clusterSpec{name: name, endpoints: []string{e.endpoint}}, auth+"\n"+body)
	}
	write(a, e.tlsTable("agent-a")+fmt.Sprintf("username = \"berth-pw\"\npassword_file = %q\n", pwFile),
		staticTable([]string{"alpha"}, []string{"alpha-0"})+sleeperConnector("alpha", 2))
	// b is a standby: it runs what nobody declares.
	write(b, e.tlsTable("berth-cert"), staticTable(nil, nil)+sleeperConnector("alpha", 2))
	a.start()
	b.start()
	a.waitExactly(settle, "alpha", "alpha-0")
	b.waitExactly(settle, "alpha-1")

	// berth apply, connectors and members, as each agent's user.
	conns := filepath.Join(t.TempDir(), "connectors.toml")
	if err := os.WriteFile(conns, []byte(sleeperConnector("alpha", 2)+sleeperConnector("beta", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"apply", "--config", a.config, "-f", conns},
		{"connectors", "--config", b.config},
		{"members", "--config", a.config},
	} {
		out, err := exec.Command(berthBin, args...).CombinedOutput()
		if err != nil {
			t.Errorf("berth %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		if args[0] == "connectors" && !strings.Contains(string(out), "beta") {
			t.Errorf("berth connectors does not list beta:\n%s", out)
		}
	}
	// beta, declared by nobody, goes to the standby: the leader saw the
	// workload change and published a new assignment.
	b.waitExactly(settle, "alpha-1", "beta", "beta-0")

	// A clean stop of both: sessions revoked, claims released, no
	// permission error on the way.
	for _, x := range []*agent{a, b} {
		if err := x.stop(syscall.SIGTERM); err != nil {
			t.Errorf("agent %s stop: %v\n%s", x.id, err, x.out)
		}
		if s := x.out.String(); strings.Contains(s, "permission denied") || strings.Contains(s, "authentication failed") {
			t.Errorf("agent %s met an etcd permission error:\n%s", x.id, s)
		}
	}
	root, err := e.client(t, "root", "")
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Deadline(10*time.Second))
	defer cancel()
	if r, err := root.Get(ctx, "/", clientv3.WithPrefix(), clientv3.WithKeysOnly()); err != nil {
		t.Fatal(err)
	} else {
		for _, kv := range r.Kvs {
			if !strings.HasPrefix(string(kv.Key), prefix) {
				t.Errorf("key %q outside the cluster's prefix %s", kv.Key, prefix)
			}
		}
	}

	// A user whose role grants another prefix: refused, with etcd's reason.
	c := newAgent(t, "c")
	write(c, e.tlsTable("agent-c")+"username = \"berth-elsewhere\"\npassword = \"pw-elsewhere\"\n", staticTable(nil, nil))
	out, err := exec.Command(berthBin, "members", "--config", c.config).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "permission denied") {
		t.Errorf("berth members as a user of another prefix: %v\n%s", err, out)
	}
	// A password file group or others can read: refused before connecting.
	if err := os.Chmod(pwFile, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err = exec.Command(berthBin, "validate", "--config", a.config).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), "cluster.password_file: on this host: password_file "+pwFile) {
		t.Errorf("berth validate with a password_file others can read: %v\n%s", err, out)
	}
	actx, acancel := context.WithTimeout(context.Background(), testutil.Deadline(60*time.Second))
	defer acancel()
	out, err = exec.CommandContext(actx, berthBin, "agent", "--config", a.config).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "password_file "+pwFile) || !strings.Contains(string(out), "chmod 0600") {
		t.Errorf("agent with a password_file others can read: %v\n%s", err, out)
	}
}
