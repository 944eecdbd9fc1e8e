package embedetcd

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// startTimeout bounds how long Start waits for the single
// node to elect itself and serve clients.
const startTimeout = 30 * time.Second

// Server is a single-node etcd server running inside the agent process,
// listening on loopback only. It is what an agent uses when no `endpoints`
// are configured (docs/design.md "Membership, claims and fencing"): one host works out
// of the box.
type Server struct {
	closing   *atomic.Bool
	etcd      *embed.Etcd
	dataDir   string
	endpoints []string
}

// Start starts a single-node etcd whose data (WAL and snapshots)
// persists under dataDir/etcd, so the workload store, published assignment
// and generation survive an agent restart.
//
// Both the client and the peer listener bind 127.0.0.1 on a port the kernel
// chooses (port 0), never a fixed port: a fixed 2379/2380 would collide with
// a system etcd (Debian's etcd-server) or a second agent under test, and
// asking the kernel avoids the race of probing for a free port first. The
// chosen client URL is returned by Endpoints and written to
// dataDir/etcd/endpoint (EndpointFile) so that other local commands
// (`berth apply`, `berth status`) can find the store of a running agent.
// The server logs only errors, to stderr.
//
// It returns an error when dataDir cannot be created, when etcd refuses the
// configuration or its data directory (e.g. a corrupt WAL), or when the node
// is not ready within 30 s. When etcd cannot go on at all (it logs at panic
// or fatal level: its WAL cannot be created, a commit to its database
// failed — a full or broken data_dir), it ends the process, during start
// or at any time after; see StartWithFatal to act first.
func Start(dataDir string) (*Server, error) {
	return StartWithFatal(dataDir, nil)
}

// catchUpEntries is how many applied raft entries the embedded etcd keeps
// in memory (etcd's SnapshotCatchUpEntries; its default is 5,000).
const catchUpEntries = 100

// tickMs and electionMs are the embedded etcd's raft tick and election
// timeout, in milliseconds (etcd's --heartbeat-interval and
// --election-timeout; defaults 100 and 1000; etcd's tuning guide asks
// the election timeout to be at least ten ticks).
const (
	tickMs     = 10
	electionMs = 100
)

// StartWithFatal is Start, except that when etcd cannot go
// on (a panic- or fatal-level entry of its log, during start or at any time
// after) onFatal is called with the entry's message and error, e.g.
// "failed to create WAL: no space left on device", and the process then
// exits with status 1 — etcd's own code does not expect to continue past
// such an entry. onFatal runs on the failing etcd goroutine; it must finish
// what cannot wait (kill the jobs whose claims are in this store) and
// return. A nil onFatal keeps etcd's behaviour (panic, or exit 1).
func StartWithFatal(dataDir string, onFatal func(error)) (*Server, error) {
	dir := filepath.Join(dataDir, "etcd")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create embedded etcd data directory %s: %w", dir, err)
	}
	loop := url.URL{Scheme: "http", Host: "127.0.0.1:0"}
	cfg := embed.NewConfig()
	cfg.Name = "berth"
	cfg.Dir = dir
	cfg.ListenClientUrls = []url.URL{loop}
	cfg.AdvertiseClientUrls = []url.URL{loop}
	cfg.ListenPeerUrls = []url.URL{loop}
	cfg.AdvertisePeerUrls = []url.URL{loop}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	closing := new(atomic.Bool)
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(quietLogger(closing, onFatal))
	// Keep the store small: members, claims and assignments are rewritten
	// often; history older than an hour is of no use to watchers.
	cfg.AutoCompactionMode = embed.CompactorModePeriodic
	cfg.AutoCompactionRetention = "1h"
	// Keep few raft entries in memory: with one member no follower ever
	// catches up from them, and etcd's default (5,000 after each
	// in-memory snapshot) holds the start's big writes (every definition,
	// every claim, each assignment) for the agent's life: ≈ 0.4 KiB per
	// job at 2,000 jobs. They are in the WAL and applied to the store.
	cfg.SnapshotCatchUpEntries = catchUpEntries
	// One member elects itself: it waits out one election timeout when
	// it restarts from its WAL (etcd's default 1 s, ten ticks of 100 ms),
	// which is a second of every agent start with no peer to hear from.
	// A short tick costs one timer per tick and no network.
	cfg.TickMs, cfg.ElectionMs = tickMs, electionMs

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("start embedded etcd in %s: %w", dir, err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("start embedded etcd in %s: %w", dir, err)
	case <-time.After(startTimeout):
		e.Server.Stop()
		e.Close()
		return nil, fmt.Errorf("start embedded etcd in %s: not ready after %s", dir, startTimeout)
	}
	if len(e.Clients) == 0 {
		e.Close()
		return nil, errors.New("start embedded etcd: no client listener")
	}
	em := &Server{closing: closing, etcd: e, dataDir: dataDir, endpoints: []string{"http://" + e.Clients[0].Addr().String()}}
	if err := os.WriteFile(EndpointFile(dataDir), []byte(em.endpoints[0]+"\n"), 0o600); err != nil {
		e.Close()
		return nil, fmt.Errorf("write embedded etcd endpoint file: %w", err)
	}
	return em, nil
}

