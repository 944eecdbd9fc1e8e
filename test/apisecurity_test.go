package test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berthd/berth/api"
	"github.com/berthd/berth/internal/testutil"
	"github.com/berthd/berth/spec"
	"golang.org/x/crypto/bcrypt"
)

// secureAPI is the TLS and credential material of agents whose API is
// secured by a web configuration file, made for one test: a CA, the
// agents' server certificate (127.0.0.1), a client certificate, and the
// basic-auth user "prometheus" whose password is in a file only root can
// read.
type secureAPI struct {
	ca           *testutil.CA
	web          string // the web configuration file
	cert, key    string // the client certificate and its key
	user         string
	password     string
	passwordFile string
}

// newSecureAPI writes a web configuration: TLS with the agents'
// certificate, client_auth_type clientAuth (client CA: the test's CA) and,
// with users, basic_auth_users with one bcrypt-hashed user.
func newSecureAPI(t *testing.T, clientAuth string, users bool) *secureAPI {
	t.Helper()
	dir := t.TempDir()
	s := &secureAPI{ca: testutil.NewCA(t, "berth-e2e"), user: "prometheus", password: "pw-" + randSuffix()}
	srvCert, srvKey := s.ca.Issue("agent", "127.0.0.1")
	s.cert, s.key = s.ca.Issue("client")
	hash, err := bcrypt.GenerateFromPassword([]byte(s.password), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	web := fmt.Sprintf(`tls_server_config:
  cert_file: %s
  key_file: %s
  client_auth_type: %s
  client_ca_file: %s
`, srvCert, srvKey, clientAuth, s.ca.File)
	if users {
		web += fmt.Sprintf("basic_auth_users:\n  %s: %s\n", s.user, hash)
	}
	s.web = filepath.Join(dir, "web.yml")
	s.passwordFile = filepath.Join(dir, "api-password")
	for f, body := range map[string]string{s.web: web, s.passwordFile: s.password + "\n"} {
		if err := os.WriteFile(f, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// agentKeys are the lines of an [agent] table that secure its API and give
// berth's own requests ([agent.client]) what they present; [agent.client]
// ends the [agent] table.
func (s *secureAPI) agentKeys() string {
	return fmt.Sprintf(`web_config_file = %q
  [agent.client]
  username = %q
  password_file = %q
  tls = { ca = %q, cert = %q, key = %q }
`, s.web, s.user, s.passwordFile, s.ca.File, s.cert, s.key)
}

// client is an HTTP client of the agents with the given material: the CA
// always, the client certificate when cert, basic auth when password is
// not "".
func (s *secureAPI) client(t *testing.T, cert bool, password string) *http.Client {
	t.Helper()
	auth := spec.APIClient{TLS: spec.TLS{CA: s.ca.File}}
	if cert {
		auth.TLS.Cert, auth.TLS.Key = s.cert, s.key
	}
	if password != "" {
		auth.Username, auth.Password = s.user, password
	}
	c, err := api.NewClientFor("127.0.0.1:1", auth, true)
	if err != nil {
		t.Fatal(err)
	}
	c.HTTP.Timeout = testutil.Deadline(3 * time.Second)
	return c.HTTP
}

// getWith decodes GET url through c into v (when not nil) and returns the
// status and the body.
func getWith(c *http.Client, url string, v any) (int, string, error) {
	resp, err := c.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, "", err
	}
	if v != nil && resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(b, v); err != nil {
			return resp.StatusCode, string(b), err
		}
	}
	return resp.StatusCode, string(b), nil
}

// An agent whose web_config_file asks for TLS, a client certificate and
// basic auth: a client without a certificate fails the TLS handshake, one
// without basic auth (or with a wrong password) gets 401, plain HTTP gets
// nothing; berth status works with the file's [agent.client]; a real
// Prometheus scrapes it with a scrape configuration's tls_config and
// basic_auth. No environment value of a job, from the file or from its
// env_file, is in any answer, though the job has them.
func TestAPISecurity(t *testing.T) {
	e := newEnv(t)
	s := newSecureAPI(t, "RequireAndVerifyClientCert", true)
	envFile := filepath.Join(e.dir, "vault.env")
	if err := os.WriteFile(envFile, []byte("API_TOKEN=from-env-file-"+randSuffix()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	secretInFile := "hunter2-" + randSuffix()
	e.write(e.header("2s") + s.agentKeys() + fmt.Sprintf(`
[static]
connectors = ["vault"]

[[connector]]
name = "vault"
  [connector.run]
  command = ["/bin/sh", "-c", "exec sleep infinity"]
  env = { DB_PASSWORD = %q }
  env_file = %q
`, secretInFile, envFile))
	good := s.client(t, true, s.password)
	base := "https://" + e.addr
	e.startWith(good, base)

	var jobs []api.Job
	testutil.Eventually(t, 20*time.Second, "vault running over TLS", func() bool {
		code, _, err := getWith(good, base+"/v1/jobs", &jobs)
		return err == nil && code == http.StatusOK && len(jobs) == 1 && jobs[0].State == "running" && jobs[0].PID > 0
	})

	// Who gets in, who does not.
	if _, _, err := getWith(s.client(t, false, s.password), base+"/v1/jobs", nil); err == nil {
		t.Error("a client without a certificate got an answer")
	}
	for _, pw := range []string{"", "wrong"} {
		code, _, err := getWith(s.client(t, true, pw), base+"/v1/jobs", nil)
		if err != nil || code != http.StatusUnauthorized {
			t.Errorf("basic auth password %q: %d, %v; want 401", pw, code, err)
		}
	}
	if code, _, err := getWith(&http.Client{Timeout: 3 * time.Second}, "http://"+e.addr+"/metrics", nil); err == nil && code == http.StatusOK {
		t.Error("plain http /metrics answered 200")
	}

	// The CLI: berth status with the file's [agent.client].
	out, err := exec.Command(berthBin, "status", "--config", e.config).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "vault") || !strings.Contains(string(out), "running") {
		t.Errorf("berth status: %v\n%s", err, out)
	}
	// Completion and berth top reach it the same way.
	if got := strings.Join(complete(t, e.config, "logs", ""), " "); got != "vault" {
		t.Errorf("berth logs <TAB> against the TLS agent: %q, want vault", got)
	}
	if out, err := exec.Command(berthBin, "top", "--config", e.config, "--batch", "-n", "1").CombinedOutput(); err != nil || !strings.Contains(string(out), "vault") {
		t.Errorf("berth top --batch: %v\n%s", err, out)
	}
	// berth reload asks the agent for its PID and the reload's result.
	if out, err := exec.Command(berthBin, "reload", "--config", e.config).CombinedOutput(); err != nil || !strings.Contains(string(out), "accepted") {
		t.Errorf("berth reload: %v\n%s", err, out)
	}
	// berth validate loads the web configuration as the agent does.
	if out, err := exec.Command(berthBin, "validate", "--config", e.config).CombinedOutput(); err != nil {
		t.Errorf("berth validate: %v\n%s", err, out)
	}
	badWeb := filepath.Join(e.dir, "bad-web.yml")
	if err := os.WriteFile(badWeb, []byte("basic_auth_users:\n  x: not-a-bcrypt-hash\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	badCfg := filepath.Join(e.dir, "bad.toml")
	if err := os.WriteFile(badCfg, []byte(e.header("2s")+fmt.Sprintf("web_config_file = %q\n", badWeb)), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err = exec.Command(berthBin, "validate", "--config", badCfg).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), "agent.web_config_file: on this host: web configuration "+badWeb) {
		t.Errorf("berth validate with a bad web configuration: %v\n%s", err, out)
	}
	// The agent refuses it before it touches any cgroup or the store.
	bad := newEnv(t)
	bad.write(bad.header("2s") + fmt.Sprintf("web_config_file = %q\n", badWeb))
	actx, acancel := context.WithTimeout(context.Background(), testutil.Deadline(30*time.Second))
	defer acancel()
	out, err = exec.CommandContext(actx, berthBin, "agent", "--config", bad.config).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "agent.web_config_file: on this host: web configuration "+badWeb) || strings.Contains(string(out), "cgroup hierarchy") {
		t.Errorf("berth agent with a bad web configuration: %v\n%s", err, out)
	}
	// Without the credentials, it says why.
	bare := filepath.Join(e.dir, "bare.toml")
	if err := os.WriteFile(bare, []byte(e.header("2s")+fmt.Sprintf("web_config_file = %q\n", s.web)), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(berthBin, "status", "--config", bare).CombinedOutput(); err == nil {
		t.Errorf("berth status without [agent.client] succeeded:\n%s", out)
	}

	// Environment values: the job has them, no answer serves them.
	pid := jobs[0].PID
	environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		t.Fatal(err)
	}
	fileBody, _ := os.ReadFile(envFile)
	fromFile := strings.TrimSpace(strings.TrimPrefix(string(fileBody), "API_TOKEN="))
	for _, v := range []string{"DB_PASSWORD=" + secretInFile, "API_TOKEN=" + fromFile} {
		if !strings.Contains(string(environ), v+"\x00") {
			t.Errorf("the job's environment lacks %s", v)
		}
	}
	var info api.ConnectorInfo
	if code, body, err := getWith(good, base+"/connectors/vault", &info); err != nil || code != http.StatusOK {
		t.Fatalf("GET /connectors/vault: %d %v %s", code, err, body)
	}
	if info.Config["run.env.DB_PASSWORD"] != api.Hidden || info.Config["run.env_file"] != envFile {
		t.Errorf("GET /connectors/vault config = %v, want run.env.DB_PASSWORD %s and run.env_file %s", info.Config, api.Hidden, envFile)
	}
	for _, path := range []string{"/", "/v1/jobs", "/v1/jobs/vault", "/connectors", "/connectors?expand=info", "/connectors?expand=status",
		"/connectors/vault", "/connectors/vault/config", "/connectors/vault/status", "/connectors/vault/tasks",
		"/v1/agent", "/v1/groups", "/v1/members", "/v1/assignment", "/metrics", "html /"} {
		c, html := good, false
		if p, ok := strings.CutPrefix(path, "html "); ok {
			// The status page, as a browser asks for it.
			path, c, html = p, &http.Client{Timeout: good.Timeout, Transport: acceptHTML{good.Transport}}, true
		}
		code, body, err := getWith(c, base+path, nil)
		if err != nil || code != http.StatusOK {
			t.Errorf("GET %s: %d %v", path, code, err)
			continue
		}
		if html && !strings.Contains(body, "<html") {
			t.Errorf("GET %s as a browser: not the status page:\n%.200s", path, body)
		}
		for _, secret := range []string{secretInFile, fromFile} {
			if strings.Contains(body, secret) {
				t.Errorf("GET %s serves an environment value", path)
			}
		}
	}

	// A real Prometheus, configured as for node_exporter behind the same
	// web configuration.
	prom := startPrometheus(t, needTool(t, "prometheus"), e.addr,
		"scheme: https",
		"tls_config:",
		"  ca_file: "+s.ca.File,
		"  cert_file: "+s.cert,
		"  key_file: "+s.key,
		"basic_auth:",
		"  username: "+s.user,
		"  password_file: "+s.passwordFile,
	)
	testutil.Eventually(t, 30*time.Second, "Prometheus scraping the agent over TLS with basic auth", func() bool {
		up, err := prom.query(`up{job="berth"} == 1`)
		if err != nil || len(up) != 1 {
			return false
		}
		jobUp, err := prom.query(`berth_job_up{job_id="vault"} == 1`)
		return err == nil && len(jobUp) == 1
	})
	var targets struct {
		Data struct {
			ActiveTargets []struct {
				ScrapeURL string `json:"scrapeUrl"`
				Health    string `json:"health"`
			} `json:"activeTargets"`
		} `json:"data"`
	}
	if err := prom.get("/api/v1/targets", nil, &targets); err != nil {
		t.Fatal(err)
	}
	if ts := targets.Data.ActiveTargets; len(ts) != 1 || !strings.HasPrefix(ts[0].ScrapeURL, "https://") || ts[0].Health != "up" {
		t.Errorf("Prometheus targets = %+v, want one https target up", ts)
	}
}

// Two agents whose APIs want TLS, a client certificate and basic auth:
// each one's Connect status view asks the other for the states of the jobs
// it runs, with its [agent.client], at the https address of its member
// record.
func TestPeerStatusOverTLS(t *testing.T) {
	endpoints := embeddedEtcd(t)
	s := newSecureAPI(t, "RequireAndVerifyClientCert", true)
	c := clusterSpec{name: clusterName(), endpoints: endpoints}
	a, b := newAgent(t, "a"), newAgent(t, "b")
	a.agentKeys, b.agentKeys = s.agentKeys(), s.agentKeys()
	a.configure(c, staticTable(nil, []string{"x-0"})+sleeperConnector("x", 2))
	b.configure(c, staticTable(nil, []string{"x-1"})+sleeperConnector("x", 2))
	hc := s.client(t, true, s.password)
	a.startWith(hc, "https://"+a.addr)
	b.startWith(hc, "https://"+b.addr)

	var st api.ConnectorStatus
	testutil.Eventually(t, settle, "a's status view shows x-0 on a and x-1 on b, both RUNNING", func() bool {
		code, _, err := getWith(hc, "https://"+a.addr+"/connectors/x/status", &st)
		return err == nil && code == http.StatusOK && len(st.Tasks) == 2 &&
			st.Tasks[0].State == "RUNNING" && st.Tasks[0].WorkerID == "a" &&
			st.Tasks[1].State == "RUNNING" && st.Tasks[1].WorkerID == "b"
	})
	var ms []api.Member
	if code, _, err := getWith(hc, "https://"+b.addr+"/v1/members", &ms); err != nil || code != http.StatusOK {
		t.Fatalf("GET /v1/members: %d %v", code, err)
	}
	for _, m := range ms {
		want := map[string]string{"a": "https://" + a.addr, "b": "https://" + b.addr}[m.ID]
		if m.Addr != want {
			t.Errorf("member %s addr %q, want %q", m.ID, m.Addr, want)
		}
	}
	// The CLI's store commands are unaffected; berth status reaches b.
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Deadline(30*time.Second))
	defer cancel()
	out, err := exec.CommandContext(ctx, berthBin, "status", "--config", b.config).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "x-1") {
		t.Errorf("berth status on b: %v\n%s", err, out)
	}
	var ee *exec.ExitError
	if out, err := exec.CommandContext(ctx, berthBin, "members", "--config", a.config).CombinedOutput(); errors.As(err, &ee) || !strings.Contains(string(out), "https://"+b.addr) {
		t.Errorf("berth members: %v\n%s", err, out)
	}
}

// Off loopback, the write endpoints answer an authenticated request: an
// agent on 0.0.0.0 whose web configuration verifies client certificates
// (VerifyClientCertIfGiven, no basic-auth users) refuses a pause without a
// certificate with 403, and carries out one with a certificate: the job
// stops and shows paused, with who asked; resume runs it again.
func TestWritesAuthenticatedOffLoopback(t *testing.T) {
	e := newEnv(t)
	port := e.addr[strings.LastIndexByte(e.addr, ':'):]
	e.addr = "0.0.0.0" + port
	s := newSecureAPI(t, "VerifyClientCertIfGiven", false)
	e.write(e.header("1s") + fmt.Sprintf("web_config_file = %q\n", s.web) + `
[static]

[[connector]]
name = "a"
  [connector.run]
  command = ["sleep", "infinity"]
`)
	withCert := s.client(t, true, "")
	base := "https://127.0.0.1" + port
	e.startWith(withCert, base)
	jobState := func() string {
		var js []api.Job
		if code, _, err := getWith(withCert, base+"/v1/jobs", &js); err != nil || code != http.StatusOK || len(js) != 1 {
			return ""
		}
		return string(js[0].State) + " " + js[0].Reason
	}
	testutil.Eventually(t, 20*time.Second, "a running", func() bool { return strings.HasPrefix(jobState(), "running") })
	put := func(c *http.Client, path string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPut, base+path, nil)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := put(s.client(t, false, ""), "/connectors/a/pause"); code != http.StatusForbidden {
		t.Errorf("pause without a certificate: %d %s, want 403", code, body)
	}
	if st := jobState(); !strings.HasPrefix(st, "running") {
		t.Errorf("a refused write changed the job: %s", st)
	}
	if code, body := put(withCert, "/connectors/a/pause"); code != http.StatusAccepted {
		t.Fatalf("pause with a certificate: %d %s, want 202", code, body)
	}
	testutil.Eventually(t, 20*time.Second, "a paused", func() bool { return strings.HasPrefix(jobState(), "paused") })
	if st := jobState(); !strings.Contains(st, "certificate CN=client") {
		t.Errorf("paused job %q does not say who asked (certificate CN=client)", st)
	}
	if code, body := put(withCert, "/connectors/a/resume"); code != http.StatusAccepted {
		t.Fatalf("resume with a certificate: %d %s, want 202", code, body)
	}
	testutil.Eventually(t, 20*time.Second, "a running again", func() bool { return strings.HasPrefix(jobState(), "running") })
}

// acceptHTML asks for HTML, as a browser does.
type acceptHTML struct{ rt http.RoundTripper }

func (a acceptHTML) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Accept", "text/html")
	return a.rt.RoundTrip(r)
}
