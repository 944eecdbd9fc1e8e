package cluster

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/berthd/berth/assign"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Update rewrites the session's member record with m's protocol and static
// declarations (a reloaded [static] table), under the same lease, so the
// leader reassigns without the member leaving. It only writes while the
// record is still this session's (same lease).
//
// Errors: m.ID is not the session's member; the record is no longer this
// session's (ErrSessionLost); the store cannot be reached before ctx ends.
func (s *Session) Update(ctx context.Context, m assign.Member) error {
	s.mu.Lock()
	rec := s.record
	s.mu.Unlock()
	if m.ID != rec.ID {
		return fmt.Errorf("update member record: session is %s, not %s", rec.ID, m.ID)
	}
	rec.Protocol, rec.Connectors, rec.Tasks = m.Protocol, m.Connectors, m.Tasks
	body, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("encode member record %s: %w", m.ID, err)
	}
	key := s.c.keys.Member(m.ID)
	resp, err := s.c.etcd.Txn(ctx).
		If(clientv3.Compare(clientv3.LeaseValue(key), "=", s.lease)).
		Then(clientv3.OpPut(key, string(body), clientv3.WithLease(s.lease))).
		Commit()
	if err != nil {
		return fmt.Errorf("update member record %s: %w", key, err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("update member record %s: %w", key, ErrSessionLost)
	}
	s.mu.Lock()
	s.record = rec
	s.mu.Unlock()
	return nil
}
