package config

import (
	"strings"
	"testing"
)

// agent.allowed_hosts takes "*" and host names with an optional port;
// a URL, a path or an empty name is an error naming the entry.
func TestAllowedHosts(t *testing.T) {
	c, err := Parse("h.toml", []byte("[agent]\nallowed_hosts = [\"berth-a.example.net\", \"berth-b:9750\", \"10.0.0.7\", \"[::1]:9750\", \"*\"]\n"), limitsHost())
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(c.Agent.AllowedHosts, " "); got != "berth-a.example.net berth-b:9750 10.0.0.7 [::1]:9750 *" {
		t.Errorf("allowed_hosts = %s", got)
	}
	for _, bad := range []string{"http://berth-a", "berth-a/metrics", "", ":9750", "berth a"} {
		_, err := Parse("h.toml", []byte("[agent]\nallowed_hosts = [\"ok\", "+strings.ReplaceAll(`"X"`, "X", bad)+"]\n"), limitsHost())
		if err == nil || !strings.Contains(err.Error(), "agent.allowed_hosts[1]") || !strings.Contains(err.Error(), "is not a host name") {
			t.Errorf("allowed_hosts entry %q: %v, want an error naming agent.allowed_hosts[1]", bad, err)
		}
	}
}
