package store

import (
	"context"
	"sync"
	"time"

	"github.com/berthd/berth/internal/retry"
	"github.com/jonboulle/clockwork"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// watchRetry paces re-establishing a broken watch with berth's one
// jittered exponential backoff (internal/retry): 100 ms doubling to 2 s,
// as every store loop of package cluster.
var watchRetry = retry.Policy{Initial: 100 * time.Millisecond, Max: 2 * time.Second}

// WatchDirs returns a channel signalled once at the start, whenever a key
// under one of dirs is put or deleted, and again after a broken watch is
// re-established (jittered backoff); signals coalesce, and the channel is
// closed when ctx ends. WatchActions and WatchWorkload are built on it.
func WatchDirs(ctx context.Context, etcd clientv3.Watcher, dirs ...string) <-chan struct{} {
	out := make(chan struct{}, 1)
	signal := func() {
		select {
		case out <- struct{}{}:
		default:
		}
	}
	go func() {
		defer close(out)
		b := watchRetry.New()
		for ctx.Err() == nil {
			wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
			events := make(chan bool, len(dirs))
			var wg sync.WaitGroup
			for _, d := range dirs {
				wch := etcd.Watch(wctx, d, clientv3.WithPrefix(), clientv3.WithCreatedNotify())
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
			if !retry.Sleep(ctx, clockwork.NewRealClock(), b.NextBackOff()) {
				return
			}
		}
	}()
	return out
}
