//go:build soak

package soak

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berthd/berth/internal/testutil"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// etcdBin is the server of Debian's etcd-server package (installed by
// .ci/run).
const etcdBin = "/usr/bin/etcd"

// etcdCluster is a cluster of etcd processes started by the test: clients
// reach member i at clientURLs[i] (on the host address given to
// startEtcd), peers talk over loopback.
type etcdCluster struct {
	t       testing.TB
	members []*etcdMember
}

// etcdMember is one etcd process; it can be killed and started again on
// the same data directory.
type etcdMember struct {
	t                  testing.TB
	name, dir, logFile string
	clientURL, peerURL string
	initial            string // --initial-cluster
	cmd                *exec.Cmd
	exited             chan struct{}
}

// startEtcd starts n etcd members whose client URLs listen on host, waits
// until the cluster has a leader, and stops every member in Cleanup. It
// skips the test when Debian's etcd-server is not installed.
func startEtcd(t testing.TB, n int, host string) *etcdCluster {
	t.Helper()
	if _, err := os.Stat(etcdBin); err != nil {
		t.Skipf("%s not installed (apt-get install etcd-server; .ci/run does): %v", etcdBin, err)
	}
	c := &etcdCluster{t: t}
	dir := t.TempDir()
	var peers []string
	for i := 0; i < n; i++ {
		m := &etcdMember{t: t, name: fmt.Sprintf("m%d", i), dir: filepath.Join(dir, fmt.Sprintf("m%d", i)),
			clientURL: "http://" + freePort(t, host), peerURL: "http://" + freePort(t, "127.0.0.1")}
		m.logFile = m.dir + ".log"
		peers = append(peers, m.name+"="+m.peerURL)
		c.members = append(c.members, m)
	}
	for _, m := range c.members {
		m.initial = strings.Join(peers, ",")
		m.start()
	}
	t.Cleanup(func() {
		for _, m := range c.members {
			m.kill()
		}
	})
	c.waitLeader(30 * time.Second)
	return c
}

// start runs the member (again) on its data directory.
func (m *etcdMember) start() {
	m.t.Helper()
	f, err := os.OpenFile(m.logFile, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		m.t.Fatal(err)
	}
	m.cmd = exec.Command(etcdBin,
		"--name", m.name, "--data-dir", m.dir,
		"--listen-client-urls", m.clientURL, "--advertise-client-urls", m.clientURL,
		"--listen-peer-urls", m.peerURL, "--initial-advertise-peer-urls", m.peerURL,
		"--initial-cluster", m.initial, "--initial-cluster-state", "new",
		"--initial-cluster-token", "soak", "--log-level", "warn")
	m.cmd.Stdout, m.cmd.Stderr = f, f
	// Killed with the test process should it die; the member is stopped by
	// PID otherwise.
	m.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := m.cmd.Start(); err != nil {
		f.Close()
		m.t.Fatalf("start etcd %s: %v", m.name, err)
	}
	m.exited = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) {
		_ = cmd.Wait()
		f.Close()
		close(done)
	}(m.cmd, m.exited)
}

// kill SIGKILLs the member if it runs and waits for its exit.
func (m *etcdMember) kill() {
	if m.cmd == nil {
		return
	}
	select {
	case <-m.exited:
	default:
		_ = m.cmd.Process.Signal(syscall.SIGKILL)
		<-m.exited
	}
}

// running reports whether the member's process is alive.
func (m *etcdMember) running() bool {
	if m.cmd == nil {
		return false
	}
	select {
	case <-m.exited:
		return false
	default:
		return true
	}
}

// endpoints is every member's client URL.
func (c *etcdCluster) endpoints() []string {
	var out []string
	for _, m := range c.members {
		out = append(out, m.clientURL)
	}
	return out
}

// status asks one member whether it is the leader and which member it
// follows.
func (m *etcdMember) status() (isLeader bool, leader uint64, err error) {
	cl, err := clientv3.New(clientv3.Config{Endpoints: []string{m.clientURL}, DialTimeout: time.Second, Logger: zap.NewNop()})
	if err != nil {
		return false, 0, err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	s, err := cl.Status(ctx, m.clientURL)
	if err != nil {
		return false, 0, err
	}
	return s.Leader != 0 && s.Leader == s.Header.MemberId, s.Leader, nil
}

// leader returns the running member that says it is the leader, or nil.
func (c *etcdCluster) leader() *etcdMember {
	for _, m := range c.members {
		if !m.running() {
			continue
		}
		if ok, _, err := m.status(); err == nil && ok {
			return m
		}
	}
	return nil
}

// waitLeader waits until a running member is the leader and every running
// member follows one, and returns the leader.
func (c *etcdCluster) waitLeader(timeout time.Duration) *etcdMember {
	c.t.Helper()
	var l *etcdMember
	if !testutil.Poll(timeout, func() bool {
		l = c.leader()
		if l == nil {
			return false
		}
		for _, m := range c.members {
			if !m.running() {
				continue
			}
			if _, leader, err := m.status(); err != nil || leader == 0 {
				return false
			}
		}
		return true
	}) {
		var logs []string
		for _, m := range c.members {
			b, _ := os.ReadFile(m.logFile)
			logs = append(logs, fmt.Sprintf("--- %s (running %v):\n%s", m.name, m.running(), lastLines(string(b), 20)))
		}
		c.t.Fatalf("etcd cluster has no leader after %s\n%s", timeout, strings.Join(logs, "\n"))
	}
	return l
}

// lastLines is the last n lines of s.
func lastLines(s string, n int) string {
	ls := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(ls[max(0, len(ls)-n):], "\n")
}

// dump is the cluster's claims, member records and shares under
// /berth/<cluster>/ (one line each: key, value, lease and its remaining
// TTL in seconds, create and mod revisions), for a failure message: who
// holds what, on which lease, and whether that lease lives.
func (c *etcdCluster) dump(cluster string) string {
	cl, err := clientv3.New(clientv3.Config{Endpoints: c.endpoints(), DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return fmt.Sprintf("store dump: %v", err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	prefix := "/berth/" + cluster + "/"
	resp, err := cl.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return fmt.Sprintf("store dump of %s: %v", prefix, err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "--- store under %s at revision %d:\n", prefix, resp.Header.Revision)
	for _, kv := range resp.Kvs {
		k := strings.TrimPrefix(string(kv.Key), prefix)
		if !strings.HasPrefix(k, "claims/") && !strings.HasPrefix(k, "members/") && !strings.HasPrefix(k, "pub/") {
			continue
		}
		v := string(kv.Value)
		if len(v) > 300 {
			v = v[:300] + "…"
		}
		ttl := "-"
		if kv.Lease != 0 {
			if r, err := cl.TimeToLive(ctx, clientv3.LeaseID(kv.Lease)); err != nil {
				ttl = err.Error()
			} else {
				ttl = fmt.Sprint(r.TTL)
			}
		}
		fmt.Fprintf(&b, "%s = %q lease %x (ttl %s) create %d mod %d\n", k, v, kv.Lease, ttl, kv.CreateRevision, kv.ModRevision)
	}
	return b.String()
}
