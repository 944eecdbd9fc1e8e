package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/berthd/berth/config"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Operator actions live in the store beside the workload, so that every
// agent sees them and they outlast any one agent:
//
//	<prefix>/targets/<connector>         a connector's target state (Target)
//	<prefix>/restarts/<connector>/<job>  one job's pending restart (RestartRequest)
//
// Both are written only while the connector's definition exists, keep
// across updates of the definition (as Kafka Connect keeps a connector's
// target state), and are deleted with it.

// Target is a connector's target state as an operator set it.
type Target struct {
	// State is running, paused or stopped.
	State config.TargetState `json:"state"`
	// By says who asked: "api 127.0.0.1:41234 (agent host-a)", "cli root@host-a".
	By string `json:"by"`
	// At is when the request was stored, by the requester's clock (UTC).
	At time.Time `json:"at"`
}

// RestartRequest is one job's pending restart (Kafka Connect's KIP-745
// restart, for one job). The agent that runs the job carries it out once,
// then removes it with RestartDone.
type RestartRequest struct {
	Connector string `json:"connector"`
	Job       string `json:"job"`
	// OnlyFailed: restart the job only if it is FAILED when its agent
	// handles the request (KIP-745 onlyFailed).
	OnlyFailed bool `json:"only_failed"`
	// By says who asked; At is when (UTC, the requester's clock).
	By string    `json:"by"`
	At time.Time `json:"at"`
	// Rev is the store revision that wrote this request; it tells it from a
	// later request for the same job. Set by Actions.
	Rev int64 `json:"-"`
}

// Actions is every target state and pending restart, read at one store
// revision.
type Actions struct {
	// Targets maps a connector to its target state; a connector absent
	// here runs.
	Targets map[string]Target
	// Restarts maps a job ID to its pending restart request.
	Restarts map[string]RestartRequest
}

func (c *Client) targetKey(connector string) string { return c.key("targets", connector) }
func (c *Client) restartsDir(connector string) string {
	return c.key("restarts", connector) + "/"
}

// SetTarget stores connector's target state t, replacing any earlier one,
// in one transaction that succeeds only while the connector's definition
// exists. It returns ErrNotFound (wrapped) when it does not, an error when
// the name is not a valid key segment, or a store error.
func (c *Client) SetTarget(ctx context.Context, connector string, t Target) error {
	if err := checkName("connector name", connector); err != nil {
		return err
	}
	v, err := json.Marshal(t)
	if err != nil {
		return fmt.Errorf("encode target state of %s: %w", connector, err)
	}
	def := c.defDir(config.DefConnector) + connector
	resp, err := c.etcd.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(def), ">", 0)).
		Then(clientv3.OpPut(c.targetKey(connector), string(v))).
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
func (c *Client) RequestRestarts(ctx context.Context, connector string, jobs []string, onlyFailed bool, by string, at time.Time) error {
	if err := checkName("connector name", connector); err != nil {
		return err
	}
	var ops []clientv3.Op
	for _, job := range jobs {
		if err := checkName("job", job); err != nil {
			return err
		}
		v, err := json.Marshal(RestartRequest{Connector: connector, Job: job, OnlyFailed: onlyFailed, By: by, At: at.UTC()})
		if err != nil {
			return fmt.Errorf("encode restart of %s: %w", job, err)
		}
		ops = append(ops, clientv3.OpPut(c.restartsDir(connector)+job, string(v)))
	}
	def := c.defDir(config.DefConnector) + connector
	resp, err := c.etcd.Txn(ctx).
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
func (c *Client) RestartDone(ctx context.Context, r RestartRequest) error {
	key := c.restartsDir(r.Connector) + r.Job
	_, err := c.etcd.Txn(ctx).
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
func (c *Client) Actions(ctx context.Context) (Actions, error) {
	tdir, rdir := c.key("targets")+"/", c.key("restarts")+"/"
	resp, err := c.etcd.Txn(ctx).Then(
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
func (c *Client) WatchActions(ctx context.Context) <-chan struct{} {
	return c.watchDirs(ctx, c.key("targets")+"/", c.key("restarts")+"/")
}

// watchDirs returns a channel signalled once at the start, whenever a key
// under one of dirs is put or deleted, and again after a broken watch is
// re-established (jittered backoff); signals coalesce, and the channel is
// closed when ctx ends. WatchActions and WatchWorkload are built on it.
func (c *Client) watchDirs(ctx context.Context, dirs ...string) <-chan struct{} {
	out := make(chan struct{}, 1)
	signal := func() {
		select {
		case out <- struct{}{}:
		default:
		}
	}
	go func() {
		defer close(out)
		b := newBackoff()
		for ctx.Err() == nil {
			wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
			events := make(chan bool, len(dirs))
			var wg sync.WaitGroup
			for _, d := range dirs {
				wch := c.etcd.Watch(wctx, d, clientv3.WithPrefix(), clientv3.WithCreatedNotify())
				wg.Add(1)
				go func() {
					defer wg.Done()
					for wr := range wch {
						if wr.Err() != nil {
							break
						}
						if len(wr.Events) > 0 {
							select {
							case events <- true:
							case <-wctx.Done():
								return
							}
						}
					}
					select {
					case events <- false: // broken
					case <-wctx.Done():
					}
				}()
			}
			signal() // (re)started: whatever happened before is read afresh
			for ok := true; ok; {
				select {
				case ok = <-events:
					if ok {
						b.Reset()
						signal()
					}
				case <-wctx.Done():
					ok = false
				}
			}
			cancel()
			wg.Wait()
			if !pause(ctx, b) {
				return
			}
		}
	}()
	return out
}
