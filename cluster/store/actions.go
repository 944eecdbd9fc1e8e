package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/berthd/berth/spec"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Operator actions live in the store beside the workload, so that every
// agent sees them and they outlast any one agent (targets/, restarts/; see
// the package comment).

// Target is a connector's target state as an operator set it
// (spec.Target).
type Target = spec.Target

// RestartRequest is one job's pending restart (spec.RestartRequest). The
// agent that runs the job carries it out once, then removes it with
// RestartDone.
type RestartRequest = spec.RestartRequest

// Actions is every target state and pending restart, read at one store
// revision.
type Actions struct {
	// Targets maps a connector to its target state; a connector absent
	// here runs.
	Targets map[string]Target
	// Restarts maps a job ID to its pending restart request.
	Restarts map[string]RestartRequest
}

// SetTarget stores connector's target state t, replacing any earlier one,
// in one transaction that succeeds only while the connector's definition
// exists. It returns ErrNotFound (wrapped) when it does not, an error when
// the name is not a valid key segment, or a store error.
func (s *Store) SetTarget(ctx context.Context, connector string, t Target) error {
	if err := CheckName("connector name", connector); err != nil {
		return err
	}
	v, err := json.Marshal(t)
	if err != nil {
		return fmt.Errorf("encode target state of %s: %w", connector, err)
	}
	def := s.keys.DefDir(spec.DefConnector) + connector
	resp, err := s.etcd.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(def), ">", 0)).
		Then(clientv3.OpPut(s.keys.Target(connector), string(v))).
		Commit()
	if err != nil {
		return fmt.Errorf("set target state of connector %s to %s: %w", connector, t.State, err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("set target state of connector %s: %w", connector, ErrNotFound)
	}
	return nil
}

// RequestRestarts stores a restart request for each of jobs, all of
// connector, in one transaction that succeeds only while the connector's
// definition exists; a request replaces an earlier pending one for the same
// job. Which jobs belong to the connector is the caller's to know (the
// definition names them). It returns ErrNotFound (wrapped) when the
// connector does not exist, an error for a name that is not a valid key
// segment, or a store error.
func (s *Store) RequestRestarts(ctx context.Context, connector string, jobs []string, onlyFailed bool, by string, at time.Time) error {
	if err := CheckName("connector name", connector); err != nil {
		return err
	}
	var ops []clientv3.Op
	for _, job := range jobs {
		if err := CheckName("job", job); err != nil {
			return err
		}
		v, err := json.Marshal(RestartRequest{Connector: connector, Job: job, OnlyFailed: onlyFailed, By: by, At: at.UTC()})
		if err != nil {
			return fmt.Errorf("encode restart of %s: %w", job, err)
		}
		ops = append(ops, clientv3.OpPut(s.keys.RestartsDir(connector)+job, string(v)))
	}
	def := s.keys.DefDir(spec.DefConnector) + connector
	resp, err := s.etcd.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(def), ">", 0)).
		Then(ops...).
		Commit()
	if err != nil {
		return fmt.Errorf("request restart of %v (connector %s): %w", jobs, connector, err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("request restart (connector %s): %w", connector, ErrNotFound)
	}
	return nil
}

// RestartDone removes request r once its job's agent has carried it out:
// the key is deleted only if it still holds r (its revision is r.Rev), so
// that a later request for the same job is kept. Removing a request that is
// already gone is not an error. It returns a store error.
func (s *Store) RestartDone(ctx context.Context, r RestartRequest) error {
	key := s.keys.RestartsDir(r.Connector) + r.Job
	_, err := s.etcd.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(key), "=", r.Rev)).
		Then(clientv3.OpDelete(key)).
		Commit()
	if err != nil {
		return fmt.Errorf("remove the restart request of %s: %w", r.Job, err)
	}
	return nil
}

// Actions reads every target state and pending restart at one revision.
// A value that does not decode is an error naming its key.
func (s *Store) Actions(ctx context.Context) (Actions, error) {
	tdir, rdir := s.keys.TargetsDir(), s.keys.RestartsRoot()
	resp, err := s.etcd.Txn(ctx).Then(
		clientv3.OpGet(tdir, clientv3.WithPrefix()),
		clientv3.OpGet(rdir, clientv3.WithPrefix()),
	).Commit()
	if err != nil {
		return Actions{}, fmt.Errorf("read target states and restart requests: %w", err)
	}
	a := Actions{Targets: map[string]Target{}, Restarts: map[string]RestartRequest{}}
	for _, kv := range resp.Responses[0].GetResponseRange().Kvs {
		var t Target
		if err := json.Unmarshal(kv.Value, &t); err != nil {
			return Actions{}, fmt.Errorf("decode %s: %w", kv.Key, err)
		}
		a.Targets[strings.TrimPrefix(string(kv.Key), tdir)] = t
	}
	for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
		var r RestartRequest
		if err := json.Unmarshal(kv.Value, &r); err != nil {
			return Actions{}, fmt.Errorf("decode %s: %w", kv.Key, err)
		}
		r.Rev = kv.ModRevision
		a.Restarts[r.Job] = r
	}
	return a, nil
}

// WatchActions returns a channel that is signalled (never closed before
// ctx ends) once at the start and whenever a target state or restart
// request is written or deleted; the receiver then calls Actions. Signals
// coalesce; a broken watch is re-established and signalled again, so no
// change is missed. The channel is closed when ctx ends.
func (s *Store) WatchActions(ctx context.Context) <-chan struct{} {
	return WatchDirs(ctx, s.etcd, s.keys.TargetsDir(), s.keys.RestartsRoot())
}
