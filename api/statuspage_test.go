package api

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/berthd/berth/limits"
	"github.com/berthd/berth/worker"
)

// backend is a fixed Backend: the page is rendered from what it returns.
// The embedded interface (nil) stands for the methods the page does not
// call.
type backend struct {
	Backend
	jobs    []Job
	members []Member
	joined  bool
}

func (b *backend) Jobs() []Job { return b.jobs }
func (b *backend) AgentInfo() Agent {
	if !b.joined {
		return Agent{ID: "host-a", State: "joining"}
	}
	return Agent{ID: "host-a", State: "member", Leader: true, Generation: 7}
}
func (b *backend) Members(context.Context) ([]Member, error) {
	if !b.joined {
		return nil, errors.New("not a member of the cluster yet")
	}
	return b.members, nil
}
func (b *backend) Assignment(context.Context) (Assignment, error) {
	if !b.joined {
		return Assignment{}, ErrNotMember
	}
	return Assignment{Generation: 7, Leader: "host-a", Members: map[string][]string{"host-a": {"a"}},
		Unassigned: map[string]string{"b-0": "declared by host-b, which is absent"}}, nil
}

func get(t *testing.T, h http.Handler, accept string) (*http.Response, string) {
	t.Helper()
	srv := httptest.NewServer(h)
	defer srv.Close()
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/", nil)
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}

// A browser gets the HTML page; curl, the API client and anything that
// does not prefer text/html get JSON.
func TestStatusPageNegotiation(t *testing.T) {
	// What Handler passes as next: the JSON answer at /.
	jsonRoot := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		WriteError(w, http.StatusNotFound, "no such resource")
	})
	h := statusPage(&backend{joined: true}, jsonRoot)
	for _, c := range []struct {
		accept string
		html   bool
	}{
		{"text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8", true}, // Chromium
		{"text/html", true},
		{"", false},
		{"*/*", false}, // curl
		{"application/json", false},
		{"application/json, text/html;q=0.5", false},
	} {
		resp, body := get(t, h, c.accept)
		ct := resp.Header.Get("Content-Type")
		if c.html {
			if !strings.HasPrefix(ct, "text/html") || !strings.Contains(body, "<!doctype html>") {
				t.Errorf("Accept %q: %s %s, want the HTML page", c.accept, resp.Status, ct)
			}
			continue
		}
		var e Error
		if ct != "application/json" || json.Unmarshal([]byte(body), &e) != nil {
			t.Errorf("Accept %q: %s %s %q, want JSON", c.accept, resp.Status, ct, body)
		}
	}
}

// The page shows each job's row with its state, limits beside usage,
// restarts, last exit and pressure, the members and the generation; text
// from jobs is escaped; there is no script.
func TestStatusPageContent(t *testing.T) {
	full := 0.5
	now := time.Now()
	b := &backend{joined: true,
		jobs: []Job{
			{ID: "a", Kind: "connector", State: worker.Running, PID: 42, StartedAt: &now, Restarts: 3,
				LastExit: &worker.Exit{Time: now, Code: 1, Reason: "exited 1"},
				Limits:   limits.Limits{CPU: 1.5, Memory: 512 << 20, Pids: 64},
				Usage: &Usage{GroupUsage: GroupUsage{CPUSeconds: 12.5, MemoryBytes: 100 << 20, MemoryLimitBytes: 512 << 20, Pids: 3, PidsLimit: 64,
					IOReadBytes: 2 << 30, IOWriteBytes: 5 << 20},
					Pressure: &Pressure{CPU: Stall{SomeSeconds: 1.5, FullSeconds: &full}}}},
			{ID: "b-0", Kind: "task", Group: "g", State: worker.Failed, Reason: `start: <script>alert(1)</script>`},
		},
		members: []Member{{ID: "host-a", Protocol: "static", Connectors: []string{"a"}, Addr: "127.0.0.1:9750", Started: now}},
	}
	_, body := get(t, statusPage(b, nil), "text/html")
	for _, want := range []string{
		`<meta http-equiv="refresh" content="5">`,
		`<tr data-job="a" data-state="running">`, `<tr data-job="b-0" data-state="failed">`,
		"1.5 cores", "12.5 s", "100.0 MiB", "512.0 MiB", "3 / 64", "exited 1", ">3<",
		"2.0 GiB read", "5.0 MiB written", "cpu 1.5 s", "memory 0.0 s", "io 0.0 s",
		`data-member="host-a"`, `<span id="generation">7</span>`, "b-0", "declared by host-b, which is absent",
		"&lt;script&gt;",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	if strings.Contains(strings.ToLower(body), "<script") {
		t.Errorf("page has a script")
	}
	for _, attr := range []string{`src="http`, `href="https:`, `@import`} {
		if strings.Contains(body, attr) {
			t.Errorf("page loads something from elsewhere: %s", attr)
		}
	}

	// Before the agent joins: no members, no assignment, still a page.
	_, body = get(t, statusPage(&backend{}, nil), "text/html")
	for _, want := range []string{"joining", "This agent runs no job", "Not a member of the cluster yet"} {
		if !strings.Contains(body, want) {
			t.Errorf("page of a joining agent lacks %q", want)
		}
	}
}
