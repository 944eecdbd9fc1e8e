package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/berthd/berth/assign"
	"github.com/berthd/berth/spec"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Validator checks one workload definition before it is stored: kind is
// spec.DefConnector or spec.DefGroup, name the definition's name, body its TOML text
// (one [[connector]] or [[group]] block). For a connector it returns the
// fields assignment needs; for a group the zero Connector. An error refuses
// the definition and nothing is stored. The caller injects it (berth's limits
// package validates), which keeps this package free of the TOML model.
type Validator func(kind spec.DefKind, name string, body []byte) (assign.Connector, error)

// DefRecord is the stored (JSON) value of a connectors/<name> or
// groups/<name> key.
type DefRecord struct {
	Body      string            `json:"body"`                // the TOML text, verbatim
	Connector *assign.Connector `json:"connector,omitempty"` // connectors only
	// Files lists the agents (member IDs, sorted) whose own file holds the
	// definition, when an agent's file created it; empty when `berth
	// apply` (PutConnector, PutGroup) stored it last. See PutFileDef.
	Files []string `json:"files,omitempty"`
}

// PutConnector validates body with the store's Validator and stores it as
// connector name, replacing any previous definition; the leader recomputes
// the assignment. The definition is then the operator's (`berth apply`):
// no agent deletes it when it leaves the agent's file (its Files are
// cleared; see PutFileDef). It returns ErrNoValidator without a validator,
// the validator's error (wrapped) when it refuses, an error when the
// validator returns a connector of another name, or a store error.
func (s *Store) PutConnector(ctx context.Context, name string, body []byte) error {
	return s.putDef(ctx, spec.DefConnector, name, body)
}

// PutGroup validates body with the store's Validator and stores it as sharing
// group name. Errors as PutConnector.
func (s *Store) PutGroup(ctx context.Context, name string, body []byte) error {
	return s.putDef(ctx, spec.DefGroup, name, body)
}

// DeleteConnector removes connector name, with its target state and
// pending restart requests, in one transaction. It returns ErrNotFound
// (wrapped) when there is none, or a store error.
func (s *Store) DeleteConnector(ctx context.Context, name string) error {
	return s.deleteDef(ctx, spec.DefConnector, name)
}

// DeleteGroup removes sharing group name. Errors as DeleteConnector.
func (s *Store) DeleteGroup(ctx context.Context, name string) error {
	return s.deleteDef(ctx, spec.DefGroup, name)
}

// Connectors returns every stored connector's TOML body by name, read page
// by page at one revision: the whole workload, for tools (`berth
// connectors`, `berth apply`); an agent reads the definitions of its own
// jobs (Definitions).
func (s *Store) Connectors(ctx context.Context) (map[string][]byte, error) {
	return s.bodies(ctx, spec.DefConnector)
}

// Groups returns every stored sharing group's TOML body by name.
func (s *Store) Groups(ctx context.Context) (map[string][]byte, error) {
	return s.bodies(ctx, spec.DefGroup)
}

// Definitions returns the TOML bodies of the named connectors and of the
// sharing groups those connectors name, read by key (MaxTxnOps keys per
// transaction): what an agent needs for the jobs of its share
// (Share.Connectors), without reading the whole workload. Names that do not
// exist (deleted since the share was published, or a candidate name of a
// share derived from the single-key layout) are left out. It returns an
// error when a name is not a valid key segment, the store fails, or a
// stored definition is not valid JSON.
func (s *Store) Definitions(ctx context.Context, connectors []string) (conns, groups map[string][]byte, err error) {
	keys := make([]string, 0, len(connectors))
	for _, n := range connectors {
		if err := CheckName("connector name", n); err != nil {
			return nil, nil, err
		}
		keys = append(keys, s.keys.DefDir(spec.DefConnector)+n)
	}
	conns, groups = map[string][]byte{}, map[string][]byte{}
	var want []string
	seen := map[string]bool{}
	var bad error
	err = GetKeys(ctx, s.etcd, s.maxTxnOps, keys, func(kv *mvccpb.KeyValue) {
		var d DefRecord
		if err := json.Unmarshal(kv.Value, &d); err != nil {
			bad = fmt.Errorf("decode %s: %w", kv.Key, err)
			return
		}
		conns[strings.TrimPrefix(string(kv.Key), s.keys.DefDir(spec.DefConnector))] = []byte(d.Body)
		if d.Connector != nil && d.Connector.Group != "" && !seen[d.Connector.Group] {
			seen[d.Connector.Group] = true
			want = append(want, s.keys.DefDir(spec.DefGroup)+d.Connector.Group)
		}
	})
	if err == nil && bad == nil {
		err = GetKeys(ctx, s.etcd, s.maxTxnOps, want, func(kv *mvccpb.KeyValue) {
			var d DefRecord
			if err := json.Unmarshal(kv.Value, &d); err != nil {
				bad = fmt.Errorf("decode %s: %w", kv.Key, err)
				return
			}
			groups[strings.TrimPrefix(string(kv.Key), s.keys.DefDir(spec.DefGroup))] = []byte(d.Body)
		})
	}
	if err == nil {
		err = bad
	}
	if err != nil {
		return nil, nil, fmt.Errorf("read definitions: %w", err)
	}
	return conns, groups, nil
}

