package test

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berthd/berth/api"
	"github.com/berthd/berth/internal/testutil"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
)

var updateScreenshot = flag.Bool("update-screenshot", false, "write the status page screenshot to docs/status-page.png")

// screenshotPath is the screenshot docs/operating.md shows, relative to test/.
const screenshotPath = "../docs/status-page.png"

// showcase is an agent file whose jobs show every column of the status
// page and of berth top: limits beside usage, a sharing group, a job that
// keeps failing (restarts, last exit) and one that is OOM-killed.
func showcase(e *env) string {
	return strings.Replace(e.header("2s"), `id = "e2e"`, `id = "host-a"`, 1) + `
[static]
connectors = ["orders-sink", "flaky", "balloon"]
tasks = ["orders-sink-0", "orders-sink-1"]

[[group]]
name = "sinks"
limits = { cpu = 1, memory = "256MiB" }

[[connector]]
name = "orders-sink"
tasks = 2
group = "sinks"
  [connector.run]
  command = ["/bin/sh", "-c", "exec sleep infinity"]
  limits = { cpu = 0.1, memory = "32MiB", pids = 8 }
  [connector.task]
  command = ["/bin/sh", "-c", "while :; do i=0; while [ $i -lt 3000 ]; do i=$((i+1)); done; sleep 0.05; done"]
  limits = { cpu = 0.25, memory = "64MiB", pids = 16 }

[[connector]]
name = "flaky"
  [connector.run]
  command = ["/bin/sh", "-c", "sleep 2; exit 3"]
  limits = { memory = "16MiB", pids = 8 }

[[connector]]
name = "balloon"
  [connector.run]
  command = ["/usr/bin/tail", "/dev/zero"]
  restart = "always"
  limits = { memory = "24MiB", pids = 8 }
`
}

// waitShowcase waits until the showcase's jobs show what they are for.
func waitShowcase(e *env) {
	e.t.Helper()
	e.waitRunning("orders-sink", "orders-sink-0", "orders-sink-1")
	testutil.Eventually(e.t, 60*time.Second, "flaky restarted and balloon OOM-killed", func() bool {
		js := e.jobs()
		f, b := js["flaky"], js["balloon"]
		return f.Restarts >= 1 && f.LastExit != nil && b.Usage != nil && b.Usage.OOMKills >= 1
	})
}

// chromium returns the path of Debian's chromium, or skips.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("chromium not installed (Debian: apt-get install chromium; test/deps.sh installs it)")
	return ""
}

