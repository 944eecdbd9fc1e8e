package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/berthd/berth/spec"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Which agent file a stored definition came from. An agent stores its own
// file's [[connector]] and [[group]] blocks at start and on reload
// (PutFileDef); when a block leaves its file the agent gives the
// definition up (ReleaseFileDef), and the definition is deleted once no
// agent's file holds it — unless `berth apply` stored it (PutConnector,
// PutGroup), which makes it the operator's: no agent deletes it.

// maxOwnershipTries bounds the read-modify-write retries of PutFileDef and
// ReleaseFileDef when other writers change the same key meanwhile.
const maxOwnershipTries = 10

// errOwnershipRace is returned when a definition kept changing under a
// read-modify-write for maxOwnershipTries rounds.
var errOwnershipRace = errors.New("the definition kept changing; try again")

// FileDefs returns the names of the definitions of kind (spec.DefConnector or
// spec.DefGroup) that agent's own file holds (Files includes agent), sorted.
// It returns a store error, or an error naming a value that is not valid
// JSON.
func (s *Store) FileDefs(ctx context.Context, kind spec.DefKind, agent string) ([]string, error) {
	dir := s.keys.DefDir(kind)
	resp, err := s.etcd.Get(ctx, dir, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("list %ss under %s: %w", kind, dir, err)
	}
	var out []string
	for _, kv := range resp.Kvs {
		var d DefRecord
		if err := json.Unmarshal(kv.Value, &d); err != nil {
			return nil, fmt.Errorf("decode %s: %w", kv.Key, err)
		}
		if slices.Contains(d.Files, agent) {
			out = append(out, strings.TrimPrefix(string(kv.Key), dir))
		}
	}
	slices.Sort(out)
	return out, nil
}

// FileOwners returns, for every stored definition of kind that an agent's
// file holds, those agents' IDs (sorted); definitions stored by `berth
// apply` are absent.
func (s *Store) FileOwners(ctx context.Context, kind spec.DefKind) (map[string][]string, error) {
	dir := s.keys.DefDir(kind)
	resp, err := s.etcd.Get(ctx, dir, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("list %ss under %s: %w", kind, dir, err)
	}
	out := map[string][]string{}
	for _, kv := range resp.Kvs {
		var d DefRecord
		if err := json.Unmarshal(kv.Value, &d); err != nil {
			return nil, fmt.Errorf("decode %s: %w", kv.Key, err)
		}
		if len(d.Files) > 0 {
			out[strings.TrimPrefix(string(kv.Key), dir)] = d.Files
		}
	}
	return out, nil
}

// PutFileDef validates body (as PutConnector does) and stores it as
// definition kind/name of agent's own file: created with Files = [agent]
// when absent; when an agent's file created it, agent is added to its
// Files; when `berth apply` stored it, it stays the operator's (Files
// empty). Nothing is written when body and Files are unchanged. It
// reports whether it wrote. Each write is a transaction on the key's
// revision, retried when another writer came first. Errors as
// PutConnector, or errOwnershipRace.
func (s *Store) PutFileDef(ctx context.Context, kind spec.DefKind, name string, body []byte, agent string) (bool, error) {
	def, err := s.validDef(kind, name, body)
	if err != nil {
		return false, err
	}
	if agent == "" {
		return false, fmt.Errorf("store %s %s from a file: no agent ID", kind, name)
	}
	key := s.keys.DefDir(kind) + name
	for range maxOwnershipTries {
		old, rev, err := s.readDef(ctx, key)
		if err != nil {
			return false, err
		}
		def.Files = nil
		switch {
		case rev == 0:
			def.Files = []string{agent}
		case len(old.Files) > 0:
			def.Files = slices.Clone(old.Files)
			if !slices.Contains(def.Files, agent) {
				def.Files = append(def.Files, agent)
				slices.Sort(def.Files)
			}
		}
		if rev != 0 && old.Body == def.Body && slices.Equal(old.Files, def.Files) {
			return false, nil
		}
		ok, err := s.casDef(ctx, key, rev, &def)
		if err != nil {
			return false, fmt.Errorf("store %s %s at %s: %w", kind, name, key, err)
		}
		if ok {
			return true, nil
		}
	}
	return false, fmt.Errorf("store %s %s at %s: %w", kind, name, key, errOwnershipRace)
}

