package daemon

import (
	"fmt"
	"os"

	"github.com/berthd/berth/cluster/embedetcd"
	"github.com/berthd/berth/config"
)

// embeddedStart is the embedded etcd store starting in the background
// (startEmbedded): join takes it once it has started.
type embeddedStart struct {
	done  chan struct{}
	srv   *embedetcd.Server
	err   error
	taken bool
}

// startEmbedded starts the embedded etcd under data_dir in a goroutine
// when [cluster] names no endpoints, and returns at once; nil when it
// names some (the store is elsewhere). The caller defers discard. The
// store's fatal error later (it cannot go on) makes the agent kill every
// job and exit (storeFailed): a.hier and a.guard are set before.
func (a *Agent) startEmbedded(cfg *config.Config) *embeddedStart {
	if len(cfg.Cluster.Endpoints) > 0 {
		return nil
	}
	s := &embeddedStart{done: make(chan struct{})}
	dir := cfg.Agent.DataDir
	go func() {
		defer close(s.done)
		if err := os.MkdirAll(dir, 0o750); err != nil {
			s.err = fmt.Errorf("embedded etcd: create data_dir %s: %w", dir, err)
			return
		}
		s.srv, s.err = embedetcd.StartWithFatal(dir, func(err error) {
			a.log.Error("the embedded etcd cannot go on; the agent exits", "data_dir", dir, "error", err)
			a.storeFailed(err)
		})
		if s.err != nil {
			s.err = fmt.Errorf("start embedded etcd in %s: %w", dir, s.err)
			return
		}
		a.log.Info("embedded etcd started", "endpoints", s.srv.Endpoints(), "data_dir", dir)
	}()
	return s
}

// take waits for the store to have started and hands it to the caller,
// who stops it (Agent.leave). Errors: the store did not start (the data
// directory cannot be made, etcd refused to start).
func (s *embeddedStart) take() (*embedetcd.Server, error) {
	<-s.done
	if s.err != nil {
		return nil, s.err
	}
	s.taken = true
	return s.srv, nil
}

// discard waits for the store's start and stops it unless take handed it
// over: the agent returned before it joined. Safe on nil.
func (s *embeddedStart) discard() {
	if s == nil {
		return
	}
	<-s.done
	if !s.taken && s.srv != nil {
		s.srv.Close()
	}
}
