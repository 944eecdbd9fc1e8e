package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berthd/berth/cluster/embedetcd"
	"github.com/berthd/berth/spec"
	"go.uber.org/goleak"

	"github.com/BurntSushi/toml"
	"github.com/berthd/berth/assign"
	"github.com/berthd/berth/internal/testutil"
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
	e    *embedetcd.Server
	err  error
}

// Endpoints starts the shared server once and returns its client URLs; it
// panics when the server cannot start (every test that needs it fails).
func (s *sharedEtcd) Endpoints() []string {
	s.once.Do(func() {
		if s.dir, s.err = os.MkdirTemp("", "berth-cluster-test-"); s.err != nil {
			return
		}
		s.e, s.err = embedetcd.Start(s.dir)
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

// TestMain runs the tests, stops the shared server, then fails the package
// if any goroutine is left: every session's renewal loop, watch and
// leader loop must have been waited for (goleak).
func TestMain(m *testing.M) {
	code := m.Run()
	shared.Close()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goroutines left after the tests:", err)
			code = 1
		}
	}
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
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Deadline(10*time.Second))
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
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Deadline(10*time.Second))
	defer cancel()
	if m.Protocol == "" {
		m.Protocol = spec.ProtocolStatic
	}
	s, err := c.Join(ctx, m, "127.0.0.1:9750")
	if err != nil {
		t.Fatalf("join as %s: %v", m.ID, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Deadline(30*time.Second))
	t.Cleanup(cancel)
	return ctx
}

// testConnector is the TOML a test connector body holds.
type testConnector struct {
	Tasks int    `toml:"tasks"`
	Run   bool   `toml:"run"`
	Group string `toml:"group"`
}

// testValidator stands in for the limits package: a body is TOML with only
// the keys tasks, run, group; anything else is refused.
func testValidator(kind spec.DefKind, name string, body []byte) (assign.Connector, error) {
	var tc testConnector
	md, err := toml.Decode(string(body), &tc)
	if err != nil {
		return assign.Connector{}, fmt.Errorf("parse %s %s: %w", kind, name, err)
	}
	if u := md.Undecoded(); len(u) > 0 {
		return assign.Connector{}, fmt.Errorf("%s %s: unknown key %s", kind, name, u[0])
	}
	if kind == spec.DefGroup {
		return assign.Connector{}, nil
	}
	if tc.Tasks < 0 {
		return assign.Connector{}, errors.New("tasks < 0")
	}
	return assign.Connector{Name: name, Run: tc.Run, Tasks: tc.Tasks, Group: tc.Group}, nil
}

// resumeAfterDeath ends s1 as the process of a killed agent ends (its
// renewals stop, nothing is revoked), closes its client old, and resumes
// its session as member m on a new client of cluster name with opt: the
// new client and session (closed at the test's end).
func resumeAfterDeath(t *testing.T, old *Client, s1 *Session, name string, m assign.Member, opt func(*Config)) (*Client, *Session) {
	t.Helper()
	lease := int64(s1.Lease())
	s1.end(errors.New("the agent process died"))
	<-s1.loop
	old.Close()
	next := connect(t, shared.Endpoints(), name, opt)
	s2, err := next.Resume(ctxT(t), m, "127.0.0.1:2222", lease)
	if err != nil {
		t.Fatalf("resume: %v", err)
	}
	t.Cleanup(func() { s2.Close() })
	return next, s2
}
