package source

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/berthd/berth/cluster"
	"github.com/berthd/berth/cluster/embedetcd"
	"github.com/berthd/berth/config"
	"github.com/berthd/berth/spec"
	"github.com/berthd/berth/workload"
)

// connBody and groupBody are the stored bodies of one connector (running
// sleep arg, in group when set) and one group (pids limit), as
// config.Definitions cuts them from a file.
func connBody(t *testing.T, name, group, arg string) []byte {
	t.Helper()
	g := ""
	if group != "" {
		g = "group = \"" + group + "\"\n"
	}
	file := "[[connector]]\nname = \"" + name + "\"\n" + g + "[connector.run]\ncommand = [\"/bin/sleep\", \"" + arg + "\"]\n"
	if group != "" {
		file = "[[group]]\nname = \"" + group + "\"\n" + file
	}
	return defsOf(t, file).Connectors[name]
}

func groupBody(t *testing.T, name string, pids int) []byte {
	t.Helper()
	return defsOf(t, "[[group]]\nname = \""+name+"\"\nlimits = { pids = "+strconv.Itoa(pids)+" }\n").Groups[name]
}

func defsOf(t *testing.T, file string) *config.Defs {
	t.Helper()
	d, err := config.Definitions("test.toml", []byte(file), config.LocalHost())
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// An agent holds the definitions of its share's connectors and their
// groups, on a real (embedded) etcd: it reads a definition again only when
// the share's revision of it changed (a stored change the share does not
// name yet is not read), re-reads every connector when a group changed,
// forgets connectors that left the share, and re-reads everything of a
// share from the single-key layout (revision 0) at every delivery.
func TestDefinitionsFollowTheShareRevisions(t *testing.T) {
	emb, err := embedetcd.Start(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(emb.Close)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := cluster.Connect(ctx, cluster.Config{Name: "defs", Endpoints: emb.Endpoints(), Validate: workload.Validator(config.LocalHost())})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	put := func(kind spec.DefKind, name string, body []byte) {
		t.Helper()
		var err error
		if kind == spec.DefGroup {
			err = c.PutGroup(ctx, name, body)
		} else {
			err = c.PutConnector(ctx, name, body)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	put(spec.DefGroup, "g", groupBody(t, "g", 5))
	put(spec.DefConnector, "a", connBody(t, "a", "g", "1"))
	put(spec.DefConnector, "b", connBody(t, "b", "", "1"))
	put(spec.DefConnector, "other", connBody(t, "other", "", "1"))

	d := newDefinitions()
	update := func(what string, sh cluster.Share, wantConns map[string]string, wantGroups map[string]string) {
		t.Helper()
		if err := d.update(ctx, c, sh); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		check := func(kind string, got map[string][]byte, want map[string]string) {
			if len(got) != len(want) {
				t.Errorf("%s: %ss held %d, want %d (%v)", what, kind, len(got), len(want), want)
			}
			for n, body := range want {
				if string(got[n]) != body {
					t.Errorf("%s: %s %s = %q, want %q", what, kind, n, got[n], body)
				}
			}
		}
		check("connector", d.conns, wantConns)
		check("group", d.groups, wantGroups)
	}
	a1, b1 := string(connBody(t, "a", "g", "1")), string(connBody(t, "b", "", "1"))
	g5 := string(groupBody(t, "g", 5))
	update("first share", cluster.Share{Connectors: map[string]int64{"a": 10, "b": 11}, Groups: map[string]int64{"g": 9}},
		map[string]string{"a": a1, "b": b1}, map[string]string{"g": g5})

	// a changes in the store; until the share names its new revision the
	// agent keeps what it read (it does not read what it was not told of).
	put(spec.DefConnector, "a", connBody(t, "a", "g", "2"))
	update("same revisions", cluster.Share{Connectors: map[string]int64{"a": 10, "b": 11}, Groups: map[string]int64{"g": 9}},
		map[string]string{"a": a1, "b": b1}, map[string]string{"g": g5})
	a2 := string(connBody(t, "a", "g", "2"))
	update("a's revision changed", cluster.Share{Connectors: map[string]int64{"a": 12, "b": 11}, Groups: map[string]int64{"g": 9}},
		map[string]string{"a": a2, "b": b1}, map[string]string{"g": g5})

	// The group changes: read again, with the connectors that name it.
	put(spec.DefGroup, "g", groupBody(t, "g", 7))
	update("g's revision changed", cluster.Share{Connectors: map[string]int64{"a": 12, "b": 11}, Groups: map[string]int64{"g": 13}},
		map[string]string{"a": a2, "b": b1}, map[string]string{"g": string(groupBody(t, "g", 7))})

	// a leaves the share (with its group); b stays.
	update("a left", cluster.Share{Connectors: map[string]int64{"b": 11}, Groups: map[string]int64{}},
		map[string]string{"b": b1}, map[string]string{})

	// A share of the single-key layout: revision 0, read every time;
	// candidate names that are no connector are left out.
	put(spec.DefConnector, "b", connBody(t, "b", "", "3"))
	update("single-key share", cluster.Share{Connectors: map[string]int64{"b": 0, "b-0": 0}},
		map[string]string{"b": string(connBody(t, "b", "", "3"))}, map[string]string{})
	put(spec.DefConnector, "b", connBody(t, "b", "", "4"))
	update("single-key share again", cluster.Share{Connectors: map[string]int64{"b": 0, "b-0": 0}},
		map[string]string{"b": string(connBody(t, "b", "", "4"))}, map[string]string{})
}
