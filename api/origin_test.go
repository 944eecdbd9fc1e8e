package api

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"

	"golang.org/x/time/rate"
)

// syncBuffer is a bytes.Buffer safe for a logger and a test together.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A write a browser sends for a page of another origin is refused with a
// JSON 403 and a log line; a request for a host name the agent does not
// answer to (DNS rebinding) with a JSON 421, reads included. Requests
// without Origin or Sec-Fetch-Site (the CLI, curl, Prometheus), for an IP
// address, localhost, this host's name or an allowed name pass.
func TestOriginAndHostGuards(t *testing.T) {
	b := newSecBackend("a", secretWorkload())
	var logBuf syncBuffer
	srv := httptest.NewServer(nil)
	defer srv.Close()
	port := srv.Listener.Addr().String()[strings.LastIndexByte(srv.Listener.Addr().String(), ':'):]
	srv.Config.Handler = Handler(b, Options{Listen: srv.Listener.Addr().String(), AllowedHosts: []string{"127.0.0.1" + port, "berth-a.example.net"},
		Log: slog.New(slog.NewTextHandler(&logBuf, nil))})

	do := func(method, path, host string, hdr map[string]string) (int, Error) {
		t.Helper()
		req, err := http.NewRequest(method, srv.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if host != "" {
			req.Host = host
		}
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		var e Error
		if resp.StatusCode/100 != 2 {
			if err := json.Unmarshal(body, &e); err != nil || e.Code != resp.StatusCode {
				t.Errorf("%s %s (Host %s): %d %q is not a JSON Error", method, path, host, resp.StatusCode, body)
			}
		}
		return resp.StatusCode, e
	}
	writes := func() int {
		b.mu.Lock()
		defer b.mu.Unlock()
		return len(b.writes)
	}

	// Cross-origin writes: 403, nothing written, a log line each.
	for _, hdr := range []map[string]string{
		{"Origin": "http://evil.example"},
		{"Sec-Fetch-Site": "cross-site"},
		{"Sec-Fetch-Site": "same-site", "Origin": "http://sub.127.0.0.1.nip.io"},
	} {
		if code, e := do(http.MethodPut, "/connectors/orders/pause", "", hdr); code != http.StatusForbidden || !strings.Contains(e.Message, "cross-origin") {
			t.Errorf("PUT pause with %v: %d %q, want 403 cross-origin", hdr, code, e.Message)
		}
	}
	if n := writes(); n != 0 {
		t.Errorf("%d writes taken from cross-origin requests, want 0", n)
	}
	// Logged, at most once per refusalEvery however many arrive.
	if n := strings.Count(logBuf.String(), "refused a cross-origin write"); n != 1 {
		t.Errorf("%d log lines of 3 refused cross-origin writes within %s, want 1:\n%s", n, refusalEvery, logBuf.String())
	}
	// A read from another origin is the browser's to hide (CORS): served.
	if code, _ := do(http.MethodGet, "/v1/jobs", "", map[string]string{"Origin": "http://evil.example"}); code != http.StatusOK {
		t.Errorf("GET /v1/jobs with a foreign Origin: %d, want 200", code)
	}

	// Foreign host names: 421 for reads and writes, logged at most once
	// per refusalEvery.
	for _, m := range []string{http.MethodGet, http.MethodPut} {
		path := "/v1/jobs"
		if m == http.MethodPut {
			path = "/connectors/orders/pause"
		}
		if code, e := do(m, path, "rebind.example"+port, nil); code != http.StatusMisdirectedRequest || !strings.Contains(e.Message, "allowed_hosts") {
			t.Errorf("%s %s with Host rebind.example%s: %d %q, want 421 naming allowed_hosts", m, path, port, code, e.Message)
		}
	}
	if n := writes(); n != 0 {
		t.Errorf("%d writes taken for a foreign Host, want 0", n)
	}
	if n := strings.Count(logBuf.String(), "does not answer to"); n != 1 {
		t.Errorf("%d log lines of 2 refused hosts within %s, want 1:\n%s", n, refusalEvery, logBuf.String())
	}

	// What works as before: no Origin (the CLI, curl), an IP address,
	// localhost, this host's name, an allowed name, the same origin.
	hostname, _ := os.Hostname()
	for _, host := range []string{"", "localhost" + port, "LOCALHOST" + port, "[::1]" + port, "10.1.2.3:9750", hostname + port,
		"berth-a.example.net", "Berth-A.example.net.:8080"} {
		if code, e := do(http.MethodGet, "/v1/jobs", host, nil); code != http.StatusOK {
			t.Errorf("GET /v1/jobs with Host %q: %d %q, want 200", host, code, e.Message)
		}
	}
	before := writes()
	if code, e := do(http.MethodPut, "/connectors/orders/pause", "", nil); code != http.StatusAccepted {
		t.Errorf("PUT pause without Origin: %d %q, want 202", code, e.Message)
	}
	if code, e := do(http.MethodPut, "/connectors/orders/pause", "", map[string]string{"Origin": srv.URL, "Sec-Fetch-Site": "same-origin"}); code != http.StatusAccepted {
		t.Errorf("PUT pause from the agent's own page: %d %q, want 202", code, e.Message)
	}
	if n := writes() - before; n != 2 {
		t.Errorf("%d writes taken, want 2", n)
	}
}

// "*" in allowed_hosts answers every host name, as etcd's
// --host-whitelist "*"; listen's host name is answered; on 0.0.0.0 every
// address is.
func TestAllowedHostsAny(t *testing.T) {
	g := newHostGuard("127.0.0.1:9750", []string{"*"})
	if !g.allows("rebind.example:9750") {
		t.Error(`allowed_hosts ["*"] refused rebind.example`)
	}
	g = newHostGuard("agent-7.internal:9750", nil)
	for host, want := range map[string]bool{"agent-7.internal:9750": true, "agent-7.internal": true, "rebind.example:9750": false,
		"[fe80::1%25eth0]:9750": true, "127.0.0.1": true, "": true} {
		if got := g.allows(host); got != want {
			t.Errorf("listen agent-7.internal:9750: allows(%q) = %v, want %v", host, got, want)
		}
	}
	// Listening on every interface: peers and clients that name the
	// agent by an address (its member record, the CLI at 0.0.0.0) or
	// by this host's name pass; another name must be listed.
	hostname, _ := os.Hostname()
	g = newHostGuard("0.0.0.0:9750", nil)
	for host, want := range map[string]bool{"0.0.0.0:9750": true, "192.0.2.10:9750": true, "[2001:db8::1]:9750": true,
		hostname + ":9750": true, "localhost:9750": true, "scrape-alias.example:9750": false} {
		if got := g.allows(host); got != want {
			t.Errorf("listen 0.0.0.0:9750: allows(%q) = %v, want %v", host, got, want)
		}
	}
}

// A refusal logged after a quiet spell says how many were refused without
// a line since the last one.
func TestRefusalLogCountsTheSuppressed(t *testing.T) {
	var buf syncBuffer
	l := newRefusalLog(slog.New(slog.NewTextHandler(&buf, nil)))
	for range 50 {
		l.warn("refused")
	}
	if n := strings.Count(buf.String(), "refused"); n != 1 {
		t.Fatalf("%d lines for 50 refusals at once, want 1:\n%s", n, buf.String())
	}
	l.sometimes = rate.Sometimes{First: 1} // as after refusalEvery
	l.warn("refused")
	if !strings.Contains(buf.String(), "refused_without_a_line_since=49") {
		t.Errorf("the next line does not count the 49 refused without a line:\n%s", buf.String())
	}
}
