package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/berthd/berth/cluster"
	"github.com/berthd/berth/cluster/embedetcd"
	"github.com/berthd/berth/config"
	"github.com/berthd/berth/host"
	"github.com/berthd/berth/source"
	"github.com/berthd/berth/workload"
)

// storeTimeout bounds one CLI command's work against the cluster store.
const storeTimeout = 30 * time.Second

// connectTimeout bounds the first read from the store: a stopped agent's
// loopback etcd or an unreachable cluster is reported after this long.
const connectTimeout = 5 * time.Second

// connectCluster opens a client of the cluster store that the agent file
// path configures: [cluster] name, endpoints, tls and the etcd user
// (source.StoreConfig). With no endpoints the agent runs an embedded etcd,
// whose client URL it writes to embedetcd.EndpointFile(agent.data_dir) while
// it runs; that file is read here. The client validates definitions with
// workload.Validator against this host. It returns an error saying what to
// check when the file does not validate (exit status 2), when its
// password_file cannot be used, when the agent's embedded etcd is not
// running (no endpoint file, or its URL does not answer) or when the
// configured endpoints do not answer before ctx ends.
func connectCluster(ctx context.Context, path string, host *host.Host) (*cluster.Client, error) {
	// Only [cluster] and data_dir are needed: the jobs' users and programs
	// are the agent's concern, not a reason to refuse reading the store.
	cfg, err := config.Load(path, host.LimitsOnly())
	if err != nil {
		return nil, configError(err)
	}
	cc, err := source.StoreConfig(cfg.Cluster, cfg.Cluster.Endpoints)
	if err != nil {
		return nil, err
	}
	cc.Validate = workload.Validator(host)
	embedded := len(cc.Endpoints) == 0
	if embedded {
		file := embedetcd.EndpointFile(cfg.Agent.DataDir)
		b, err := os.ReadFile(file)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return nil, fmt.Errorf("%s has no [cluster] endpoints, so the agent runs an embedded etcd, but %s does not exist: is the agent running (berth agent --config %s)?", path, file, path)
		case err != nil:
			return nil, fmt.Errorf("%s has no [cluster] endpoints; read the agent's embedded etcd address: %w", path, err)
		}
		url := strings.TrimSpace(string(b))
		if url == "" {
			return nil, fmt.Errorf("%s has no [cluster] endpoints, and %s is empty: is the agent running?", path, file)
		}
		cc.Endpoints = []string{url}
	}
	cctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	c, err := cluster.Connect(cctx, cc)
	if err != nil {
		if embedded {
			return nil, fmt.Errorf("the agent's embedded etcd at %s (from %s) does not answer: is the agent running? %w", cc.Endpoints[0], embedetcd.EndpointFile(cfg.Agent.DataDir), err)
		}
		return nil, fmt.Errorf("cluster %s (from %s): %w", cc.Name, path, err)
	}
	return c, nil
}

// withStore connects to the cluster store of the agent file path and runs
// f with a context bounded by storeTimeout.
func withStore(ctx context.Context, path string, host *host.Host, f func(ctx context.Context, c *cluster.Client) error) error {
	ctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	c, err := connectCluster(ctx, path, host)
	if err != nil {
		return err
	}
	defer c.Close()
	return f(ctx, c)
}
