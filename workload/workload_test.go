package workload

import (
	"context"
	"errors"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/berthd/berth/assign"
	"github.com/berthd/berth/cluster"
	"github.com/berthd/berth/cluster/embedetcd"
	"github.com/berthd/berth/config"
	"github.com/berthd/berth/spec"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/berthd/berth/internal/testutil"
)

// wlFile is a connectors file for the workload store tests.
const wlFile = `[[group]]
name = "etl"
limits = { memory = "256MiB" }

[[connector]]
name = "orders"
tasks = 2
group = "etl"
[connector.task]
command = ["/bin/sleep", "1000"]
limits = { memory = "32MiB" }

[[connector]]
name = "clicks"
[connector.run]
command = ["/bin/sleep", "1000"]
`

func wlDefs(t *testing.T, data string) *config.Defs {
	t.Helper()
	d, err := config.Definitions("connectors.toml", []byte(data), config.LocalHost())
	if err != nil {
		t.Fatalf("Definitions: %v", err)
	}
	return d
}

// wlStore is one cluster (a unique name) on a shared embedded etcd, with a
// raw etcd client to look at revisions.
type wlStore struct {
	c    *cluster.Client
	raw  *clientv3.Client
	name string
}

// revisions returns the mod revision of every stored definition by
// "kind/name".
func (s *wlStore) revisions(t *testing.T) map[string]int64 {
	t.Helper()
	prefix := "/berth/" + s.name + "/"
	resp, err := s.raw.Get(context.Background(), prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, kv := range resp.Kvs {
		k := strings.TrimPrefix(string(kv.Key), prefix)
		if kind, name, ok := strings.Cut(k, "/"); ok && (kind == "connectors" || kind == "groups") {
			out[strings.TrimSuffix(kind, "s")+"/"+name] = kv.ModRevision
		}
	}
	return out
}

func wlPlan(created, updated, deleted, unchanged []string) Plan {
	return Plan{Created: created, Updated: updated, Deleted: deleted, Unchanged: unchanged}
}

func samePlan(t *testing.T, what string, got, want Plan) {
	t.Helper()
	norm := func(p Plan) Plan {
		for _, l := range []*[]string{&p.Created, &p.Updated, &p.Deleted, &p.Unchanged} {
			if len(*l) == 0 {
				*l = nil
			}
		}
		return p
	}
	if !reflect.DeepEqual(norm(got), norm(want)) {
		t.Errorf("%s: plan\n got %+v\nwant %+v", what, got, want)
	}
}

func TestWorkloadStore(t *testing.T) {
	emb, err := embedetcd.Start(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(emb.Close)
	raw, err := clientv3.New(clientv3.Config{Endpoints: emb.Endpoints(), DialTimeout: testutil.Deadline(5 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	open := func(t *testing.T) (*wlStore, context.Context) {
		ctx, cancel := context.WithTimeout(context.Background(), testutil.Deadline(30*time.Second))
		t.Cleanup(cancel)
		name := strings.NewReplacer("/", "-").Replace(t.Name())
		c, err := cluster.Connect(ctx, cluster.Config{Name: name, Endpoints: emb.Endpoints(), Validate: Validator(config.LocalHost())})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return &wlStore{c: c, raw: raw, name: name}, ctx
	}

	t.Run("validator refusals store nothing", func(t *testing.T) {
		s, ctx := open(t)
		for _, tc := range []struct {
			kind             spec.DefKind
			name, body, want string
		}{
			{spec.DefConnector, "x", "name = \"x\"\ntasks = 1\n[task]\ncommand = [\"/bin/true\"]\nlimits = { memory = \"5 parsecs\" }\n",
				"connectors/x:5:12: task.limits.memory: "},
			{spec.DefConnector, "x", "name = \"x\"\ncolour = \"red\"\n", "connectors/x:2:1: colour: unknown key \"colour\"; allowed at the top level: "},
			{spec.DefConnector, "x", "name = \"y\"\n", `"y" differs from the connector's key "x"`},
			{spec.DefConnector, "x", "tasks = 0\n", "name is required"},
			{spec.DefConnector, "x", "name = \"x\"\ntasks = 2\n", "[connector.task] is required"},
			{spec.DefGroup, "g", "name = \"g\"\nlimits = { pids = \"many\" }\n", "groups/g:2:12: limits.pids: "},
			{spec.DefGroup, "g", "name = \"h\"\n", `"h" differs from the group's key "g"`},
			{spec.DefGroup, "g", "name = ", "groups/g:1:"},
		} {
			var err error
			if tc.kind == spec.DefConnector {
				err = s.c.PutConnector(ctx, tc.name, []byte(tc.body))
			} else {
				err = s.c.PutGroup(ctx, tc.name, []byte(tc.body))
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s %s %q: err = %v, want it to contain %q", tc.kind, tc.name, tc.body, err, tc.want)
			}
		}
		if revs := s.revisions(t); len(revs) != 0 {
			t.Fatalf("refused definitions were stored: %v", revs)
		}
		// The validator's connector summary is what assignment needs.
		got, err := Validator(config.LocalHost())(spec.DefConnector, "orders", wlDefs(t, wlFile).Connectors["orders"])
		if want := (assign.Connector{Name: "orders", Tasks: 2, Group: "etl"}); err != nil || got != want {
			t.Errorf("Validator(orders) = %+v, %v; want %+v", got, err, want)
		}
		got, err = Validator(config.LocalHost())(spec.DefConnector, "clicks", wlDefs(t, wlFile).Connectors["clicks"])
		if want := (assign.Connector{Name: "clicks", Run: true}); err != nil || got != want {
			t.Errorf("Validator(clicks) = %+v, %v; want %+v", got, err, want)
		}
		if _, err := Validator(config.LocalHost())("secret", "x", nil); err == nil {
			t.Error("unknown kind accepted")
		}
	})

	t.Run("apply create update unchanged prune", func(t *testing.T) {
		s, ctx := open(t)
		defs := wlDefs(t, wlFile)
		// Dry run stores nothing.
		p, err := NewPlan(ctx, s.c.Store, defs, true, config.LocalHost())
		if err != nil {
			t.Fatal(err)
		}
		samePlan(t, "dry run", p, wlPlan([]string{"group/etl", "connector/clicks", "connector/orders"}, nil, nil, nil))
		if revs := s.revisions(t); len(revs) != 0 {
			t.Fatalf("NewPlan stored %v", revs)
		}

		p, err = Apply(ctx, s.c.Store, defs, true, config.LocalHost())
		if err != nil {
			t.Fatal(err)
		}
		samePlan(t, "create", p, wlPlan([]string{"group/etl", "connector/clicks", "connector/orders"}, nil, nil, nil))
		created := s.revisions(t)
		if len(created) != 3 {
			t.Fatalf("stored %v, want 3 definitions", created)
		}

		// The same file again writes nothing.
		p, err = Apply(ctx, s.c.Store, wlDefs(t, wlFile), true, config.LocalHost())
		if err != nil {
			t.Fatal(err)
		}
		samePlan(t, "re-apply", p, wlPlan(nil, nil, nil, []string{"group/etl", "connector/clicks", "connector/orders"}))
		if again := s.revisions(t); !reflect.DeepEqual(again, created) {
			t.Errorf("re-apply rewrote definitions: %v -> %v", created, again)
		}

		// One connector changed: only it is written.
		changed := strings.Replace(wlFile, "tasks = 2", "tasks = 3", 1)
		p, err = Apply(ctx, s.c.Store, wlDefs(t, changed), true, config.LocalHost())
		if err != nil {
			t.Fatal(err)
		}
		samePlan(t, "update", p, wlPlan(nil, []string{"connector/orders"}, nil, []string{"group/etl", "connector/clicks"}))
		updated := s.revisions(t)
		if updated["connector/orders"] <= created["connector/orders"] || updated["connector/clicks"] != created["connector/clicks"] || updated["group/etl"] != created["group/etl"] {
			t.Errorf("update revisions %v, before %v: want only connector/orders rewritten", updated, created)
		}

		// Without prune nothing is deleted.
		onlyClicks := "[[connector]]\nname = \"clicks\"\n[connector.run]\ncommand = [\"/bin/sleep\", \"1000\"]\n"
		p, err = Apply(ctx, s.c.Store, wlDefs(t, onlyClicks), false, config.LocalHost())
		if err != nil {
			t.Fatal(err)
		}
		samePlan(t, "no prune", p, wlPlan(nil, nil, nil, []string{"connector/clicks"}))
		if revs := s.revisions(t); len(revs) != 3 {
			t.Errorf("apply without prune deleted: %v", revs)
		}

		// With prune, orders (first) and its group (after) are deleted.
		p, err = Apply(ctx, s.c.Store, wlDefs(t, onlyClicks), true, config.LocalHost())
		if err != nil {
			t.Fatal(err)
		}
		samePlan(t, "prune", p, wlPlan(nil, nil, []string{"connector/orders", "group/etl"}, []string{"connector/clicks"}))
		revs := s.revisions(t)
		if len(revs) != 1 || revs["connector/clicks"] != created["connector/clicks"] {
			t.Errorf("after prune: %v", revs)
		}
	})

	t.Run("apply refuses a clash with the stored workload", func(t *testing.T) {
		s, ctx := open(t)
		if _, err := Apply(ctx, s.c.Store, wlDefs(t, wlFile), true, config.LocalHost()); err != nil {
			t.Fatal(err)
		}
		before := s.revisions(t)
		// "orders-1" is the job ID of task 1 of the stored "orders".
		clash := "[[connector]]\nname = \"orders-1\"\n[connector.run]\ncommand = [\"/bin/true\"]\n"
		p, err := Apply(ctx, s.c.Store, wlDefs(t, clash), false, config.LocalHost())
		if err == nil || !strings.Contains(err.Error(), `job ID "orders-1"`) {
			t.Fatalf("clash: plan %+v, err %v; want a refusal naming the job ID", p, err)
		}
		samePlan(t, "refused", p, Plan{})
		if after := s.revisions(t); !reflect.DeepEqual(after, before) {
			t.Errorf("refused apply changed the store: %v -> %v", before, after)
		}
		// With prune the file replaces the workload: no clash.
		if _, err := Apply(ctx, s.c.Store, wlDefs(t, clash), true, config.LocalHost()); err != nil {
			t.Fatalf("prune apply: %v", err)
		}
	})

	t.Run("stored workload round trip", func(t *testing.T) {
		s, ctx := open(t)
		defs := wlDefs(t, wlFile)
		if _, err := Apply(ctx, s.c.Store, defs, true, config.LocalHost()); err != nil {
			t.Fatal(err)
		}
		conns, err := s.c.Connectors(ctx)
		if err != nil {
			t.Fatal(err)
		}
		groups, err := s.c.Groups(ctx)
		if err != nil {
			t.Fatal(err)
		}
		w, err := Parse(conns, groups, config.LocalHost())
		if err != nil {
			t.Fatal(err)
		}
		want := defs.Workload
		sort.Slice(want.Connectors, func(i, j int) bool { return want.Connectors[i].Name < want.Connectors[j].Name })
		if !reflect.DeepEqual(*w, want) {
			t.Errorf("Parse = %+v\nwant %+v", *w, want)
		}
		if a, b := w.Jobs(time.Second), defs.Workload.Jobs(time.Second); !reflect.DeepEqual(a, b) {
			t.Errorf("jobs differ:\n%+v\n%+v", a, b)
		}
	})
}

// One bad stored definition leaves the rest running: Parse returns
// the valid ones and names each one left out.
func TestParseSkipsBadDefinitions(t *testing.T) {
	defs := wlDefs(t, wlFile)
	conns := map[string][]byte{
		"orders":    defs.Connectors["orders"],
		"clicks":    defs.Connectors["clicks"],
		"broken":    []byte("name = \"broken\"\ntasks = \"two\"\n"),
		"renamed":   []byte("name = \"other\"\n"),
		"lost":      []byte("name = \"lost\"\ngroup = \"nowhere\"\n"),
		"orders-0":  []byte("name = \"orders-0\"\n"),
		"ingroup":   []byte("name = \"ingroup\"\ngroup = \"badgroup\"\n"),
		"zz-useful": []byte("name = \"zz-useful\"\n"),
	}
	groups := map[string][]byte{
		"etl":      defs.Groups["etl"],
		"badgroup": []byte("name = \"badgroup\"\nlimits = { memory = \"lots\" }\n"),
	}
	w, err := Parse(conns, groups, config.LocalHost())
	if w == nil {
		t.Fatal("nil workload")
	}
	var names []string
	for _, c := range w.Connectors {
		names = append(names, c.Name)
	}
	if got := strings.Join(names, " "); got != "clicks orders-0 zz-useful" {
		t.Errorf("kept connectors %q, want \"clicks orders-0 zz-useful\"", got)
	}
	if len(w.Groups) != 1 || w.Groups[0].Name != "etl" {
		t.Errorf("kept groups %+v, want etl", w.Groups)
	}
	if err == nil {
		t.Fatal("no error for the left-out definitions")
	}
	var left []string
	for _, e := range unjoin(err) {
		var d *DefinitionError
		if !errors.As(e, &d) {
			t.Fatalf("%T %v is not a *DefinitionError", e, e)
		}
		left = append(left, string(d.Kind)+"/"+d.Name)
	}
	want := "group/badgroup connector/broken connector/ingroup connector/lost connector/orders connector/renamed"
	if got := strings.Join(left, " "); got != want {
		t.Errorf("left out %q\nwant      %q", got, want)
	}
	msg := err.Error()
	for _, part := range []string{
		"skip connector broken: connectors/broken:2:1: tasks: must be an integer",
		"skip connector lost: connectors/lost: group: group \"nowhere\" is not defined",
		"skip connector orders: connectors/orders: tasks: task 0 has job ID \"orders-0\", which connector \"orders-0\" already uses",
		"skip group badgroup: groups/badgroup:2:12: limits.memory: ",
	} {
		if !strings.Contains(msg, part) {
			t.Errorf("error lacks %q:\n%s", part, msg)
		}
	}

	// Nothing stored: an empty, valid workload.
	if w, err := Parse(nil, nil, config.LocalHost()); err != nil || len(w.Connectors)+len(w.Groups) != 0 {
		t.Errorf("empty: %+v, %v", w, err)
	}
}
