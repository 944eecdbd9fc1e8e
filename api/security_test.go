package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berthd/berth/host"
	"github.com/berthd/berth/internal/testutil"
	"github.com/berthd/berth/spec"
	"github.com/berthd/berth/worker"
	"golang.org/x/crypto/bcrypt"
)

// secBackend is a Backend over fixed data, for the handler's own logic.
type secBackend struct {
	Backend // nil: the methods these tests do not call
	mu      sync.Mutex
	writes  []string // SetTarget calls: "connector state by who"
	wl      *spec.Workload
	jobs    []Job
	self    string
	owners  map[string]string
	members []Member
	auth    spec.APIClient
	target  spec.TargetState // every connector's; "" is running
}

func (b *secBackend) Jobs() []Job { return b.jobs }
func (b *secBackend) Job(id string) (Job, bool) {
	for _, j := range b.jobs {
		if j.ID == id {
			return j, true
		}
	}
	return Job{}, false
}
func (b *secBackend) AgentInfo() Agent                          { return Agent{ID: b.self, State: "member"} }
func (b *secBackend) Reconciled() bool                          { return true }
func (b *secBackend) Healthy() bool                             { return true }
func (b *secBackend) Members(context.Context) ([]Member, error) { return b.members, nil }
func (b *secBackend) Assignment(context.Context) (Assignment, error) {
	a := Assignment{Members: map[string][]string{}}
	for job, m := range b.owners {
		a.Members[m] = append(a.Members[m], job)
	}
	return a, nil
}
func (b *secBackend) Workload(context.Context) (*spec.Workload, error) { return b.wl, nil }
func (b *secBackend) Groups() []Group                                  { return nil }
func (b *secBackend) Target(string) spec.TargetState {
	if b.target == "" {
		return spec.TargetRunning
	}
	return b.target
}
func (b *secBackend) SetTarget(_ context.Context, c string, st spec.TargetState, by string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.writes = append(b.writes, c+" "+string(st)+" by "+by)
	return nil
}
func (b *secBackend) PeerClient(addr string) (*Client, error) {
	return NewClientFor(addr, b.auth, false)
}
func (b *secBackend) member(id, addr string) *secBackend {
	b.members = append(b.members, Member{ID: id, Addr: addr})
	return b
}
func (b *secBackend) owns(job, member string) *secBackend { b.owners[job] = member; return b }
func newSecBackend(self string, wl *spec.Workload, jobs ...Job) *secBackend {
	return &secBackend{wl: wl, jobs: jobs, self: self, owners: map[string]string{}}
}

// secretWorkload is one connector whose run and task processes carry
// environment values and an env_file.
func secretWorkload() *spec.Workload {
	return &spec.Workload{Connectors: []spec.Connector{{
		Name: "orders", Tasks: 1,
		Run: &spec.Process{Command: []string{"/bin/run"}, Env: map[string]string{"DB_PASSWORD": "hunter2"}, Restart: spec.RestartAlways},
		Task: &spec.Process{Command: []string{"/bin/task"}, Env: map[string]string{"TOKEN": "s3cr3t", "EMPTY": ""},
			EnvFile: "/etc/berth/orders.env", Restart: spec.RestartOnFailure},
	}}}
}

// No environment value is served: GET /connectors/{name} names each
// variable with the value "[hidden]" and shows the env_file's path.
func TestConnectorViewHidesEnvironmentValues(t *testing.T) {
	h := Handler(newSecBackend("a", secretWorkload()), Options{})
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	base := "http://" + ln.Addr().String()

	ci, err := NewClient(base).Connector(context.Background(), "orders")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"run.env.DB_PASSWORD": Hidden, "task.env.TOKEN": Hidden, "task.env.EMPTY": Hidden,
		"task.env_file": "/etc/berth/orders.env"}
	for k, v := range want {
		if ci.Config[k] != v {
			t.Errorf("config[%q] = %q, want %q", k, ci.Config[k], v)
		}
	}
	// Whatever the path, no value appears anywhere in any answer.
	for _, path := range []string{"/connectors/orders", "/connectors/orders/status", "/connectors", "/v1/jobs"} {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, secret := range []string{"hunter2", "s3cr3t"} {
			if strings.Contains(string(body), secret) {
				t.Errorf("GET %s serves the value %q:\n%s", path, secret, body)
			}
		}
	}
}

