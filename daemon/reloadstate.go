package daemon

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"sync"
	"time"

	"github.com/berthd/berth/api"
	"github.com/berthd/berth/config"
)

// confState is the configuration in force, which version of the file it
// is and how the last reload went: GET /v1/agent (config), the metrics
// berth_config_last_reload_successful and
// berth_config_last_reload_success_timestamp_seconds (Prometheus' names
// for its own reloads), and `berth reload`, which waits for Reloads to grow.
// Its methods may be called from any goroutine.
type confState struct {
	mu       sync.Mutex
	cfg      *config.Config // in force
	sha256   string         // of the file in force
	loadedAt time.Time      // when it was put in force
	// reloads counts reloads tried since the agent started.
	reloads uint64
	last    *api.Reload
	// lastOK and lastSuccess: the last reload (or, before any, the start)
	// succeeded; when the file was last put in force.
	lastOK      bool
	lastSuccess time.Time
}

// fileHash is the hex SHA-256 of data.
func fileHash(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// newConfState is the state of cfg, put in force at start (now).
func newConfState(cfg *config.Config, now time.Time) *confState {
	return &confState{cfg: cfg, sha256: cfg.SHA256, loadedAt: now, lastOK: true, lastSuccess: now}
}

// config returns the configuration in force.
func (c *confState) config() *config.Config {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cfg
}

// put puts cfg in force and returns the configuration it replaces; the
// reload's result is recorded once it has been applied (record).
func (c *confState) put(cfg *config.Config) (old *config.Config) {
	c.mu.Lock()
	defer c.mu.Unlock()
	old, c.cfg = c.cfg, cfg
	return old
}

// record ends one reload: of the file with hash sum, failed with err or
// put in force with changes and warnings.
func (c *confState) record(now time.Time, sum string, err error, changes []config.Change, warnings []*config.Problem) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reloads++
	r := &api.Reload{Seq: c.reloads, At: now, Successful: err == nil, SHA256: sum, Changes: []string{}}
	if err != nil {
		r.Error = strings.TrimSpace(err.Error())
		c.lastOK = false
	} else {
		c.sha256, c.loadedAt, c.lastOK, c.lastSuccess = sum, now, true, now
		for _, ch := range changes {
			r.Changes = append(r.Changes, ch.String())
		}
		for _, w := range warnings {
			r.Warnings = append(r.Warnings, w.Error())
		}
	}
	c.last = r
}

// info is the state as GET /v1/agent reports it.
func (c *confState) info(file string) api.AgentConfig {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := api.AgentConfig{File: file, SHA256: c.sha256, LoadedAt: c.loadedAt, Reloads: c.reloads}
	if c.last != nil {
		r := *c.last
		out.LastReload = &r
	}
	return out
}

// lastReload reports whether the last reload (or, before any, the start)
// succeeded and when the file was last put in force.
func (c *confState) lastReload() (ok bool, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lastOK, c.lastSuccess
}
