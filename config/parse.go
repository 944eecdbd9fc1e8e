package config

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"
	"github.com/berthd/berth/host"
	"github.com/berthd/berth/spec"
)

// Load reads the agent file at path and parses it with Parse against host.
// An error reading the file is returned wrapped with the path (not as
// *Problems).
func Load(path string, host *host.Host) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load config %s: %w", path, err)
	}
	return Parse(path, data, host)
}

// Parse decodes an agent file (data, named file in messages), applies the
// defaults and validates every key, the limits against host's facts (CPU
// count, online CPUs, io devices; nil host: those checks are skipped). On any problem it returns a nil *Config and *Problems
// holding every problem found, each "FILE:LINE:COL: key: message"; a TOML
// syntax error is a single entry with the parser's line and column.
func Parse(file string, data []byte, host *host.Host) (*Config, error) {
	return parse(file, data, host, nil)
}

// parse is Parse; when read is not nil, it records in it every key the
// decoder asks for, per section ID (a test compares them with the
// reference in keys.go).
func parse(file string, data []byte, host *host.Host, read map[string]map[string]bool) (*Config, error) {
	root, pos, err := decodeTOML(file, data)
	if err != nil {
		return nil, err
	}
	d := &decoder{host: host, read: read}
	t := d.open("", SectionFile, root)
	sum := sha256.Sum256(data)
	c := &Config{File: file, SHA256: hex.EncodeToString(sum[:])}
	c.Agent = d.agent(t.sub("agent"))
	if s := t.sub("static"); s != nil {
		c.Static.Connectors = s.strings("connectors")
		c.Static.Tasks = s.strings("tasks")
		s.done()
	}
	c.Cluster = d.cluster(t.sub("cluster"))
	c.Workload = d.workload(t)
	t.done()
	c.checkStatic(&d.errs)
	d.errs.attachDefs(&c.Workload)
	if err := d.errs.result(file, pos); err != nil {
		return nil, err
	}
	c.pos = pos.under("static")
	d.warns.list = append(d.warns.list, c.CheckDeclarations(&c.Workload, "this file")...)
	d.warns.attachDefs(&c.Workload)
	c.Warnings = d.warns.placed(file, pos)
	return c, nil
}

// ParseConnectors parses a file that holds only [[group]] and [[connector]]
// blocks (the input of "berth apply"), validated by the same rules as the
// agent file. Errors are as for Parse.
func ParseConnectors(file string, data []byte, host *host.Host) (*spec.Workload, error) {
	w, _, err := parseConnectors(file, data, host)
	return w, err
}

// parseConnectors is ParseConnectors that also returns the warnings.
func parseConnectors(file string, data []byte, host *host.Host) (*spec.Workload, []*Problem, error) {
	root, pos, err := decodeTOML(file, data)
	if err != nil {
		return nil, nil, err
	}
	d := &decoder{host: host}
	t := d.open("", SectionDefinitions, root)
	w := d.workload(t)
	t.done()
	d.errs.attachDefs(&w)
	if err := d.errs.result(file, pos); err != nil {
		return nil, nil, err
	}
	d.warns.attachDefs(&w)
	return &w, d.warns.placed(file, pos), nil
}

// ParseConnector parses one connector definition whose keys are at the top
// level (name, tasks, group, [run], [task]), the form stored in the cluster
// store. Whether its group exists and whether its job IDs clash with other
// connectors is checked by Workload.Validate, not here. Errors are as for
// Parse, with keys relative to the definition ("task.limits.memory").
func ParseConnector(file string, data []byte, host *host.Host) (*spec.Connector, error) {
	root, pos, err := decodeTOML(file, data)
	if err != nil {
		return nil, err
	}
	d := &decoder{host: host}
	c := d.connector(d.open("", SectionConnector, root))
	d.errs.attachDef(spec.DefConnector, c.Name)
	if err := d.errs.result(file, pos); err != nil {
		return nil, err
	}
	return &c, nil
}

