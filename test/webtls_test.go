package test

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berthd/berth/api"
	"github.com/berthd/berth/internal/testutil"
	"github.com/berthd/berth/spec"
)

// C28 (docs/cases.md): TLS switched in the web configuration while the
// agent runs (exporter-toolkit issue 443). The agent starts with a web
// configuration without TLS; tls_server_config is added: the agent serves
// https from its next connection, says so in its log, and berth status
// (which reads the file and switches to https) works; plain HTTP gets no
// answer. It is removed again: plain HTTP, and berth status, work. TLS
// with a certificate that does not exist: no connection is served, plain
// or not, the log has an ERROR, and berth status says why it cannot reach
// the agent.
func TestC28WebConfigTLSSwitchedAtRuntime(t *testing.T) {
	e := newEnv(t)
	ca := testutil.NewCA(t, "berth-e2e")
	cert, key := ca.Issue("agent", "127.0.0.1")
	web := filepath.Join(e.dir, "web.yml")
	writeWebConfig := func(body string) {
		t.Helper()
		if err := os.WriteFile(web, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	tlsOn := fmt.Sprintf("tls_server_config:\n  cert_file: %s\n  key_file: %s\n", cert, key)
	plainOnly := "http_server_config:\n  http2: false\n"
	writeWebConfig(plainOnly)
	e.write(strings.Replace(e.header("2s"), "[agent]\n", fmt.Sprintf("[agent]\nweb_config_file = %q\n", web), 1) +
		fmt.Sprintf("  [agent.client]\n  tls = { ca = %q }\n", ca.File))
	e.start()

	plain := &http.Client{Timeout: 5 * time.Second}
	secure, err := api.NewClientFor(e.addr, spec.APIClient{TLS: spec.TLS{CA: ca.File}}, true)
	if err != nil {
		t.Fatal(err)
	}
	secure.HTTP.Timeout = 5 * time.Second
	get := func(c *http.Client, scheme string) error {
		resp, err := c.Get(scheme + "://" + e.addr + "/v1/jobs")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("HTTP %d", resp.StatusCode)
		}
		return nil
	}
	status := func() (string, error) {
		out, err := exec.Command(berthBin, "status", "--config", e.config).CombinedOutput()
		return string(out), err
	}
	if out, err := status(); err != nil {
		t.Fatalf("berth status over plain HTTP: %v\n%s", err, out)
	}

	// TLS added.
	writeWebConfig(tlsOn)
	if out, err := status(); err != nil {
		t.Errorf("berth status after tls_server_config was added: %v\n%s", err, out)
	}
	if err := get(secure.HTTP, "https"); err != nil {
		t.Errorf("https after tls_server_config was added: %v", err)
	}
	if err := get(plain, "http"); err == nil {
		t.Error("plain HTTP answered 200 while the web configuration says TLS")
	}
	testutil.Eventually(t, 10*time.Second, "log line: TLS turned on", func() bool {
		return strings.Contains(e.out.String(), "turned TLS on")
	})

	// TLS removed.
	writeWebConfig(plainOnly)
	if out, err := status(); err != nil {
		t.Errorf("berth status after tls_server_config was removed: %v\n%s", err, out)
	}
	if err := get(plain, "http"); err != nil {
		t.Errorf("plain HTTP after tls_server_config was removed: %v", err)
	}
	if err := get(secure.HTTP, "https"); err == nil {
		t.Error("https answered after tls_server_config was removed")
	}
	testutil.Eventually(t, 10*time.Second, "log line: TLS turned off", func() bool {
		return strings.Contains(e.out.String(), "turned TLS off")
	})

	// TLS whose certificate does not load: nothing served, an ERROR, and
	// the CLI says why.
	writeWebConfig(strings.Replace(tlsOn, cert, cert+".missing", 1))
	out, err := status()
	if err == nil || !strings.Contains(out, "TLS handshake") {
		t.Errorf("berth status while the web configuration's certificate does not load: %v\n%s\nwant a failure naming the TLS handshake", err, out)
	}
	if err := get(plain, "http"); err == nil {
		t.Error("plain HTTP answered 200 while the web configuration says TLS")
	}
	testutil.Eventually(t, 10*time.Second, "an ERROR line for the web configuration", func() bool {
		return strings.Contains(e.out.String(), "level=ERROR") && strings.Contains(e.out.String(), "does not load")
	})
	t.Logf("berth status said: %s", out)

	// Fixed: https again, and the agent stops cleanly.
	writeWebConfig(tlsOn)
	if out, err := status(); err != nil {
		t.Errorf("berth status after the certificate was fixed: %v\n%s", err, out)
	}
	if err := e.stop(syscall.SIGTERM); err != nil {
		t.Errorf("the agent's exit after SIGTERM: %v", err)
	}
}
