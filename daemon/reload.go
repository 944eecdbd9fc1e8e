package daemon

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"

	"time"

	"github.com/berthd/berth/config"
	"github.com/berthd/berth/workload"
)

// reloadTimeout bounds the store calls of a reload (applying the file's
// workload, updating the member record).
const reloadTimeout = 5 * time.Second

// Reload re-reads the configuration file. A file that fails validation, or
// whose workload the store refuses, is returned as an error and changes
// nothing; a good one is put in force: only the jobs whose definition
// changed are started, stopped, restarted (command, environment, user,
// group) or updated in place (limits, restart policy, stop timeout). It
// returns an error when the agent is not running.
func (a *Agent) Reload(ctx context.Context) error {
	select {
	case <-a.started:
	default:
		return fmt.Errorf("reload %s: the agent is not running yet", a.path)
	}
	a.reloadMu.Lock()
	defer a.reloadMu.Unlock()
	data, err := os.ReadFile(a.path)
	sum := fileHash(data)
	var cfg *config.Config
	if err != nil {
		err = fmt.Errorf("load config %s: %w", a.path, err)
	} else {
		cfg, err = config.Parse(a.path, data, a.host)
	}
	if err == nil {
		// The store gets the file's connectors and groups; a refusal
		// leaves the store and the running jobs as they were. Bounded:
		// with the store unreachable the reload is refused in
		// reloadTimeout, and the agent (stop, watchdog) stays responsive.
		sctx, cancel := context.WithTimeout(ctx, reloadTimeout)
		err = a.applyFile(sctx, cfg)
		if err == nil {
			a.src.UpdateMember(sctx, cfg)
		}
		cancel()
	}
	if err != nil {
		a.log.Error("reload refused; running jobs left as they were", "config", a.path, "sha256", sum, "error", err)
		a.conf.record(a.clock.Now(), sum, err, nil, nil)
		return err
	}
	old := a.conf.put(cfg)
	changes := config.DiffConfig(old, cfg)
	a.log.Info("reload accepted", "config", a.path, "sha256", sum, "changes", len(changes))
	for _, c := range changes {
		a.log.Info("config changed", "key", c.Key, "old", c.Old, "new", c.New)
	}
	restartOnly := warnRestartOnly(a.log, old.Agent, cfg.Agent)
	if old.Agent.LogSink != cfg.Agent.LogSink {
		warnJournal(a.log, cfg.Agent.LogSink)
	}
	if err := a.sup.Apply(ctx, cfg); err != nil {
		return err
	}
	warnings := append(restartOnly, a.warnFile(ctx, cfg, true)...)
	a.conf.record(a.clock.Now(), sum, nil, changes, warnings)
	return nil
}

// applyFile stores the agent file's own [[connector]] and [[group]]
// blocks as this agent's file's (create or update), and gives up the ones
// that left the file: deleted unless another agent's file holds them or
// `berth apply` stored them (workload.ApplyFile).
//
// A file already applied, with no definition written or deleted in the
// store since (store.Store.FileUnchanged), is not applied again: applying
// it would write nothing, and reading and comparing thousands of
// definitions is seconds of the agent's start.
func (a *Agent) applyFile(ctx context.Context, cfg *config.Config) error {
	data, err := os.ReadFile(cfg.File)
	if err != nil {
		return fmt.Errorf("read %s: %w", cfg.File, err)
	}
	st := a.src.Client().Store
	digest := fileDigest(cfg.Agent.ID, a.build, data)
	if same, err := st.FileUnchanged(ctx, cfg.Agent.ID, digest); err != nil {
		a.log.Warn("cannot tell whether the file's connectors are stored as they are; applying them", "file", cfg.File, "error", err)
	} else if same {
		a.log.Info("workload unchanged since this file was applied", "file", cfg.File)
		return nil
	}
	defs, err := config.Definitions(cfg.File, data, a.host)
	if err != nil {
		return err
	}
	plan, err := workload.ApplyFile(ctx, st, defs, cfg.Agent.ID, a.host)
	if err != nil {
		return fmt.Errorf("apply the connectors of %s to the cluster: %w", cfg.File, err)
	}
	if err := st.MarkFileApplied(ctx, cfg.Agent.ID, digest); err != nil {
		a.log.Warn("the applied file was not recorded; the next start applies it again", "file", cfg.File, "error", err)
	}
	if len(plan.Created)+len(plan.Updated)+len(plan.Deleted)+len(plan.Released) > 0 {
		a.log.Info("workload applied", "file", cfg.File, "created", plan.Created, "updated", plan.Updated,
			"deleted", plan.Deleted, "released", plan.Released)
	}
	if len(plan.Kept) > 0 {
		a.log.Warn("definitions left the file but a stored connector still names them; kept until unused", "file", cfg.File, "kept", plan.Kept)
	}
	return nil
}

// fileDigest identifies agent's file data as this build applies it
// (store.AppliedRecord.Digest): a SHA-256 of the agent ID, the build
// (another build may encode the definitions otherwise) and the file's
// bytes, in hex.
func fileDigest(agent string, build [2]string, data []byte) string {
	h := sha256.New()
	for _, s := range []string{agent, build[0], build[1]} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	h.Write(data)
	return hex.EncodeToString(h.Sum(nil))
}
