package config

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/berthd/berth/limits"
	"github.com/berthd/berth/spec"
)

// Change is one setting whose value differs between two versions of a
// configuration, a definition or a job: its key as the file names it
// ("agent.stop_timeout", "connector orders: task.limits.memory",
// "limits.memory") and both values in the units the model holds (bytes,
// cores, Go durations); "" when the setting is absent on that side.
type Change struct {
	Key, Old, New string
}

// String is "key: old → new", an absent side shown as "(unset)".
func (c Change) String() string {
	show := func(s string) string {
		if s == "" {
			return "(unset)"
		}
		return s
	}
	return c.Key + ": " + show(c.Old) + " → " + show(c.New)
}

// DiffJobs returns every setting of a job that differs from old to new:
// its group and each key of its process (command, env.NAME, user, dir,
// restart, stop_timeout, limits.*), sorted by key.
func DiffJobs(old, new spec.Job) []Change {
	a, b := map[string]string{}, map[string]string{}
	a["group"], b["group"] = old.Group, new.Group
	flattenProcess("", &old.Process, a)
	flattenProcess("", &new.Process, b)
	return hideSecrets(diffMaps("", a, b))
}

// hideSecrets replaces the values of secret settings (env.NAME of a
// process, a password) in cs with Hidden: changes are logged and served
// (GET /v1/agent's last reload), secrets never are.
func hideSecrets(cs []Change) []Change {
	for i, c := range cs {
		k := c.Key
		if j := strings.LastIndex(k, ": "); j >= 0 {
			k = k[j+2:] // the key inside a definition
		}
		if strings.HasPrefix(k, "env.") || strings.Contains(k, ".env.") || strings.HasSuffix(k, "password") {
			if c.Old != "" {
				cs[i].Old = spec.Hidden
			}
			if c.New != "" {
				cs[i].New = spec.Hidden
			}
		}
	}
	return cs
}

// DiffConfig returns every setting that differs from old to new, sorted by
// key: [agent], [static] and [cluster] keys ("agent.stop_timeout",
// "static.tasks"), then each sharing group's and connector's keys prefixed
// with the definition ("group sinks: limits.memory", "connector orders:
// tasks"); a definition added or removed is one change "connector NAME"
// from or to "(unset)".
func DiffConfig(old, new *Config) []Change {
	a, b := map[string]string{}, map[string]string{}
	flattenTop(old, a)
	flattenTop(new, b)
	out := diffMaps("", a, b)
	groups := func(c *Config) map[string]map[string]string {
		m := map[string]map[string]string{}
		for _, g := range c.Groups {
			f := map[string]string{}
			flattenLimits("limits.", g.Limits, f)
			m[g.Name] = f
		}
		return m
	}
	conns := func(c *Config) map[string]map[string]string {
		m := map[string]map[string]string{}
		for _, k := range c.Connectors {
			f := map[string]string{"tasks": strconv.Itoa(k.Tasks), "group": k.Group}
			if k.Run != nil {
				flattenProcess("run.", k.Run, f)
			}
			if k.Task != nil {
				flattenProcess("task.", k.Task, f)
			}
			m[k.Name] = f
		}
		return m
	}
	out = append(out, diffDefs("group", groups(old), groups(new))...)
	return hideSecrets(append(out, diffDefs("connector", conns(old), conns(new))...))
}

// diffDefs compares definitions by name: added or removed ones are one
// change, changed ones one change per key.
func diffDefs(kind string, a, b map[string]map[string]string) []Change {
	names := map[string]bool{}
	for n := range a {
		names[n] = true
	}
	for n := range b {
		names[n] = true
	}
	sorted := make([]string, 0, len(names))
	for n := range names {
		sorted = append(sorted, n)
	}
	sort.Strings(sorted)
	var out []Change
	for _, n := range sorted {
		fa, inA := a[n]
		fb, inB := b[n]
		switch {
		case !inA:
			out = append(out, Change{Key: kind + " " + n, New: "defined"})
		case !inB:
			out = append(out, Change{Key: kind + " " + n, Old: "defined"})
		default:
			out = append(out, diffMaps(kind+" "+n+": ", fa, fb)...)
		}
	}
	return out
}

