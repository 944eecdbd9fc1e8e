package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/berthd/berth/cluster"
	"github.com/berthd/berth/limits"
	"github.com/berthd/berth/supervisor"
)

// connectTimeout bounds the first read from the store: a stopped agent's
// loopback etcd or an unreachable cluster is reported after this long.
const connectTimeout = 5 * time.Second

// connectCluster opens a client of the cluster store that the agent
// configured in the file config uses: [cluster] name, endpoints and tls.
// With no endpoints the agent runs an embedded etcd, whose client URL it
// writes to cluster.EndpointFile(agent.data_dir) while it runs; that file
// is read here. The client validates definitions with
// supervisor.Validator(). It returns an error saying what to check when the
// file does not validate, when the agent's embedded etcd is not running
// (no endpoint file, or its URL does not answer) or when the configured
// endpoints do not answer before ctx ends.
func connectCluster(ctx context.Context, config string) (*cluster.Client, error) {
	cfg, err := limits.Load(config)
	if err != nil {
		return nil, err
	}
	cc := cluster.Config{
		Name:       cfg.Cluster.Name,
		Endpoints:  cfg.Cluster.Endpoints,
		SessionTTL: cfg.Cluster.SessionTTL,
		Validate:   supervisor.Validator(),
	}
	if t := cfg.Cluster.TLS; t.CA != "" || t.Cert != "" {
		cc.TLS = &cluster.TLSConfig{CA: t.CA, Cert: t.Cert, Key: t.Key}
	}
	embedded := len(cc.Endpoints) == 0
	if embedded {
		file := cluster.EndpointFile(cfg.Agent.DataDir)
		b, err := os.ReadFile(file)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return nil, fmt.Errorf("%s has no [cluster] endpoints, so the agent runs an embedded etcd, but %s does not exist: is the agent running (berth agent --config %s)?", config, file, config)
		case err != nil:
			return nil, fmt.Errorf("%s has no [cluster] endpoints; read the agent's embedded etcd address: %w", config, err)
		}
		url := strings.TrimSpace(string(b))
		if url == "" {
			return nil, fmt.Errorf("%s has no [cluster] endpoints, and %s is empty: is the agent running?", config, file)
		}
		cc.Endpoints = []string{url}
	}
	cctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	c, err := cluster.Connect(cctx, cc)
	if err != nil {
		if embedded {
			return nil, fmt.Errorf("the agent's embedded etcd at %s (from %s) does not answer: is the agent running? %w", cc.Endpoints[0], cluster.EndpointFile(cfg.Agent.DataDir), err)
		}
		return nil, fmt.Errorf("cluster %s (from %s): %w", cc.Name, config, err)
	}
	return c, nil
}

// withStore connects to the cluster store of the agent file config and runs
// f with a context bounded by storeTimeout. An error from connecting or
// from f is printed as "berth CMD: ..." and gives exit status 1.
func withStore(cmd, config string, f func(ctx context.Context, c *cluster.Client) error) int {
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	c, err := connectCluster(ctx, config)
	if err == nil {
		err = f(ctx, c)
		c.Close()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "berth %s: %v\n", cmd, err)
		return 1
	}
	return 0
}

// printJSON writes v to standard output as indented JSON (the --json of
// every command).
func printJSON(v any) {
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
