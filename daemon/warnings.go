package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/berthd/berth/config"
	"github.com/berthd/berth/spec"
	"github.com/coreos/go-systemd/v22/journal"
)

// warnFile logs the warnings of the file in force and returns them: its
// values that validate but may not mean what was meant, and its [static]
// entries that name no job of the file or of the cluster's store (with
// force, now; else once the source knows the store's workload).
func (a *Agent) warnFile(ctx context.Context, cfg *config.Config, force bool) []*config.Problem {
	var out []*config.Problem
	for _, w := range cfg.Warnings {
		if !strings.HasPrefix(w.Key, "static.") {
			out = append(out, w)
			a.log.Warn("configuration", "warning", w.Error())
		}
	}
	return append(out, a.warnDeclarations(ctx, force)...)
}

// warnDeclarations logs the [static] entries of the file in force that
// name no job of the file or of the cluster's store and returns them.
// Unless force, it does so once, as soon as the source knows a workload.
// The source's desired workload holds only this member's own share, so the
// stored definitions of the declared connectors are read by name
// (by key: data proportional to the declarations); when the
// store does not answer within declTimeout, the desired workload is used.
func (a *Agent) warnDeclarations(ctx context.Context, force bool) []*config.Problem {
	wl := a.sup.View().Desired.Workload
	cfg := a.conf.config()
	a.mu.Lock()
	if (!force && a.declWarned) || (wl == nil && !force) {
		a.mu.Unlock()
		return nil
	}
	a.declWarned = a.declWarned || wl != nil
	a.mu.Unlock()
	all := spec.Workload{Groups: cfg.Groups, Connectors: cfg.Connectors}
	where := "this file"
	if wl != nil {
		// The file's own definitions are the ones in force after this
		// reload: the store may still hold their previous version (a task
		// count just lowered), which must not satisfy a declaration.
		inFile := map[string]bool{}
		for _, c := range cfg.Connectors {
			inFile[c.Name] = true
		}
		all.Connectors = append([]spec.Connector(nil), all.Connectors...)
		stored := wl.Connectors
		dctx, cancel := context.WithTimeout(ctx, declTimeout)
		if d, err := a.backend.definitions(dctx, declaredConnectors(cfg.Static)); err == nil && d != nil {
			stored = append(append([]spec.Connector(nil), stored...), d.Connectors...)
		}
		cancel()
		for _, c := range stored {
			if !inFile[c.Name] {
				inFile[c.Name] = true
				all.Connectors = append(all.Connectors, c)
			}
		}
		where = "this file or the cluster's store"
	}
	ws := cfg.CheckDeclarations(&all, where)
	for _, w := range ws {
		a.log.Warn("a [static] declaration names no job; it is ignored until one is defined", "warning", w.Error())
	}
	return ws
}

// declTimeout bounds the store read of warnDeclarations.
const declTimeout = 3 * time.Second

// declaredConnectors is the connector names a [static] table may refer to:
// its connectors, and the connector part of each task ID
// ("<connector>-<n>", spec.TaskID), without duplicates.
func declaredConnectors(st config.Static) []string {
	seen := map[string]bool{}
	var out []string
	add := func(n string) {
		if n != "" && !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	for _, c := range st.Connectors {
		add(c)
	}
	for _, t := range st.Tasks {
		if i := strings.LastIndexByte(t, '-'); i > 0 {
			if _, err := strconv.Atoi(t[i+1:]); err == nil {
				add(t[:i])
			}
		}
	}
	return out
}

// warnRestartOnly logs the [agent] settings a reload cannot change: they
// take effect when the agent restarts. log_max_size and log_max_files are
// among them: a job's log writer is made once per job and agent run (it
// outlives the job's stops and starts). Not logged, because a reload does
// apply them: stop_timeout (the next stop), log_sink (each job's next
// start) and [agent.client] (every request to a peer reads the settings in
// force).
//
// It returns one warning per such setting, for the reload's result (what
// `berth reload` prints).
func warnRestartOnly(log *slog.Logger, old, new config.Agent) []*config.Problem {
	var out []*config.Problem
	for _, c := range []struct {
		key      string
		old, new string
	}{
		{"agent.id", old.ID, new.ID},
		{"agent.listen", old.Listen, new.Listen},
		{"agent.advertise", old.Advertise, new.Advertise},
		{"agent.cgroup_root", old.CgroupRoot, new.CgroupRoot},
		{"agent.data_dir", old.DataDir, new.DataDir},
		{"agent.log_dir", old.LogDir, new.LogDir},
		{"agent.log_max_size", strconv.FormatInt(old.LogMaxSize, 10), strconv.FormatInt(new.LogMaxSize, 10)},
		{"agent.log_max_files", strconv.Itoa(old.LogMaxFiles), strconv.Itoa(new.LogMaxFiles)},
		{"agent.web_config_file", old.WebConfigFile, new.WebConfigFile},
		{"agent.allowed_hosts", strings.Join(old.AllowedHosts, ","), strings.Join(new.AllowedHosts, ",")},
	} {
		if c.old != c.new {
			log.Warn("changed setting takes effect only when the agent restarts", "key", c.key, "running", c.old, "file", c.new)
			out = append(out, &config.Problem{Key: c.key,
				Msg: fmt.Sprintf("changed from %q to %q: takes effect only when the agent restarts", c.old, c.new)})
		}
	}
	return out
}

// warnJournal warns when log_sink = "journal" but this host has no journal
// to write to (no /run/systemd/journal/socket, sd_journal_send(3)): jobs'
// output then goes only to their files, and without this line nothing would
// say so.
func warnJournal(log *slog.Logger, sink string) {
	if sink == "journal" && !journal.Enabled() {
		log.Warn("log_sink = \"journal\" but this host has no journal (no /run/systemd/journal/socket): job output goes to the log files only", "key", "agent.log_sink")
	}
}
