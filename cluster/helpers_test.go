package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berthd/berth/config"

	"github.com/BurntSushi/toml"
	"github.com/berthd/berth/assign"
)

// shared is one embedded etcd for the tests that do not stop their server;
// every test works under its own cluster name, so they do not interfere.
// It starts at the first Endpoints call, inside m.Run: started before it,
// etcd's serving goroutines read os.Stderr while the testing package swaps
// it (a data race the race detector reports outside any test).
var shared = &sharedEtcd{}

type sharedEtcd struct {
	once sync.Once
	dir  string
	e    *Embedded
	err  error
}

// Endpoints starts the shared server once and returns its client URLs; it
// panics when the server cannot start (every test that needs it fails).
func (s *sharedEtcd) Endpoints() []string {
	s.once.Do(func() {
		if s.dir, s.err = os.MkdirTemp("", "berth-cluster-test-"); s.err != nil {
			return
		}
		s.e, s.err = StartEmbedded(s.dir)
	})
	if s.err != nil {
		panic(fmt.Sprintf("start the shared embedded etcd: %v", s.err))
	}
	return s.e.Endpoints()
}

// Close stops the shared server if it was started and removes its data.
func (s *sharedEtcd) Close() {
	if s.e != nil {
		s.e.Close()
	}
	if s.dir != "" {
		os.RemoveAll(s.dir)
	}
}

func TestMain(m *testing.M) {
	code := m.Run()
	shared.Close()
	os.Exit(code)
}

// testTTL is the session TTL in tests (the brief: 2–3 s).
const testTTL = 2 * time.Second

// uniqueName is a cluster name unique to this test run.
func uniqueName(t testing.TB) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	n := strings.NewReplacer("/", "-", " ", "-").Replace(t.Name())
	return n + "-" + hex.EncodeToString(b)
}

// connect returns a client of cluster name at endpoints, closed by Cleanup.
func connect(t testing.TB, endpoints []string, name string, mod func(*Config)) *Client {
	t.Helper()
	cfg := Config{Name: name, Endpoints: endpoints, SessionTTL: testTTL, Validate: testValidator}
	if mod != nil {
		mod(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Connect(ctx, cfg)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// join makes a member of id, closed by Cleanup.
func join(t testing.TB, c *Client, m assign.Member) *Session {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if m.Protocol == "" {
		m.Protocol = config.ProtocolStatic
	}
	s, err := c.Join(ctx, m, "127.0.0.1:9750")
	if err != nil {
		t.Fatalf("join as %s: %v", m.ID, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// eventually polls cond every 20 ms until it is true or timeout passes.
func eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// testConnector is the TOML a test connector body holds.
type testConnector struct {
	Tasks int    `toml:"tasks"`
	Run   bool   `toml:"run"`
	Group string `toml:"group"`
}

// testValidator stands in for the limits package: a body is TOML with only
// the keys tasks, run, group; anything else is refused.
func testValidator(kind, name string, body []byte) (assign.Connector, error) {
	var tc testConnector
	md, err := toml.Decode(string(body), &tc)
	if err != nil {
		return assign.Connector{}, fmt.Errorf("parse %s %s: %w", kind, name, err)
	}
	if u := md.Undecoded(); len(u) > 0 {
		return assign.Connector{}, fmt.Errorf("%s %s: unknown key %s", kind, name, u[0])
	}
	if kind == KindGroup {
		return assign.Connector{}, nil
	}
	if tc.Tasks < 0 {
		return assign.Connector{}, errors.New("tasks < 0")
	}
	return assign.Connector{Name: name, Run: tc.Run, Tasks: tc.Tasks, Group: tc.Group}, nil
}

// proxy forwards TCP to an etcd server until Partition, after which it
// blackholes: existing connections are cut and new ones are accepted but
// never answered, as a network partition looks to a client.
type proxy struct {
	ln       net.Listener
	upstream string
	mu       sync.Mutex
	cut      bool
	refuse   bool // close new connections at once (a refused connect)
	conns    []net.Conn
}

func startProxy(t testing.TB, upstreamURL string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, upstream: strings.TrimPrefix(upstreamURL, "http://")}
	go p.serve()
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
	})
	return p
}

func (p *proxy) URL() string { return "http://" + p.ln.Addr().String() }

func (p *proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		p.conns = append(p.conns, c)
		cut, refuse := p.cut, p.refuse
		p.mu.Unlock()
		if refuse {
			c.Close()
			continue
		}
		if cut {
			continue // held open, never answered
		}
		u, err := net.Dial("tcp", p.upstream)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, u)
		p.mu.Unlock()
		go func() { _, _ = io.Copy(u, c); u.Close() }()
		go func() { _, _ = io.Copy(c, u); c.Close() }()
	}
}

// Partition cuts every forwarded connection and blackholes new ones.
func (p *proxy) Partition() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// Refuse cuts every forwarded connection and closes new ones at once, as a
// host whose etcd port refuses connections; Heal forwards again.
func (p *proxy) Refuse() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refuse = true
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// Heal forwards new connections again after Refuse.
func (p *proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refuse = false
}