// ParseGroup parses one sharing-group definition whose keys are at the top
// level (name, limits). Errors are as for ParseConnector.
func ParseGroup(file string, data []byte, host *host.Host) (*spec.Group, error) {
	root, pos, err := decodeTOML(file, data)
	if err != nil {
		return nil, err
	}
	d := &decoder{host: host}
	g := d.group(d.open("", SectionGroup, root))
	d.errs.attachDef(spec.DefGroup, g.Name)
	if err := d.errs.result(file, pos); err != nil {
		return nil, err
	}
	return &g, nil
}

// decodeTOML parses data into a generic tree and locates its keys.
func decodeTOML(file string, data []byte) (map[string]any, *positions, error) {
	var root map[string]any
	md, err := toml.Decode(string(data), &root)
	if err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return nil, nil, &Problems{List: []*Problem{{File: file, Line: pe.Position.Line, Col: pe.Position.Col, Key: pe.LastKey, Msg: pe.Message}}}
		}
		return nil, nil, &Problems{List: []*Problem{{File: file, Msg: err.Error()}}}
	}
	return root, locate(string(data), md.Keys()), nil
}

// agent reads [agent] and applies its defaults.
func (d *decoder) agent(t *table) Agent {
	a := Agent{
		DataDir: DefaultDataDir, LogDir: DefaultLogDir, LogMaxSize: DefaultLogMaxSize,
		LogMaxFiles: DefaultLogMaxFiles, LogSink: LogSinkFile, Listen: DefaultListen,
		CgroupRoot: DefaultCgroupRoot, StopTimeout: spec.DefaultStopTimeout,
		KillMode: spec.DefaultKillMode, KillSignal: spec.DefaultKillSignal,
	}
	if t == nil {
		t = d.open("agent", SectionAgent, map[string]any{})
	}
	defer t.done()
	if _, ok := t.m["id"]; ok {
		a.ID = t.str("id", "")
		d.checkName(t.key("id"), "agent ID", a.ID)
	} else if h, err := os.Hostname(); err != nil {
		d.errs.add(t.key("id"), "not set and the host name is unknown: %v", err)
	} else if err := validName(h); err != nil {
		d.errs.add(t.key("id"), "not set and the host name %v; set agent.id", err)
	} else {
		a.ID = h
	}
	for _, dir := range []struct {
		k string
		p *string
	}{{"data_dir", &a.DataDir}, {"log_dir", &a.LogDir}} {
		if _, ok := t.m[dir.k]; ok {
			*dir.p = t.str(dir.k, *dir.p)
			if !strings.HasPrefix(*dir.p, "/") {
				d.errs.add(t.key(dir.k), "must be an absolute path, not %q", *dir.p)
			}
		}
	}
	if _, ok := t.m["data_dir"]; ok && len(a.DataDir) > MaxDataDirLen {
		d.errs.add(t.key("data_dir"), "is %d bytes long, at most %d: the lease guard's socket <data_dir>/guard.sock must fit in a unix socket address (108 bytes with its NUL, unix(7))",
			len(a.DataDir), MaxDataDirLen)
	}
	if n, ok := t.bytes("log_max_size"); ok {
		if n < 1 {
			d.errs.add(t.key("log_max_size"), "must be > 0 bytes")
		} else {
			a.LogMaxSize = n
		}
	}
	if n, ok := t.inRange("log_max_files"); ok {
		a.LogMaxFiles = int(n)
	}
	a.LogSink = t.oneOf("log_sink", "a log sink", a.LogSink)
	if _, ok := t.m["listen"]; ok {
		a.Listen = t.str("listen", a.Listen)
		if err := checkListen(a.Listen); err != nil {
			d.errs.add(t.key("listen"), "%q is not host:port: %v", a.Listen, err)
		}
	}
	if _, ok := t.m["advertise"]; ok {
		a.Advertise = t.str("advertise", a.Advertise)
		if err := checkAdvertise(a.Advertise); err != nil {
			d.errs.add(t.key("advertise"), "%q: %v", a.Advertise, err)
		}
	}
	if _, ok := t.m["cgroup_root"]; ok {
		a.CgroupRoot = t.str("cgroup_root", a.CgroupRoot)
		if a.CgroupRoot != "" {
			for _, part := range strings.Split(a.CgroupRoot, "/") {
				if err := validName(part); err != nil {
					d.errs.add(t.key("cgroup_root"), "%q must be \"\" or a relative cgroup path of names: %v", a.CgroupRoot, err)
					break
				}
			}
		}
	}
	a.StopTimeout = t.duration("stop_timeout", a.StopTimeout)
	a.KillMode = spec.KillMode(t.oneOf("kill_mode", "a kill mode", string(a.KillMode)))
	a.KillSignal = t.signal("kill_signal", a.KillSignal)
	if _, ok := t.m["web_config_file"]; ok {
		a.WebConfigFile = t.str("web_config_file", "")
		if !strings.HasPrefix(a.WebConfigFile, "/") {
			d.errs.add(t.key("web_config_file"), "must be an absolute path, not %q", a.WebConfigFile)
		} else if d.host != nil && d.host.CheckWebConfig != nil {
			if err := d.host.CheckWebConfig(a.WebConfigFile); err != nil {
				d.errs.add(t.key("web_config_file"), "on this host: %v", err)
			}
		}
	}
	if _, ok := t.m["allowed_hosts"]; ok {
		a.AllowedHosts = t.strings("allowed_hosts")
		for i, h := range a.AllowedHosts {
			if err := checkAllowedHost(h); err != nil {
				d.errs.add(fmt.Sprintf("%s[%d]", t.key("allowed_hosts"), i), "%v", err)
			}
		}
	}
	if c := t.sub("client"); c != nil {
		a.Client.TLS = d.tlsTable(c.sub("tls"))
		a.Client.Username, a.Client.Password, a.Client.PasswordFile = d.credentials(c)
		c.done()
	}
	return a
}

