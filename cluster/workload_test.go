package cluster

import (
	"errors"
	"testing"

	"github.com/berthd/berth/spec"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func TestWorkloadStoreRoundTrip(t *testing.T) {
	c := connect(t, shared.Endpoints(), uniqueName(t), nil)
	ctx := ctxT(t)
	body := "tasks = 3\ngroup = \"etl\"\n"
	if err := c.PutConnector(ctx, "orders", []byte(body)); err != nil {
		t.Fatal(err)
	}
	if err := c.PutGroup(ctx, "etl", []byte("")); err != nil {
		t.Fatal(err)
	}
	conns, err := c.Connectors(ctx)
	if err != nil || string(conns["orders"]) != body || len(conns) != 1 {
		t.Fatalf("Connectors = %q, %v", conns, err)
	}
	groups, err := c.Groups(ctx)
	if err != nil || len(groups) != 1 {
		t.Fatalf("Groups = %q, %v", groups, err)
	}
	if err := c.DeleteConnector(ctx, "orders"); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteConnector(ctx, "orders"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second delete: %v, want ErrNotFound", err)
	}
	if err := c.DeleteGroup(ctx, "etl"); err != nil {
		t.Fatal(err)
	}
}

func TestValidatorRefusalStoresNothing(t *testing.T) {
	c := connect(t, shared.Endpoints(), uniqueName(t), nil)
	ctx := ctxT(t)
	for _, tc := range []struct {
		kind       spec.DefKind
		name, body string
	}{
		{spec.DefConnector, "orders", "tasks = \"many\""},   // wrong type
		{spec.DefConnector, "orders", "tasks = 1\ncpu = 2"}, // unknown key
		{spec.DefConnector, "a/b", "tasks = 1"},             // not one key segment
		{spec.DefGroup, "etl", "memory = "},                 // not TOML
	} {
		var err error
		if tc.kind == spec.DefConnector {
			err = c.PutConnector(ctx, tc.name, []byte(tc.body))
		} else {
			err = c.PutGroup(ctx, tc.name, []byte(tc.body))
		}
		if err == nil {
			t.Errorf("%s %s %q: accepted", tc.kind, tc.name, tc.body)
		}
	}
	resp, err := c.etcd.Get(ctx, c.keys.Prefix(), clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 0 {
		t.Fatalf("refused definitions were stored: %v", resp.Kvs)
	}

	noValidator := connect(t, shared.Endpoints(), uniqueName(t), func(cfg *Config) { cfg.Validate = nil })
	if err := noValidator.PutConnector(ctx, "orders", []byte("tasks = 1")); !errors.Is(err, ErrNoValidator) {
		t.Fatalf("without validator: %v, want ErrNoValidator", err)
	}
}