// ReleaseFileDef says that agent's own file no longer holds definition
// kind/name: agent is removed from its Files, and the definition is
// deleted when agent was the last. A definition that agent's file does
// not hold (stored by `berth apply`, by another agent's file, or gone) is
// left alone. It reports whether it deleted the definition. Errors: a
// store error, or errOwnershipRace.
func (s *Store) ReleaseFileDef(ctx context.Context, kind spec.DefKind, name, agent string) (bool, error) {
	if err := CheckName(string(kind)+" name", name); err != nil {
		return false, err
	}
	key := s.keys.DefDir(kind) + name
	for range maxOwnershipTries {
		old, rev, err := s.readDef(ctx, key)
		if err != nil {
			return false, err
		}
		if rev == 0 || !slices.Contains(old.Files, agent) {
			return false, nil
		}
		old.Files = slices.DeleteFunc(slices.Clone(old.Files), func(s string) bool { return s == agent })
		var ok bool
		if len(old.Files) == 0 {
			resp, err := s.etcd.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).
				Then(clientv3.OpDelete(key)).Commit()
			if err != nil {
				return false, fmt.Errorf("delete %s %s at %s: %w", kind, name, key, err)
			}
			if resp.Succeeded {
				return true, nil
			}
			continue
		}
		if ok, err = s.casDef(ctx, key, rev, &old); err != nil {
			return false, fmt.Errorf("release %s %s at %s: %w", kind, name, key, err)
		}
		if ok {
			return false, nil
		}
	}
	return false, fmt.Errorf("release %s %s at %s: %w", kind, name, key, errOwnershipRace)
}

// readDef reads one stored definition and its mod revision (0: absent).
func (s *Store) readDef(ctx context.Context, key string) (DefRecord, int64, error) {
	resp, err := s.etcd.Get(ctx, key)
	if err != nil {
		return DefRecord{}, 0, fmt.Errorf("read %s: %w", key, err)
	}
	if len(resp.Kvs) == 0 {
		return DefRecord{}, 0, nil
	}
	var d DefRecord
	if err := json.Unmarshal(resp.Kvs[0].Value, &d); err != nil {
		return DefRecord{}, 0, fmt.Errorf("decode %s: %w", key, err)
	}
	return d, resp.Kvs[0].ModRevision, nil
}

// casDef writes def at key if its mod revision is still rev (0: absent);
// false when another write came first.
func (s *Store) casDef(ctx context.Context, key string, rev int64, def *DefRecord) (bool, error) {
	v, err := json.Marshal(def)
	if err != nil {
		return false, fmt.Errorf("encode %s: %w", key, err)
	}
	cmp := clientv3.Compare(clientv3.ModRevision(key), "=", rev)
	if rev == 0 {
		cmp = clientv3.Compare(clientv3.CreateRevision(key), "=", 0)
	}
	resp, err := s.etcd.Txn(ctx).If(cmp).Then(clientv3.OpPut(key, string(v))).Commit()
	if err != nil {
		return false, err
	}
	return resp.Succeeded, nil
}

// putBatchBytes bounds the values one PutFileDefs transaction writes, well
// under etcd's default request limit (--max-request-bytes, 1.5 MiB).
const putBatchBytes = 512 * 1024

