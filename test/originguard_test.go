package test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/berthd/berth/internal/testutil"
	"github.com/chromedp/chromedp"
)

// C26 (docs/cases.md): any web page can restart jobs. A page of another
// origin in a real headless Chromium sends
// fetch(AGENT/connectors/x/restart?includeTasks=true, {method: "POST",
// mode: "no-cors"}): the agent refuses it (403, a log line) and the job
// keeps its PID. A page of a rebinding name (rebind.example, resolved to
// the agent's address) reads nothing: 421. The same requests without a
// browser: Origin http://evil.example gets 403, Host rebind.example:PORT
// 421 for reads and writes. The CLI, plain requests and a Prometheus
// scrape work as before, and a plain restart does restart.
func TestC26WebPagesCannotRestartJobs(t *testing.T) {
	browser := chromium(t)
	e := newEnv(t)
	e.write(e.header("2s") + `
[static]
connectors = ["x"]

[[connector]]
name = "x"
  [connector.run]
  command = ["/bin/sh", "-c", "exec sleep infinity"]
`)
	e.start()
	pid := e.waitRunning("x")["x"].PID
	port := e.addr[strings.LastIndexByte(e.addr, ':'):]
	agent := "http://" + e.addr

	// The attacker's page, served from another origin: evil.example
	// (resolved to loopback by Chromium's host rules) on another port.
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, `<!doctype html><title>evil</title><script>
fetch(%q, {method: "POST", mode: "no-cors"}).then(() => { document.title = "sent" }, (e) => { document.title = "failed " + e });
</script>`, agent+"/connectors/x/restart?includeTasks=true")
	}))
	defer page.Close()
	evil := strings.Replace(page.URL, "127.0.0.1", "evil.example", 1)

	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(browser),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("host-resolver-rules", "MAP evil.example 127.0.0.1, MAP rebind.example 127.0.0.1"),
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.UserDataDir(t.TempDir()),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start %s: %v", browser, err)
	}
	tctx, cancelTimeout := context.WithTimeout(ctx, 90*time.Second)
	defer cancelTimeout()
	if err := chromedp.Do(tctx, chromedp.Navigate(evil)); err != nil {
		t.Fatalf("the cross-origin page: %v", err)
	}
	// "sent": an opaque answer (no-cors); "failed ...": the browser did
	// not send it. Either way the agent is the judge, below.
	title, err := chromedp.Run(tctx, chromedp.Poll[string](`document.title !== "evil" && document.title`))
	if err != nil {
		t.Fatalf("the cross-origin page's fetch: %v", err)
	}
	t.Logf("the page's fetch: %s", title)
	testutil.Eventually(t, 30*time.Second, "the agent logs the refused cross-origin write", func() bool {
		return strings.Contains(e.out.String(), "refused a cross-origin write")
	})
	if !strings.Contains(e.out.String(), "evil.example") {
		t.Errorf("the refusal's log line does not name the page's origin:\n%s", e.out)
	}

	// DNS rebinding: the page's own name, resolved to the agent.
	if err := chromedp.Do(tctx, chromedp.Navigate("http://rebind.example"+port+"/v1/jobs")); err != nil {
		t.Fatalf("the rebinding page: %v", err)
	}
	body, err := chromedp.Run(tctx, chromedp.Text(chromedp.CSS("body")))
	if err != nil {
		t.Fatalf("the rebinding page's text: %v", err)
	}
	if !strings.Contains(body, "421") || strings.Contains(body, `"x"`) {
		t.Errorf("a page of rebind.example read the API: %s", body)
	}

	// Without a browser: the headers a browser would send.
	send := func(method, path, host string, hdr map[string]string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, agent+path, nil)
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
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	restart := "/connectors/x/restart?includeTasks=true"
	if code, b := send(http.MethodPost, restart, "", map[string]string{"Origin": "http://evil.example"}); code != http.StatusForbidden || !strings.Contains(b, `"error_code": 403`) {
		t.Errorf("POST restart with Origin http://evil.example: %d %s, want a JSON 403", code, b)
	}
	for _, c := range []struct{ method, path string }{{http.MethodGet, "/v1/jobs"}, {http.MethodGet, "/connectors/x/status"}, {http.MethodPost, restart}} {
		if code, b := send(c.method, c.path, "rebind.example"+port, nil); code != http.StatusMisdirectedRequest || !strings.Contains(b, `"error_code": 421`) {
			t.Errorf("%s %s with Host rebind.example%s: %d %s, want a JSON 421", c.method, c.path, port, code, b)
		}
	}
	if !strings.Contains(e.out.String(), "does not answer to") {
		t.Errorf("no log line for the refused host name:\n%s", e.out)
	}
	if j := e.jobs()["x"]; j.PID != pid || j.Restarts != 0 {
		t.Fatalf("job x restarted by refused requests: pid %d → %d, restarts %d", pid, j.PID, j.Restarts)
	}

	// As before: the CLI, plain reads, a Prometheus scrape, a plain restart.
	if out, err := exec.Command(berthBin, "status", "--config", e.config).CombinedOutput(); err != nil || !strings.Contains(string(out), "x") {
		t.Errorf("berth status: %v\n%s", err, out)
	}
	if code, b := send(http.MethodGet, "/v1/jobs", "", nil); code != http.StatusOK {
		t.Errorf("GET /v1/jobs: %d %s", code, b)
	}
	if code, b := send(http.MethodGet, "/v1/jobs", "localhost"+port, nil); code != http.StatusOK {
		t.Errorf("GET /v1/jobs with Host localhost%s: %d %s", port, code, b)
	}
	if prom, err := exec.LookPath("prometheus"); err == nil {
		p := startPrometheus(t, prom, e.addr)
		testutil.Eventually(t, 60*time.Second, "Prometheus scrapes the agent (up == 1)", func() bool {
			s, err := p.query(`up{job="berth"} == 1`)
			return err == nil && len(s) == 1
		})
	} else {
		t.Log("prometheus not installed: the scrape is not checked")
	}
	if code, b := send(http.MethodPost, restart, "", nil); code/100 != 2 {
		t.Fatalf("POST restart without Origin: %d %s", code, b)
	}
	testutil.Eventually(t, 30*time.Second, "job x restarted by a plain request", func() bool {
		j := e.jobs()["x"]
		return j.PID != 0 && j.PID != pid
	})
}
