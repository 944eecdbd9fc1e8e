package store

import (
	"context"

	"github.com/berthd/berth/spec"
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
func (s *Store) WatchWorkload(ctx context.Context) <-chan struct{} {
	// Every definition lives under <prefix>/connectors/ or <prefix>/groups/.
	return WatchDirs(ctx, s.etcd, s.keys.DefDir(spec.DefConnector), s.keys.DefDir(spec.DefGroup))
}
