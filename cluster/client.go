package cluster

import (
	"context"
	"fmt"
	"time"

	"github.com/berthd/berth/assign"
	"github.com/berthd/berth/cluster/store"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// dialTimeout bounds the first connection to etcd.
const dialTimeout = 5 * time.Second

// Client is a connection to the cluster store, with the cluster's key prefix
// applied. It is safe for concurrent use.
type Client struct {
	// Store is the records of the cluster's store (definitions, target
	// states, restart requests, member records): its methods are the
	// Client's.
	*store.Store
	cfg     Config
	etcd    *clientv3.Client
	keys    store.Keys                           // the key layout, under "/berth/<name>/"
	compute func(assign.Input) assign.Assignment // assign.Compute; replaced only in tests
	// waveTimeout overrides defaultClaimWaveTimeout (tests only).
	waveTimeout time.Duration
}

// Connect opens an etcd client for cfg (TLS when cfg.TLS is set, as the
// etcd user cfg.Username when set) and checks that the store answers a
// read of the cluster's prefix within ctx. It returns an error when cfg is
// invalid (see Config), when the TLS files cannot be loaded, when the user
// cannot authenticate, when the user's role does not grant reading the
// prefix, or when no endpoint answers before ctx ends.
func Connect(ctx context.Context, cfg Config) (*Client, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	ecfg := clientv3.Config{
		Endpoints:   cfg.Endpoints,
		DialTimeout: dialTimeout,
		Logger:      zap.NewNop(),
		Context:     context.Background(),
		Username:    cfg.Username,
		Password:    cfg.Password,
		// The client refuses to send more than etcd accepts; the packing
		// of transactions keeps below it (see MaxRequestBytes).
		MaxCallSendMsgSize: cfg.MaxRequestBytes,
	}
	if cfg.Traffic != nil {
		ecfg.DialOptions = append(ecfg.DialOptions, grpc.WithStatsHandler(trafficHandler{cfg.Traffic}))
	}
	if cfg.TLS != nil {
		info := transport.TLSInfo{CertFile: cfg.TLS.Cert, KeyFile: cfg.TLS.Key, TrustedCAFile: cfg.TLS.CA, ServerName: cfg.TLS.ServerName}
		tc, err := info.ClientConfig()
		if err != nil {
			return nil, fmt.Errorf("load etcd client TLS (ca %s, cert %s): %w", cfg.TLS.CA, cfg.TLS.Cert, err)
		}
		ecfg.TLS = tc
	}
	cli, err := clientv3.New(ecfg)
	if err != nil {
		return nil, fmt.Errorf("connect etcd %v: %w", cfg.Endpoints, err)
	}
	keys := store.NewKeys(cfg.Name)
	c := &Client{Store: store.New(cli, keys, cfg.MaxTxnOps, cfg.Validate), cfg: cfg, etcd: cli, keys: keys, compute: assign.Compute}
	// One key, not a count of the prefix: that would scan every claim.
	if _, err := cli.Get(ctx, c.keys.Head()); err != nil {
		cli.Close()
		return nil, fmt.Errorf("connect etcd %v: read %s: %w", cfg.Endpoints, c.keys.Prefix(), err)
	}
	return c, nil
}

// Close closes the etcd connection. Sessions made from this client end
// (their renewals fail) and must be closed first to leave cleanly.
func (c *Client) Close() error {
	if err := c.etcd.Close(); err != nil {
		return fmt.Errorf("close etcd client: %w", err)
	}
	return nil
}

// Config returns the client's configuration with defaults applied.
func (c *Client) Config() Config { return c.cfg }