// tlsTable reads a tls table ({ ca, cert, key, server_name }); nil gives
// the zero TLS.
func (d *decoder) tlsTable(t *table) spec.TLS {
	if t == nil {
		return spec.TLS{}
	}
	defer t.done()
	c := spec.TLS{CA: t.str("ca", ""), Cert: t.str("cert", ""), Key: t.str("key", ""), ServerName: t.str("server_name", "")}
	if (c.Cert == "") != (c.Key == "") {
		d.errs.add(t.path, "cert and key must be given together")
	}
	absolute := true
	for _, f := range []struct{ k, v string }{{"ca", c.CA}, {"cert", c.Cert}, {"key", c.Key}} {
		if _, ok := t.m[f.k]; ok && !strings.HasPrefix(f.v, "/") {
			d.errs.add(t.key(f.k), "must be an absolute path, not %q", f.v)
			absolute = false
		}
	}
	if absolute && d.host != nil && d.host.CheckTLS != nil {
		errs := d.host.CheckTLS(c)
		for _, k := range []string{"ca", "cert", "key"} {
			if err := errs[k]; err != nil {
				d.errs.add(t.key(k), "on this host: %v", err)
			}
		}
	}
	return c
}

// credentials reads username, password and password_file of t: a user
// needs exactly one of password and password_file, and they need a user.
func (d *decoder) credentials(t *table) (user, password, passwordFile string) {
	user = t.str("username", "")
	password = t.str("password", "")
	passwordFile = t.str("password_file", "")
	_, hasUser := t.m["username"]
	_, hasPassword := t.m["password"]
	_, hasFile := t.m["password_file"]
	switch {
	case hasUser && user == "":
		d.errs.add(t.key("username"), "must not be empty (omit it for no user)")
	case hasPassword && hasFile:
		d.errs.add(t.key("password_file"), "password and password_file are exclusive: give one")
	case hasUser && !hasPassword && !hasFile:
		d.errs.add(t.key("username"), "needs password or password_file")
	case !hasUser && (hasPassword || hasFile):
		d.errs.add(t.path, "password and password_file need username")
	}
	if hasFile && !strings.HasPrefix(passwordFile, "/") {
		d.errs.add(t.key("password_file"), "must be an absolute path, not %q", passwordFile)
	} else if hasFile && d.host != nil && d.host.CheckPasswordFile != nil {
		if err := d.host.CheckPasswordFile(passwordFile); err != nil {
			d.errs.add(t.key("password_file"), "on this host: %v", err)
		}
	}
	return user, password, passwordFile
}