// diffMaps returns the keys whose values differ, sorted, each prefixed.
func diffMaps(prefix string, a, b map[string]string) []Change {
	keys := map[string]bool{}
	for k := range a {
		keys[k] = true
	}
	for k := range b {
		keys[k] = true
	}
	var out []Change
	for k := range keys {
		if a[k] != b[k] {
			out = append(out, Change{Key: prefix + k, Old: a[k], New: b[k]})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

func flattenTop(c *Config, m map[string]string) {
	ag := c.Agent
	for k, v := range map[string]string{
		"agent.id": ag.ID, "agent.data_dir": ag.DataDir, "agent.log_dir": ag.LogDir,
		"agent.log_max_size": strconv.FormatInt(ag.LogMaxSize, 10), "agent.log_max_files": strconv.Itoa(ag.LogMaxFiles),
		"agent.log_sink": ag.LogSink, "agent.listen": ag.Listen, "agent.advertise": ag.Advertise, "agent.cgroup_root": ag.CgroupRoot,
		"agent.stop_timeout": ag.StopTimeout.String(),
		"agent.kill_mode":    string(ag.KillMode), "agent.kill_signal": string(ag.KillSignal),
		"static.connectors": list(c.Static.Connectors), "static.tasks": list(c.Static.Tasks),
		"cluster.name": c.Cluster.Name, "cluster.endpoints": list(c.Cluster.Endpoints),
		"cluster.session_ttl": c.Cluster.SessionTTL.String(), "cluster.rebalance_delay": c.Cluster.RebalanceDelay.String(),
		"cluster.protocol": string(c.Cluster.Protocol),
		"cluster.tls":      tlsString(c.Cluster.TLS),
		"cluster.username": c.Cluster.Username, "cluster.password": c.Cluster.Password,
		"cluster.password_file": c.Cluster.PasswordFile,
		"agent.web_config_file": ag.WebConfigFile, "agent.allowed_hosts": list(ag.AllowedHosts), "agent.client.tls": tlsString(ag.Client.TLS),
		"agent.client.username": ag.Client.Username, "agent.client.password": ag.Client.Password,
		"agent.client.password_file": ag.Client.PasswordFile,
	} {
		m[k] = v
	}
}

// tlsString is a tls table's files and server name, as one value.
func tlsString(t spec.TLS) string {
	return strings.Join(strings.Fields(fmt.Sprintf("%s %s %s %s", t.CA, t.Cert, t.Key, t.ServerName)), " ")
}

func flattenProcess(prefix string, p *spec.Process, m map[string]string) {
	m[prefix+"command"] = list(p.Command)
	for k, v := range p.Env {
		m[prefix+"env."+k] = strconv.Quote(v) // compared here, Hidden in every Change
	}
	if p.EnvFile != "" {
		m[prefix+"env_file"] = p.EnvFile
	}
	m[prefix+"user"] = p.User
	m[prefix+"dir"] = p.Dir
	m[prefix+"restart"] = string(p.Restart)
	if p.StopTimeout > 0 {
		m[prefix+"stop_timeout"] = p.StopTimeout.String()
	}
	if p.KillMode != "" {
		m[prefix+"kill_mode"] = string(p.KillMode)
	}
	if p.KillSignal != "" {
		m[prefix+"kill_signal"] = string(p.KillSignal)
	}
	if r := p.MemoryPressure.Effective(); r.Acts() {
		m[prefix+"memory_pressure"] = string(r.Action)
		m[prefix+"memory_pressure_limit"] = strconv.FormatFloat(r.Limit, 'f', -1, 64)
		m[prefix+"memory_pressure_duration"] = r.Duration.String()
	}
	flattenLimits(prefix+"limits.", p.Limits, m)
}

// flattenLimits adds each limit l sets (limits.Keys) to m under prefix,
// valued as Key.Format writes it; each io entry is its own key, "io[0]".
func flattenLimits(prefix string, l limits.Limits, m map[string]string) {
	for _, k := range limits.Keys() {
		v, ok := k.Value(&l)
		switch {
		case !ok:
		case k.Kind == limits.KindDevices:
			for i, io := range v.([]limits.IOLimit) {
				m[fmt.Sprintf("%s%s[%d]", prefix, k.Name, i)] = io.String()
			}
		default:
			m[prefix+k.Name] = k.Format(&l)
		}
	}
}

// list formats a string list as TOML writes it: ["a", "b"]; "" when empty.
func list(xs []string) string {
	if len(xs) == 0 {
		return ""
	}
	q := make([]string, len(xs))
	for i, x := range xs {
		q[i] = strconv.Quote(x)
	}
	return "[" + strings.Join(q, ", ") + "]"
}
