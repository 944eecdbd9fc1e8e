package source

import (
	"fmt"

	"github.com/berthd/berth/cluster"
	"github.com/berthd/berth/config"
	"github.com/berthd/berth/host"
)

// StoreConfig returns the cluster.Config of the [cluster] table c for the
// etcd at endpoints (c.Endpoints, or the embedded etcd's): its name,
// session TTL, rebalance delay, TLS files and etcd user. A password_file
// is read now (host.ReadPasswordFile), so that a changed password is
// used at the next connection. The caller sets Validate and OnRenew. It
// returns the error of reading password_file (unreadable, or readable by
// group or others).
func StoreConfig(c config.Cluster, endpoints []string) (cluster.Config, error) {
	cc := cluster.Config{
		Name:           c.Name,
		Endpoints:      endpoints,
		SessionTTL:     c.SessionTTL,
		RebalanceDelay: c.RebalanceDelay,
		Username:       c.Username,
		Password:       c.Password,
	}
	if t := c.TLS; t.Enabled() {
		cc.TLS = &cluster.TLSConfig{CA: t.CA, Cert: t.Cert, Key: t.Key, ServerName: t.ServerName}
	}
	if c.PasswordFile != "" {
		pw, err := host.ReadPasswordFile(c.PasswordFile)
		if err != nil {
			return cc, fmt.Errorf("cluster.password_file: %w", err)
		}
		cc.Password = pw
	}
	return cc, nil
}