// The status page in a real headless Chromium, with JavaScript off: every
// job has a row with its state, the members and the generation are shown,
// the page reloads itself and loads nothing but itself.
func TestStatusPageInChromium(t *testing.T) {
	browser := chromium(t)
	e := newEnv(t)
	e.write(showcase(e))
	e.start()
	waitShowcase(e)

	// A client that does not ask for HTML (curl, berth) gets JSON at /.
	resp, err := http.Get("http://" + e.addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("GET / without Accept: Content-Type %q, want application/json", ct)
	}

	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(browser),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1500, 900),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	// The first Do starts the browser and attaches the tab; it must not
	// carry a timeout (chromedp.Run's rule), the actions after it do.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start %s: %v", browser, err)
	}
	// Every request the page makes, to prove it loads nothing else.
	var mu sync.Mutex
	var requests []string
	if err := chromedp.Listen(ctx, func(ev any) {
		if r, ok := ev.(*network.EventRequestWillBeSent); ok {
			mu.Lock()
			requests = append(requests, r.Request.URL)
			mu.Unlock()
		}
	}); err != nil {
		t.Fatal(err)
	}
	tctx, cancelTimeout := context.WithTimeout(ctx, testutil.Deadline(90*time.Second))
	defer cancelTimeout()

	page := "http://" + e.addr + "/"
	noScripts := chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		if _, err := cdp.Call(ctx, t, network.Enable, network.EnableParams{}); err != nil {
			return err
		}
		_, err := cdp.Call(ctx, t, emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: true})
		return err
	})
	if err := chromedp.Do(tctx, noScripts, chromedp.Navigate(page), chromedp.WaitVisible(chromedp.CSS(`table#jobs`))); err != nil {
		t.Fatalf("load %s in chromium: %v", page, err)
	}
	text := func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(tctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("text of %s: %v", sel, err)
		}
		return s
	}
	attr := func(sel, name string) string {
		t.Helper()
		a, err := chromedp.Run(tctx, chromedp.AttributeValue(chromedp.CSS(sel), name))
		if err != nil || !a.Exists {
			t.Fatalf("attribute %s of %s: %v (exists %v)", name, sel, err, a.Exists)
		}
		return a.Value
	}
	if r := attr(`meta[http-equiv="refresh"]`, "content"); r == "" {
		t.Errorf("the page has no meta refresh")
	}
	if st, gen := text(`#agent-state`), text(`#generation`); st != "member" || gen == "" || gen == "0" {
		t.Errorf("agent state %q, generation %q: want member and a published generation", st, gen)
	}

	jobs := e.jobs()
	if len(jobs) != 5 {
		t.Fatalf("the agent runs %d jobs, want 5: %v", len(jobs), jobs)
	}
	for id, j := range jobs {
		row := `tr[data-job="` + id + `"]`
		state, dataState, all := text(row+` .state`), attr(row, "data-state"), text(row)
		if state != dataState {
			t.Errorf("job %s: shows state %q, row says %q", id, state, dataState)
		}
		switch id {
		case "orders-sink", "orders-sink-0", "orders-sink-1":
			if state != "running" {
				t.Errorf("job %s shows %q, want running", id, state)
			}
		default: // flaky and balloon move between running and backoff
			if state != "running" && state != "backoff" && state != "starting" {
				t.Errorf("job %s shows %q, want running, backoff or starting", id, state)
			}
		}
		if j.Usage != nil && j.Usage.Pressure != nil && !strings.Contains(all, "cpu ") {
			t.Errorf("job %s has pressure in /v1/jobs, but its row shows none: %q", id, all)
		}
		for _, want := range limitsShown(j) {
			if !strings.Contains(all, want) {
				t.Errorf("job %s: row lacks its limit %q: %q", id, want, all)
			}
		}
	}
	if flaky := text(`tr[data-job="flaky"]`); !strings.Contains(flaky, "exited 3") {
		t.Errorf("flaky's row lacks its last exit %q: %q", "exited 3", flaky)
	}
	if members := text(`table#members`); !strings.Contains(members, "host-a") || !strings.Contains(members, e.addr) {
		t.Errorf("members table lacks this agent (host-a at %s): %q", e.addr, members)
	}

	png, err := chromedp.Run(tctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	mu.Lock()
	if len(requests) == 0 {
		t.Errorf("saw no request at all: the network listener is not working")
	}
	for _, r := range requests {
		u, err := url.Parse(r)
		if err != nil || u.Host != e.addr {
			t.Errorf("the page requested %s: only the agent's own address is allowed", r)
		}
	}
	mu.Unlock()
	out := filepath.Join(t.TempDir(), "status-page.png")
	if *updateScreenshot {
		out = screenshotPath
	}
	if err := os.WriteFile(out, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes)", out, len(png))
}

// limitsShown are the texts of j's limits the page must show beside its
// usage.
func limitsShown(j api.Job) []string {
	var out []string
	if j.Limits.CPU > 0 {
		out = append(out, fmt.Sprintf("%g cores", j.Limits.CPU))
	}
	if j.Limits.Memory > 0 {
		out = append(out, fmt.Sprintf("%.1f MiB", float64(j.Limits.Memory)/(1<<20)))
	}
	if j.Limits.Pids > 0 {
		out = append(out, fmt.Sprintf("/ %d", j.Limits.Pids))
	}
	return out
}