// secured is an API listener with TLS and authentication from a web
// configuration file, and the material its clients use.
type secured struct {
	addr     string
	web      string // the web configuration file
	ca       *testutil.CA
	cert     string // a client certificate signed by ca, and its key
	key      string
	password string // of basic-auth user "prometheus"
}

// serveSecured serves h on loopback with the web configuration built from
// tlsServer (the tls_server_config block, "" for none) and a bcrypt-hashed
// user "prometheus".
func serveSecured(t *testing.T, h http.Handler, clientAuth string, users bool) *secured {
	t.Helper()
	return serveSecuredWith(t, func(string) http.Handler { return h }, clientAuth, users)
}

// serveSecuredWith is serveSecured with the handler made from the web
// configuration file's path.
func serveSecuredWith(t *testing.T, handler func(web string) http.Handler, clientAuth string, users bool) *secured {
	t.Helper()
	s := &secured{ca: testutil.NewCA(t, "berth-test"), password: "scrape-" + t.Name()}
	srvCert, srvKey := s.ca.Issue("agent", "127.0.0.1")
	s.cert, s.key = s.ca.Issue("client")
	cfg := fmt.Sprintf("tls_server_config:\n  cert_file: %s\n  key_file: %s\n", srvCert, srvKey)
	if clientAuth != "" {
		cfg += fmt.Sprintf("  client_auth_type: %s\n  client_ca_file: %s\n", clientAuth, s.ca.File)
	}
	if users {
		hash, err := bcrypt.GenerateFromPassword([]byte(s.password), bcrypt.MinCost)
		if err != nil {
			t.Fatal(err)
		}
		cfg += fmt.Sprintf("basic_auth_users:\n  prometheus: %s\n", hash)
	}
	s.web = filepath.Join(t.TempDir(), "web.yml")
	if err := os.WriteFile(s.web, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	if tlsOn, err := CheckWebConfig(s.web); err != nil || !tlsOn {
		t.Fatalf("CheckWebConfig = %v, %v; want true, nil", tlsOn, err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.addr = ln.Addr().String()
	srv := NewServer(ln, handler(s.web), ServerOptions{WebConfigFile: s.web, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	served := make(chan error, 1)
	go func() { served <- srv.Serve() }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
	})
	return s
}

// TLS with basic auth: a request without credentials, or with a wrong
// password, gets 401; the client of [agent.client] gets in.
func TestServeBasicAuthOverTLS(t *testing.T) {
	s := serveSecured(t, Handler(newSecBackend("a", &spec.Workload{}), Options{}), "", true)
	ctx := context.Background()

	// Plain HTTP to a TLS listener is refused by the TLS layer.
	if _, err := NewClient(s.addr).Jobs(ctx); err == nil {
		t.Error("plain http to the TLS listener answered")
	}
	noAuth, err := NewClientFor(s.addr, spec.APIClient{TLS: spec.TLS{CA: s.ca.File}}, true)
	if err != nil {
		t.Fatal(err)
	}
	var e *Error
	if _, err := noAuth.Jobs(ctx); !errors.As(err, &e) || e.Code != http.StatusUnauthorized {
		t.Errorf("without credentials: %v, want HTTP 401", err)
	}
	wrong, err := NewClientFor(s.addr, spec.APIClient{TLS: spec.TLS{CA: s.ca.File}, Username: "prometheus", Password: "nope"}, true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wrong.Jobs(ctx); !errors.As(err, &e) || e.Code != http.StatusUnauthorized {
		t.Errorf("wrong password: %v, want HTTP 401", err)
	}
	// The server certificate is checked: no CA, no connection.
	untrusting, err := NewClientFor(s.addr, spec.APIClient{Username: "prometheus", Password: s.password}, true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := untrusting.Jobs(ctx); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("without the CA: %v, want a certificate error", err)
	}
	// The password from a file only root can read.
	pwFile := filepath.Join(t.TempDir(), "password")
	if err := os.WriteFile(pwFile, []byte(s.password+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	good, err := NewClientFor(s.addr, spec.APIClient{TLS: spec.TLS{CA: s.ca.File}, Username: "prometheus", PasswordFile: pwFile}, true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := good.Jobs(ctx); err != nil {
		t.Errorf("with credentials: %v", err)
	}
	if err := os.Chmod(pwFile, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := NewClientFor(s.addr, spec.APIClient{Username: "prometheus", PasswordFile: pwFile}, true); !errors.Is(err, host.ErrSecretFileMode) {
		t.Errorf("password file readable by others: %v, want ErrSecretFileMode", err)
	}
}

// Client certificates: with RequireAndVerifyClientCert a client without
// one fails the handshake; with its certificate it gets in.
func TestServeClientCertificates(t *testing.T) {
	s := serveSecured(t, Handler(newSecBackend("a", &spec.Workload{}), Options{}), "RequireAndVerifyClientCert", false)
	ctx := context.Background()
	noCert, err := NewClientFor(s.addr, spec.APIClient{TLS: spec.TLS{CA: s.ca.File}}, true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := noCert.Jobs(ctx); err == nil {
		t.Error("a client without a certificate got an answer")
	}
	withCert, err := NewClientFor(s.addr, spec.APIClient{TLS: spec.TLS{CA: s.ca.File, Cert: s.cert, Key: s.key}}, true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := withCert.Jobs(ctx); err != nil {
		t.Errorf("with a client certificate: %v", err)
	}
	// A certificate from another CA is refused.
	other := testutil.NewCA(t, "other")
	oc, ok := other.Issue("intruder")
	foreign, err := NewClientFor(s.addr, spec.APIClient{TLS: spec.TLS{CA: s.ca.File, Cert: oc, Key: ok}}, true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := foreign.Jobs(ctx); err == nil {
		t.Error("a certificate of another CA got an answer")
	}
}

// Authenticated says what the listener proved: a verified client
// certificate, or basic auth while users are configured.
func TestAuthenticated(t *testing.T) {
	var got []bool
	seen := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, Authenticated(r, r.Header.Get("X-Web-Config")))
	})
	ctx := context.Background()
	call := func(s *secured, auth spec.APIClient) {
		t.Helper()
		c, err := NewClientFor(s.addr, auth, true)
		if err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.Base+"/", nil)
		req.Header.Set("X-Web-Config", s.web)
		resp, err := c.HTTP.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	users := serveSecured(t, seen, "VerifyClientCertIfGiven", true)
	call(users, spec.APIClient{TLS: spec.TLS{CA: users.ca.File}, Username: "prometheus", Password: users.password})
	certs := serveSecured(t, seen, "VerifyClientCertIfGiven", false)
	call(certs, spec.APIClient{TLS: spec.TLS{CA: certs.ca.File, Cert: certs.cert, Key: certs.key}})
	call(certs, spec.APIClient{TLS: spec.TLS{CA: certs.ca.File}})
	// Basic auth the listener does not check proves nothing.
	call(certs, spec.APIClient{TLS: spec.TLS{CA: certs.ca.File}, Username: "anyone", Password: "x"})
	want := []bool{true, true, false, false}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Authenticated = %v, want %v", got, want)
	}
	plain := httptestRequest(t)
	if Authenticated(plain, "") {
		t.Error("a plain request without a web configuration is authenticated")
	}
}

func httptestRequest(t *testing.T) *http.Request {
	r, err := http.NewRequest(http.MethodGet, "http://127.0.0.1/", nil)
	if err != nil {
		t.Fatal(err)
	}
	r.SetBasicAuth("u", "p")
	return r
}

// The Connect status view asks the agents that run a connector's jobs for
// their states over TLS with the [agent.client] credentials: a peer that
// demands a client certificate and basic auth answers.
func TestConnectStatusAsksSecuredPeers(t *testing.T) {
	wl := secretWorkload()
	peerJobs := []Job{{ID: "orders-0", Connector: "orders", Kind: "task", State: worker.Running, PID: 42}}
	peer := serveSecured(t, Handler(newSecBackend("b", wl, peerJobs...), Options{}), "RequireAndVerifyClientCert", true)

	self := newSecBackend("a", wl, Job{ID: "orders", Connector: "orders", Kind: "connector", State: worker.Running, PID: 7}).
		member("b", "https://"+peer.addr).owns("orders", "a").owns("orders-0", "b")
	self.auth = spec.APIClient{TLS: spec.TLS{CA: peer.ca.File, Cert: peer.cert, Key: peer.key},
		Username: "prometheus", Password: peer.password}
	v, err := readView(context.Background(), self)
	if err != nil {
		t.Fatal(err)
	}
	st := connectorStatus(self, wl.Connectors[0], v.withStates(context.Background(), self, false))
	if len(st.Tasks) != 1 || st.Tasks[0].State != "RUNNING" || st.Tasks[0].WorkerID != "b" {
		b, _ := json.Marshal(st)
		t.Errorf("status %s: want task 0 RUNNING on b", b)
	}
	// Without the credentials the peer's state is unknown, and says so.
	self.auth = spec.APIClient{TLS: spec.TLS{CA: peer.ca.File}}
	st = connectorStatus(self, wl.Connectors[0], v.withStates(context.Background(), self, false))
	if len(st.Tasks) != 1 || st.Tasks[0].State != "UNASSIGNED" || !strings.Contains(st.Tasks[0].Trace, "did not answer") {
		b, _ := json.Marshal(st)
		t.Errorf("status %s: want task 0 UNASSIGNED, b did not answer", b)
	}
	// A paused connector's task is PAUSED whether or not its owner answers
	// (the target state holds on every host; a fenced owner runs nothing).
	self.target = spec.TargetPaused
	st = connectorStatus(self, wl.Connectors[0], v.withStates(context.Background(), self, false))
	if len(st.Tasks) != 1 || st.Tasks[0].State != "PAUSED" || st.Tasks[0].WorkerID != "b" {
		b, _ := json.Marshal(st)
		t.Errorf("status %s: want task 0 PAUSED on b although b did not answer", b)
	}
}

// Off loopback, a write (pause) is allowed only to a request the listener
// authenticated: basic auth checked against basic_auth_users, or a client
// certificate verified against the client CA; over TLS without either it
// gets 403. The log line names who asked.
func TestWritesNeedAuthenticationOffLoopback(t *testing.T) {
	put := func(s *secured, auth spec.APIClient) (int, string) {
		t.Helper()
		c, err := NewClientFor(s.addr, auth, true)
		if err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequest(http.MethodPut, c.Base+"/connectors/orders/pause", nil)
		resp, err := c.HTTP.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	serve := func(b *secBackend, clientAuth string, users bool) *secured {
		return serveSecuredWith(t, func(web string) http.Handler {
			return Handler(b, Options{Listen: "0.0.0.0:9750", WebConfigFile: web})
		}, clientAuth, users)
	}

	// Client certificates only (optional ones): with a verified one the
	// write is taken; without, 403 naming what to configure.
	certs := newSecBackend("a", secretWorkload())
	sc := serve(certs, "VerifyClientCertIfGiven", false)
	if code, body := put(sc, spec.APIClient{TLS: spec.TLS{CA: sc.ca.File}}); code != http.StatusForbidden || !strings.Contains(body, "web_config_file") {
		t.Errorf("a write without credentials: %d %s, want 403 naming web_config_file", code, body)
	}
	if code, body := put(sc, spec.APIClient{TLS: spec.TLS{CA: sc.ca.File}, Username: "anyone", Password: "unchecked"}); code != http.StatusForbidden {
		t.Errorf("a write with basic auth nobody checks: %d %s, want 403", code, body)
	}
	if code, body := put(sc, spec.APIClient{TLS: spec.TLS{CA: sc.ca.File, Cert: sc.cert, Key: sc.key}}); code != http.StatusAccepted {
		t.Errorf("a write with a verified client certificate: %d %s, want 202", code, body)
	}

	// Basic auth: the listener answers 401 to a wrong password before the
	// API sees it; the right one gets the write.
	users := newSecBackend("a", secretWorkload())
	su := serve(users, "", true)
	if code, _ := put(su, spec.APIClient{TLS: spec.TLS{CA: su.ca.File}, Username: "prometheus", Password: "wrong"}); code != http.StatusUnauthorized {
		t.Errorf("a write with a wrong password: %d, want 401", code)
	}
	if code, body := put(su, spec.APIClient{TLS: spec.TLS{CA: su.ca.File}, Username: "prometheus", Password: su.password}); code != http.StatusAccepted {
		t.Errorf("a write with basic auth: %d %s, want 202", code, body)
	}

	for _, c := range []struct {
		b    *secBackend
		want string
	}{{certs, " as certificate CN=client "}, {users, " as user prometheus "}} {
		c.b.mu.Lock()
		writes := c.b.writes
		c.b.mu.Unlock()
		if len(writes) != 1 || !strings.HasPrefix(writes[0], "orders paused by api ") || !strings.Contains(writes[0], c.want) {
			t.Errorf("writes %q, want one pause by an api client%s", writes, c.want)
		}
	}
}