// cluster reads [cluster] and applies its defaults.
func (d *decoder) cluster(t *table) Cluster {
	c := Cluster{Name: DefaultClusterName, SessionTTL: DefaultSessionTTL, Protocol: spec.ProtocolStatic}
	if t == nil {
		return c
	}
	defer t.done()
	if _, ok := t.m["name"]; ok {
		c.Name = t.str("name", c.Name)
		d.checkName(t.key("name"), "cluster name", c.Name)
	}
	c.Endpoints = t.strings("endpoints")
	for i, e := range c.Endpoints {
		if strings.TrimSpace(e) == "" {
			d.errs.add(fmt.Sprintf("%s[%d]", t.key("endpoints"), i), "must not be empty")
		}
	}
	c.SessionTTL = t.duration("session_ttl", c.SessionTTL)
	if c.SessionTTL < MinSessionTTL {
		d.errs.add(t.key("session_ttl"), "must be at least 2s, not %v", c.SessionTTL)
	}
	if c.SessionTTL%1000000000 != 0 {
		d.errs.add(t.key("session_ttl"), "must be a whole number of seconds (etcd lease TTLs are seconds), not %v", c.SessionTTL)
	}
	c.RebalanceDelay = t.duration("rebalance_delay", 0)
	c.Protocol = spec.Protocol(t.oneOf("protocol", "a protocol", string(c.Protocol)))
	c.TLS = d.tlsTable(t.sub("tls"))
	c.Username, c.Password, c.PasswordFile = d.credentials(t)
	if c.Username != "" && len(c.Endpoints) == 0 {
		d.errs.add(t.key("username"), "needs endpoints: the embedded etcd (no endpoints) has no users")
	}
	return c
}

// checkAllowedHost checks an agent.allowed_hosts entry: "*", or a host
// name (or IP address) with an optional :port, as a Host header names it.
func checkAllowedHost(h string) error {
	if h == "*" {
		return nil
	}
	addr := h
	if _, _, err := net.SplitHostPort(h); err != nil {
		addr = net.JoinHostPort(strings.TrimSuffix(strings.TrimPrefix(h, "["), "]"), "0")
	}
	host, _, _ := net.SplitHostPort(addr)
	if host == "" {
		return fmt.Errorf("%q is not a host name: give \"*\", a host name or a host name:port (no scheme, no path)", h)
	}
	if err := checkListen(addr); err != nil {
		return fmt.Errorf("%q is not a host name: give \"*\", a host name or a host name:port (no scheme, no path): %v", h, err)
	}
	return nil
}

// checkListen checks addr as the agent's listener will read it (net.Listen
// "tcp"): host:port with a port of 0 to 65535 (0: any free port) and a host
// that is empty (every address), an IP address or a host name
// (letters, digits, '-' and '.', as RFC 1123).
func checkListen(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		var ae *net.AddrError
		if errors.As(err, &ae) {
			return errors.New(ae.Err)
		}
		return err
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Errorf("port %q must be a number from 0 to 65535", port)
	}
	if host == "" || net.ParseIP(host) != nil {
		return nil
	}
	if len(host) > 253 || strings.Trim(host, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-.") != "" ||
		strings.HasPrefix(host, "-") || strings.HasPrefix(host, ".") || strings.Contains(host, "..") {
		return fmt.Errorf("host %q is not an IP address or a host name", host)
	}
	return nil
}

// checkAdvertise checks agent.advertise: an address another host can
// connect to, host:port with a port of 1 to 65535 and a host that is an
// IP address other than an unspecified one (0.0.0.0, ::), or a host name.
func checkAdvertise(addr string) error {
	if err := checkListen(addr); err != nil {
		return fmt.Errorf("not host:port: %v", err)
	}
	host, port, _ := net.SplitHostPort(addr)
	if host == "" {
		return errors.New("no host: give the address or name other members reach this agent at")
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		return fmt.Errorf("%s is no address another host can reach: give this host's address or name", host)
	}
	if port == "0" {
		return errors.New("port 0: give the port the agent listens on")
	}
	return nil
}