// EndpointFile is the file, under an agent's data directory, in which a
// running embedded etcd records its client URL (one line, e.g.
// "http://127.0.0.1:41234"). It is rewritten on every start.
func EndpointFile(dataDir string) string {
	return filepath.Join(dataDir, "etcd", "endpoint")
}

// Endpoints returns the client URLs of the embedded server (one loopback
// URL), to put in cluster.Config.Endpoints.
func (e *Server) Endpoints() []string { return append([]string(nil), e.endpoints...) }

// Close stops the server gracefully and releases its listeners and data
// directory lock, and removes the endpoint file. Clients connected to it
// see their requests fail; sessions held through it end at their local
// deadline.
func (e *Server) Close() {
	e.closing.Store(true)
	e.etcd.Close()
	_ = os.Remove(EndpointFile(e.dataDir))
}

// quietLogger logs the embedded server's errors as JSON lines on stderr and
// nothing below error level. Once closing is set it drops everything: a
// graceful Close makes etcd report each listener it shuts as an error
// ("use of closed network connection"), which is noise, not a fault. With
// onFatal, panic and fatal entries go to storeFailure.
func quietLogger(closing *atomic.Bool, onFatal func(error)) *zap.Logger {
	enc := zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig())
	core := zapcore.NewCore(enc, zapcore.Lock(os.Stderr), zapcore.ErrorLevel)
	var opts []zap.Option
	if onFatal != nil {
		opts = append(opts, zap.WithPanicHook(storeFailure{onFatal}), zap.WithFatalHook(storeFailure{onFatal}))
	}
	return zap.New(closingFilter{Core: core, closing: closing}, opts...)
}

// storeFailure is the hook of the embedded server's panic and fatal log
// entries: it tells onFatal the entry's message and its "error" field, then
// exits the process with status 1.
type storeFailure struct{ onFatal func(error) }

// OnWrite implements zapcore.CheckWriteHook; it does not return.
func (h storeFailure) OnWrite(ce *zapcore.CheckedEntry, fields []zapcore.Field) {
	h.onFatal(entryError(ce.Entry, fields))
	os.Exit(1)
}

// entryError is a log entry as an error: its message, and its "error"
// field when it has one.
func entryError(e zapcore.Entry, fields []zapcore.Field) error {
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range fields {
		f.AddTo(enc)
	}
	if v, ok := enc.Fields["error"]; ok {
		return fmt.Errorf("%s: %v", e.Message, v)
	}
	return errors.New(e.Message)
}

// closingFilter is a zapcore.Core that drops every entry once closing is set.
type closingFilter struct {
	zapcore.Core
	closing *atomic.Bool
}

func (f closingFilter) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if f.closing.Load() {
		return ce
	}
	return f.Core.Check(e, ce)
}

func (f closingFilter) With(fields []zapcore.Field) zapcore.Core {
	return closingFilter{Core: f.Core.With(fields), closing: f.closing}
}
