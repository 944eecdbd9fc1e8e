package store

import (
	"testing"

	"github.com/berthd/berth/spec"
)

// Every key of the layout, as agents of both layouts and operators' tools
// expect it: a change here is a change of the stored format.
func TestKeys(t *testing.T) {
	k := NewKeys("prod")
	for _, tc := range []struct{ got, want string }{
		{k.Prefix(), "/berth/prod/"},
		{k.Member("a"), "/berth/prod/members/a"},
		{k.MembersDir(), "/berth/prod/members/"},
		{k.LeaderDir(), "/berth/prod/leader/"},
		{k.LastSeen("a"), "/berth/prod/lastseen/a"},
		{k.Def(spec.DefConnector, "orders"), "/berth/prod/connectors/orders"},
		{k.DefDir(spec.DefGroup), "/berth/prod/groups/"},
		{k.FileApplied("a"), "/berth/prod/applied/a"},
		{k.Claim("orders-0"), "/berth/prod/claims/orders-0"},
		{k.Target("orders"), "/berth/prod/targets/orders"},
		{k.Restart("orders", "orders-0"), "/berth/prod/restarts/orders/orders-0"},
		{k.RestartsRoot(), "/berth/prod/restarts/"},
		{k.Head(), "/berth/prod/pub/head"},
		{k.ShareChunk("a", 12), "/berth/prod/pub/shares/a/0012"},
		{k.StatusBucket("3f"), "/berth/prod/pub/status/3f"},
		{k.Legacy(), "/berth/prod/assignment"},
	} {
		if tc.got != tc.want {
			t.Errorf("key %q, want %q", tc.got, tc.want)
		}
	}
}

func TestParseShareChunk(t *testing.T) {
	k := NewKeys("prod")
	for _, tc := range []struct {
		key    string
		member string
		chunk  int
		ok     bool
	}{
		{k.ShareChunk("host-a", 0), "host-a", 0, true},
		{k.ShareChunk("host-a", 10000), "host-a", 10000, true},
		{"/berth/prod/pub/shares/host-a", "", 0, false},
		{"/berth/prod/pub/shares/host-a/x", "", 0, false},
		{"/berth/prod/pub/shares/host-a/-1", "", 0, false},
		{"/berth/other/pub/shares/host-a/0000", "", 0, false},
		{k.Head(), "", 0, false},
	} {
		m, c, ok := k.ParseShareChunk(tc.key)
		if m != tc.member || c != tc.chunk || ok != tc.ok {
			t.Errorf("ParseShareChunk(%q) = %q, %d, %v; want %q, %d, %v", tc.key, m, c, ok, tc.member, tc.chunk, tc.ok)
		}
	}
}

func TestCheckName(t *testing.T) {
	for name, ok := range map[string]bool{"orders": true, "orders-0": true, "": false, "a/b": false, "a\x00": false} {
		if err := CheckName("job", name); (err == nil) != ok {
			t.Errorf("CheckName(%q) = %v, want ok %v", name, err, ok)
		}
	}
}
