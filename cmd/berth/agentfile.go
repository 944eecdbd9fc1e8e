package main

import (
	"fmt"
	"io"

	"github.com/BurntSushi/toml"
	"github.com/berthd/berth/config"
	"github.com/berthd/berth/spec"
)

// agentOf returns the [agent] settings of the configuration file at path,
// with defaults. A file that does not validate (a refused reload is when
// status, logs and reload are most needed) is still read for the [agent]
// keys that decode, with a warning on warn naming what stayed default;
// only a file that cannot be read or is not TOML at all is an error.
func agentOf(warn io.Writer, path string) (config.Agent, error) {
	cfg, err := config.Load(path, nil)
	if err == nil {
		return cfg.Agent, nil
	}
	var raw struct {
		Agent map[string]any `toml:"agent"`
	}
	if _, derr := toml.DecodeFile(path, &raw); derr != nil {
		return config.Agent{}, err
	}
	a := config.Agent{DataDir: config.DefaultDataDir, LogDir: config.DefaultLogDir, Listen: config.DefaultListen,
		CgroupRoot: config.DefaultCgroupRoot}
	for key, dst := range map[string]*string{"id": &a.ID, "data_dir": &a.DataDir, "log_dir": &a.LogDir,
		"listen": &a.Listen, "cgroup_root": &a.CgroupRoot, "web_config_file": &a.WebConfigFile} {
		if s, ok := raw.Agent[key].(string); ok {
			*dst = s
		}
	}
	// [agent.client]: what the commands present to the agent's API.
	var client struct {
		Agent struct {
			Client struct {
				TLS struct {
					CA         string `toml:"ca"`
					Cert       string `toml:"cert"`
					Key        string `toml:"key"`
					ServerName string `toml:"server_name"`
				} `toml:"tls"`
				Username     string `toml:"username"`
				Password     string `toml:"password"`
				PasswordFile string `toml:"password_file"`
			} `toml:"client"`
		} `toml:"agent"`
	}
	if _, derr := toml.DecodeFile(path, &client); derr == nil {
		c := client.Agent.Client
		a.Client = spec.APIClient{
			TLS:      spec.TLS{CA: c.TLS.CA, Cert: c.TLS.Cert, Key: c.TLS.Key, ServerName: c.TLS.ServerName},
			Username: c.Username, Password: c.Password, PasswordFile: c.PasswordFile,
		}
	}
	fmt.Fprintf(warn, "warning: %s does not validate (the agent keeps its last good configuration); using its [agent] keys:\n%v\n", path, err)
	return a, nil
}

// logDirOf returns agent.log_dir of the configuration file, read as
// agentOf reads it; when the file cannot be read or is not TOML, the
// default log_dir, with a warning on warn.
func logDirOf(warn io.Writer, path string) string {
	a, err := agentOf(warn, path)
	if err != nil {
		fmt.Fprintf(warn, "warning: %v; reading the default log_dir %s (--log-dir names another)\n", err, config.DefaultLogDir)
		return config.DefaultLogDir
	}
	return a.LogDir
}
