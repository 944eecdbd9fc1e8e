package cluster

import (
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// WatchWorkload returns a channel that is signalled (never closed before ctx
// ends) once at the start and whenever a connector or group definition is
// put or deleted; the receiver then reads Connectors and Groups afresh.
// Signals coalesce: a slow reader sees one signal for many changes. When
// the watch breaks (etcd compacted its history or lost its leader) it is
// re-established (jittered backoff) and signalled again, so no change is
// missed. The channel is closed when ctx ends.
//
// Every change of any definition signals every watcher, and the receiver
// then reads the whole workload: this suits tools and small clusters. An
// agent follows its own share instead (WatchShare), whose definition
// revisions say which definitions to read (Definitions).
func (c *Client) WatchWorkload(ctx context.Context) <-chan struct{} {
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
			// Every definition lives under <prefix>/connectors/ or
			// <prefix>/groups/: one watch each.
			wch := c.etcd.Watch(wctx, c.defDir(KindConnector), clientv3.WithPrefix(), clientv3.WithCreatedNotify())
			gch := c.etcd.Watch(wctx, c.defDir(KindGroup), clientv3.WithPrefix(), clientv3.WithCreatedNotify())
			signal() // (re)started: whatever happened before is read afresh
			broken := false
			for !broken {
				select {
				case wr, ok := <-wch:
					if !ok || wr.Err() != nil {
						broken = true
					} else if len(wr.Events) > 0 {
						b.Reset()
						signal()
					}
				case wr, ok := <-gch:
					if !ok || wr.Err() != nil {
						broken = true
					} else if len(wr.Events) > 0 {
						b.Reset()
						signal()
					}
				}
			}
			cancel()
			if !pause(ctx, b) {
				return
			}
		}
	}()
	return out
}
