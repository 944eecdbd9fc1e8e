package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

func TestPlaceholders(t *testing.T) {
	for use, want := range map[string]string{
		"logs JOB":                               "JOB",
		"restart JOB...":                         "JOB...",
		"pause [--wait] CONNECTOR":               "CONNECTOR",
		"apply -f FILE":                          "",
		"status":                                 "",
		"move --to MEMBER JOB [JOB...]":          "JOB JOB...",
		"gendocs [--man DIR] [--config-md FILE]": "",
	} {
		if got := strings.Join(placeholders(use), " "); got != want {
			t.Errorf("placeholders(%q) = %q, want %q", use, got, want)
		}
	}
}

// A JOB|CONNECTOR argument offers both kinds of names, once each; a
// CONNECTOR argument only connectors; an agent that fails offers nothing.
func TestRemoteCompleter(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/jobs", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `[{"id":"orders"},{"id":"orders-0"},{"id":"orders-1"}]`)
	})
	mux.HandleFunc("GET /connectors", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `["orders","paused-one"]`)
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	broken := httptest.NewServer(http.NotFoundHandler())
	defer broken.Close()

	var cfg string
	for _, c := range []struct {
		use, addr, prefix string
		args              []string
		want              string
	}{
		{"restart JOB|CONNECTOR", srv.URL, "", nil, "orders orders-0 orders-1 paused-one"},
		{"restart JOB|CONNECTOR", srv.URL, "orders-", nil, "orders-0 orders-1"},
		{"pause CONNECTOR", srv.URL, "", nil, "orders paused-one"},
		{"pause CONNECTOR", srv.URL, "", []string{"orders"}, ""},
		{"restart JOB...", srv.URL, "", []string{"orders"}, "orders-0 orders-1"},
		{"logs JOB", broken.URL, "", nil, ""},
	} {
		cmd := &cobra.Command{Use: c.use}
		cmd.Flags().String("addr", c.addr, "")
		f := remoteCompleter(placeholders(c.use), &cfg)
		got, dir := f(cmd, c.args, c.prefix)
		if strings.Join(got, " ") != c.want || dir != cobra.ShellCompDirectiveNoFileComp {
			t.Errorf("%q %v %q: %q (directive %d), want %q", c.use, c.args, c.prefix, got, dir, c.want)
		}
	}
}
