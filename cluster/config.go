package cluster

import (
	"errors"
	"fmt"
	"time"

	"github.com/berthd/berth/cluster/store"
	"github.com/berthd/berth/config"
)

// Defaults of etcd's request limits (etcd server flags --max-txn-ops and
// --max-request-bytes): every transaction this package sends stays within
// Config.MaxTxnOps operations and Config.MaxRequestBytes bytes.
const (
	DefaultMaxTxnOps       = 128         // operations per transaction
	DefaultMaxRequestBytes = 1536 * 1024 // bytes per request (1.5 MiB)
)

// Config says which etcd to use and how membership behaves.
type Config struct {
	// Name is the cluster name; every key lives under "/berth/<Name>/".
	// Empty means config.DefaultClusterName. It must not contain '/'.
	Name string
	// Endpoints are etcd client URLs ("http://10.0.0.1:2379"). Connect
	// requires at least one; with none configured the agent starts an
	// Embedded server and passes its Endpoints.
	Endpoints []string
	// SessionTTL is the session lease TTL, whole seconds (etcd leases have
	// one-second granularity), at least 2 s. Zero means config.DefaultSessionTTL.
	SessionTTL time.Duration
	// RebalanceDelay is how long a departed member's jobs stay unassigned
	// before they are given to others (rule 5; Kafka Connect's
	// scheduled.rebalance.max.delay.ms). Zero: reassign at once.
	RebalanceDelay time.Duration
	// TLS, when set, makes the client use TLS with these files.
	TLS *TLSConfig
	// Username and Password authenticate the client as an etcd user
	// (etcd's role-based access control; the user's role must grant read
	// and write on the prefix "/berth/<Name>/", which holds every key the
	// cluster uses). Empty Username: no user, or the common name of the
	// TLS client certificate when the server runs with --client-cert-auth.
	Username, Password string
	// Validate checks connector and group definitions before they are
	// stored; PutConnector and PutGroup fail with ErrNoValidator without it.
	Validate Validator
	// OnRenew, when set, is called after every successful lease renewal
	// with its round-trip time (the source of berth_lease_renew_seconds).
	// It is called from the renewal goroutine and must not block.
	OnRenew func(latency time.Duration)
	// MaxTxnOps is the etcd servers' --max-txn-ops: the most operations
	// (puts, deletes, reads) one transaction may hold. Publication, claims
	// and releases are split into transactions of at most this many. Zero
	// means DefaultMaxTxnOps (128); otherwise at least 4.
	MaxTxnOps int
	// MaxRequestBytes is the etcd servers' --max-request-bytes: the largest
	// request, bytes. Every transaction is kept under 7/8 of it (the rest
	// covers the encoding's framing). Zero means DefaultMaxRequestBytes
	// (1.5 MiB); otherwise at least 16 KiB.
	MaxRequestBytes int
	// ClaimWindow is the most jobs the leader hands out in one go before
	// it has seen their new members claim them: a publication that gives
	// members more new jobs than this writes their shares in waves, each
	// when the jobs of the previous ones have been claimed (or 2 s have
	// passed), so that a cold start of many members does not queue so many
	// lease-bound writes in etcd at once that lease renewals miss their
	// deadline. Zero means DefaultClaimWindow (8,192); negative: no limit.
	ClaimWindow int
	// SoleMember says the store is this agent's alone (the embedded etcd
	// on loopback): no other member can join, so a new cluster's first
	// assignment is published after the ordinary calm of 100 ms, not the
	// wait of 1 s (at most 10 s) that lets the members of a new cluster
	// gather before the first generation.
	SoleMember bool
	// OnPublish, when set, is called by the leader after every
	// publication it completed, with what it cost. It is called from the
	// leader's goroutine and must not block.
	OnPublish func(PublishStats)
	// Traffic, when set, counts the bytes this client exchanges with etcd
	// (see Traffic). Nil: nothing is counted.
	Traffic *Traffic
}

// TLSConfig names the PEM files for a TLS connection to etcd.
type TLSConfig struct {
	CA         string // CA bundle that signed the servers' certificates (empty: the system's)
	Cert       string // client certificate (empty: no client authentication)
	Key        string // client certificate's private key
	ServerName string // name the servers' certificates must carry (empty: the endpoint's host)
}

// Errors returned by this package; test with errors.Is.
var (
	// ErrSessionLost: the session's lease expired or could not be renewed
	// before its local deadline; the caller must fence and Join again.
	ErrSessionLost = errors.New("cluster session lost")
	// ErrNotLeader: a leader-only write was refused because this client's
	// election key is no longer the leader key (a stale leader).
	ErrNotLeader = errors.New("not the cluster leader")
	// ErrMemberExists: another live lease holds the member record of this
	// ID (a second agent with the same ID, or this agent's previous session
	// that the server has not yet expired; retry after SessionTTL).
	ErrMemberExists = errors.New("member ID already registered")
	// ErrNoValidator: a workload write without Config.Validate
	// (store.ErrNoValidator).
	ErrNoValidator = store.ErrNoValidator
	// ErrNotFound: the named connector or group does not exist
	// (store.ErrNotFound).
	ErrNotFound = store.ErrNotFound
)

// withDefaults returns cfg with defaults applied, or an error naming the
// first invalid field.
func (cfg Config) withDefaults() (Config, error) {
	if cfg.Name == "" {
		cfg.Name = config.DefaultClusterName
	}
	if err := store.CheckName("cluster name", cfg.Name); err != nil {
		return cfg, err
	}
	if len(cfg.Endpoints) == 0 {
		return cfg, errors.New("cluster config: no etcd endpoints")
	}
	if cfg.SessionTTL == 0 {
		cfg.SessionTTL = config.DefaultSessionTTL
	}
	if cfg.SessionTTL < 2*time.Second || cfg.SessionTTL%time.Second != 0 {
		return cfg, fmt.Errorf("cluster config: session TTL %s: must be whole seconds, at least 2s", cfg.SessionTTL)
	}
	if cfg.RebalanceDelay < 0 {
		return cfg, fmt.Errorf("cluster config: rebalance delay %s is negative", cfg.RebalanceDelay)
	}
	if cfg.ClaimWindow == 0 {
		cfg.ClaimWindow = DefaultClaimWindow
	}
	if cfg.MaxTxnOps == 0 {
		cfg.MaxTxnOps = DefaultMaxTxnOps
	}
	if cfg.MaxTxnOps < 4 {
		return cfg, fmt.Errorf("cluster config: max txn ops %d: must be at least 4 (etcd's default is %d)", cfg.MaxTxnOps, DefaultMaxTxnOps)
	}
	if cfg.MaxRequestBytes == 0 {
		cfg.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if cfg.MaxRequestBytes < 16*1024 {
		return cfg, fmt.Errorf("cluster config: max request bytes %d: must be at least 16384 (etcd's default is %d)", cfg.MaxRequestBytes, DefaultMaxRequestBytes)
	}
	return cfg, nil
}