// PutFileDefs is PutFileDef for every definition of kind in bodies (by
// name), in as few requests as the store's limits allow: the stored
// records are read by key (MaxTxnOps per transaction), and the ones that
// change are written in transactions of up to MaxTxnOps keys and about
// putBatchBytes, each guarded by every key's revision as read. A
// transaction another writer came first in is done again key by key
// (PutFileDef, with its retries). Each definition is validated before
// anything is written; nothing is written for an unchanged one. It
// returns the names it wrote, sorted. Errors as PutFileDef, naming the
// definition; on an error the definitions before it in name order may
// have been written.
func (s *Store) PutFileDefs(ctx context.Context, kind spec.DefKind, bodies map[string][]byte, agent string) ([]string, error) {
	if agent == "" {
		return nil, fmt.Errorf("store %ss from a file: no agent ID", kind)
	}
	names := make([]string, 0, len(bodies))
	for n := range bodies {
		names = append(names, n)
	}
	slices.Sort(names)
	defs := make(map[string]DefRecord, len(names))
	keys := make([]string, len(names))
	for i, n := range names {
		def, err := s.validDef(kind, n, bodies[n])
		if err != nil {
			return nil, err
		}
		defs[n] = def
		keys[i] = s.keys.DefDir(kind) + n
	}
	type stored struct {
		def DefRecord
		rev int64
	}
	old := make(map[string]stored, len(names))
	var bad error
	if err := GetKeys(ctx, s.etcd, s.maxTxnOps, keys, func(kv *mvccpb.KeyValue) {
		var d DefRecord
		if err := json.Unmarshal(kv.Value, &d); err != nil {
			bad = fmt.Errorf("decode %s: %w", kv.Key, err)
			return
		}
		old[strings.TrimPrefix(string(kv.Key), s.keys.DefDir(kind))] = stored{d, kv.ModRevision}
	}); err != nil {
		return nil, fmt.Errorf("store %ss from %s's file: %w", kind, agent, err)
	}
	if bad != nil {
		return nil, bad
	}
	var written []string
	var cmps []clientv3.Cmp
	var puts []clientv3.Op
	var batch []string
	size := 0
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		resp, err := s.etcd.Txn(ctx).If(cmps...).Then(puts...).Commit()
		if err != nil {
			return fmt.Errorf("store %d %ss (%s …) at %s: %w", len(batch), kind, batch[0], s.keys.DefDir(kind), err)
		}
		if resp.Succeeded {
			written = append(written, batch...)
		} else {
			// Another writer changed one of them meanwhile: key by key.
			for _, n := range batch {
				ok, err := s.PutFileDef(ctx, kind, n, bodies[n], agent)
				if err != nil {
					return err
				}
				if ok {
					written = append(written, n)
				}
			}
		}
		cmps, puts, batch, size = cmps[:0], puts[:0], batch[:0], 0
		return nil
	}
	for i, n := range names {
		def, o := defs[n], old[n]
		switch {
		case o.rev == 0:
			def.Files = []string{agent}
		case len(o.def.Files) > 0:
			def.Files = slices.Clone(o.def.Files)
			if !slices.Contains(def.Files, agent) {
				def.Files = append(def.Files, agent)
				slices.Sort(def.Files)
			}
		}
		if o.rev != 0 && o.def.Body == def.Body && slices.Equal(o.def.Files, def.Files) {
			continue
		}
		v, err := json.Marshal(def)
		if err != nil {
			return written, fmt.Errorf("encode %s: %w", keys[i], err)
		}
		if len(batch) > 0 && (len(batch) >= s.maxTxnOps || size+len(v) > putBatchBytes) {
			if err := flush(); err != nil {
				return written, err
			}
		}
		cmp := clientv3.Compare(clientv3.ModRevision(keys[i]), "=", o.rev)
		if o.rev == 0 {
			cmp = clientv3.Compare(clientv3.CreateRevision(keys[i]), "=", 0)
		}
		cmps, puts, batch = append(cmps, cmp), append(puts, clientv3.OpPut(keys[i], string(v))), append(batch, n)
		size += len(v)
	}
	if err := flush(); err != nil {
		return written, err
	}
	slices.Sort(written)
	return written, nil
}
