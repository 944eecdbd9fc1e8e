package store

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/berthd/berth/spec"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// An agent stores its own file's definitions at every start (PutFileDefs,
// ReleaseFileDef): at thousands of definitions that is seconds of reading,
// validating and comparing before the agent joins, on a start that most
// often changes nothing. The applied/<id> record says which file (a
// digest the caller computes) was last applied in full, and how many
// definitions were stored then: while the file's digest is the same, no
// definition key has been written since the record and none deleted (the
// counts are the same), applying the file again would write nothing, and
// the agent skips it (FileUnchanged).

// AppliedRecord is the stored (JSON) value of applied/<id>.
type AppliedRecord struct {
	// Digest identifies the applied file (its bytes, and whatever else
	// the caller folds in, e.g. the agent's build).
	Digest string `json:"digest"`
	// Connectors and Groups count the stored definitions of each kind
	// just after the apply.
	Connectors int64 `json:"connectors"`
	Groups     int64 `json:"groups"`
}

// FileUnchanged reports whether agent's file of digest is applied and
// the stored definitions have not changed since: the record of
// MarkFileApplied holds digest, no key under connectors/ or groups/ was
// written after the record (etcd's mod revisions), and both directories
// hold as many keys as then (so none was deleted). It reads in one
// transaction (a count and a newest-key read per directory). It returns
// a store error, or an error naming a record that is not valid JSON.
func (s *Store) FileUnchanged(ctx context.Context, agent, digest string) (bool, error) {
	key := s.keys.FileApplied(agent)
	ops := []clientv3.Op{clientv3.OpGet(key)}
	for _, kind := range []spec.DefKind{spec.DefConnector, spec.DefGroup} {
		dir := s.keys.DefDir(kind)
		ops = append(ops, clientv3.OpGet(dir, clientv3.WithPrefix(), clientv3.WithCountOnly()),
			clientv3.OpGet(dir, clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithLimit(1),
				clientv3.WithSort(clientv3.SortByModRevision, clientv3.SortDescend)))
	}
	resp, err := s.etcd.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return false, fmt.Errorf("read %s: %w", key, err)
	}
	rec := resp.Responses[0].GetResponseRange()
	if len(rec.Kvs) == 0 {
		return false, nil
	}
	var r AppliedRecord
	if err := json.Unmarshal(rec.Kvs[0].Value, &r); err != nil {
		return false, fmt.Errorf("decode %s: %w", key, err)
	}
	at := rec.Kvs[0].ModRevision
	counts := []int64{r.Connectors, r.Groups}
	for i := range 2 {
		n, newest := resp.Responses[1+2*i].GetResponseRange(), resp.Responses[2+2*i].GetResponseRange()
		if n.Count != counts[i] || (len(newest.Kvs) > 0 && newest.Kvs[0].ModRevision > at) {
			return false, nil
		}
	}
	return r.Digest == digest, nil
}

// MarkFileApplied records that agent's file of digest has been applied in
// full (FileUnchanged), with the counts of the stored definitions now:
// the record is written only if no definition was written since they
// were counted (else the next start applies the file in full). It
// returns a store error.
func (s *Store) MarkFileApplied(ctx context.Context, agent, digest string) error {
	key := s.keys.FileApplied(agent)
	r := AppliedRecord{Digest: digest}
	var cmps []clientv3.Cmp
	for i, kind := range []spec.DefKind{spec.DefConnector, spec.DefGroup} {
		dir := s.keys.DefDir(kind)
		resp, err := s.etcd.Get(ctx, dir, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			return fmt.Errorf("count %ss: %w", kind, err)
		}
		if i == 0 {
			r.Connectors = resp.Count
		} else {
			r.Groups = resp.Count
		}
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(dir), "<", resp.Header.Revision+1).WithPrefix())
	}
	v, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encode %s: %w", key, err)
	}
	if _, err := s.etcd.Txn(ctx).If(cmps...).Then(clientv3.OpPut(key, string(v))).Commit(); err != nil {
		return fmt.Errorf("write %s: %w", key, err)
	}
	return nil
}