// validDef validates body as definition kind/name and returns it as it is
// stored (without Files). Errors as PutConnector.
func (s *Store) validDef(kind spec.DefKind, name string, body []byte) (DefRecord, error) {
	if err := CheckName(string(kind)+" name", name); err != nil {
		return DefRecord{}, err
	}
	if s.validate == nil {
		return DefRecord{}, fmt.Errorf("store %s %s: %w", kind, name, ErrNoValidator)
	}
	conn, err := s.validate(kind, name, body)
	if err != nil {
		return DefRecord{}, fmt.Errorf("refuse %s %s: %w", kind, name, err)
	}
	def := DefRecord{Body: string(body)}
	if kind == spec.DefConnector {
		if conn.Name == "" {
			conn.Name = name
		}
		if conn.Name != name {
			return DefRecord{}, fmt.Errorf("refuse connector %s: validator returned connector %q", name, conn.Name)
		}
		def.Connector = &conn
	}
	return def, nil
}

func (s *Store) putDef(ctx context.Context, kind spec.DefKind, name string, body []byte) error {
	def, err := s.validDef(kind, name, body)
	if err != nil {
		return err
	}
	v, err := json.Marshal(def)
	if err != nil {
		return fmt.Errorf("encode %s %s: %w", kind, name, err)
	}
	key := s.keys.DefDir(kind) + name
	if _, err := s.etcd.Put(ctx, key, string(v)); err != nil {
		return fmt.Errorf("store %s %s at %s: %w", kind, name, key, err)
	}
	return nil
}

func (s *Store) deleteDef(ctx context.Context, kind spec.DefKind, name string) error {
	if err := CheckName(string(kind)+" name", name); err != nil {
		return err
	}
	key := s.keys.DefDir(kind) + name
	ops := []clientv3.Op{clientv3.OpDelete(key)}
	if kind == spec.DefConnector {
		// A connector's target state and pending restarts go with it.
		ops = append(ops, clientv3.OpDelete(s.keys.Target(name)), clientv3.OpDelete(s.keys.RestartsDir(name), clientv3.WithPrefix()))
	}
	resp, err := s.etcd.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return fmt.Errorf("delete %s %s at %s: %w", kind, name, key, err)
	}
	if resp.Responses[0].GetResponseDeleteRange().Deleted == 0 {
		return fmt.Errorf("delete %s %s: %w", kind, name, ErrNotFound)
	}
	return nil
}

func (s *Store) bodies(ctx context.Context, kind spec.DefKind) (map[string][]byte, error) {
	dir := s.keys.DefDir(kind)
	out := map[string][]byte{}
	_, err := RangePrefix(ctx, s.etcd, dir, 0, func(kv *mvccpb.KeyValue) error {
		var d DefRecord
		if err := json.Unmarshal(kv.Value, &d); err != nil {
			return fmt.Errorf("decode %s: %w", kv.Key, err)
		}
		out[strings.TrimPrefix(string(kv.Key), dir)] = []byte(d.Body)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list %ss under %s: %w", kind, dir, err)
	}
	return out, nil
}
