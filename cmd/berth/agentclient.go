package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"

	"github.com/BurntSushi/toml"
	"github.com/berthd/berth/api"
	"github.com/berthd/berth/config"
)

// agentAccess is what a command needs of an agent file to call that
// agent's API: where it listens, its web configuration (whether it serves
// TLS) and the [agent.client] credentials.
type agentAccess struct {
	Listen        string
	WebConfigFile string
	Client        config.APIClient
}

// readAgentAccess reads agentAccess from the agent file path. A file that
// does not validate (a refused reload is when the API is most needed) is
// still read for these keys, with a warning on warn; it returns an error
// when the file cannot be read or is not TOML.
func readAgentAccess(warn io.Writer, path string) (agentAccess, error) {
	cfg, err := config.Load(path, nil)
	if err == nil {
		return agentAccess{Listen: cfg.Agent.Listen, WebConfigFile: cfg.Agent.WebConfigFile, Client: cfg.Agent.Client}, nil
	}
	var raw struct {
		Agent struct {
			Listen        string `toml:"listen"`
			WebConfigFile string `toml:"web_config_file"`
			Client        struct {
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
	if _, derr := toml.DecodeFile(path, &raw); derr != nil {
		return agentAccess{}, err
	}
	fmt.Fprintf(warn, "warning: %s does not validate (the agent keeps its last good configuration):\n%v\n", path, err)
	a := agentAccess{Listen: raw.Agent.Listen, WebConfigFile: raw.Agent.WebConfigFile}
	if a.Listen == "" {
		a.Listen = config.DefaultListen
	}
	c := raw.Agent.Client
	a.Client = config.APIClient{
		TLS:      config.TLS{CA: c.TLS.CA, Cert: c.TLS.Cert, Key: c.TLS.Key, ServerName: c.TLS.ServerName},
		Username: c.Username, Password: c.Password, PasswordFile: c.PasswordFile,
	}
	return a, nil
}

// agentClient returns a client of the API of the agent that the file path
// configures: at addr when it is given (--addr: host:port or a URL), else
// at its agent.listen; over https when its web_config_file turns TLS on
// (or addr is an https URL); presenting its [agent.client] CA, client
// certificate and basic-auth credentials. With --addr, a file that does
// not exist means no credentials. It returns a usage error when the file
// cannot be read and no addr is given, and an error when the web
// configuration or the credentials cannot be read.
func agentClient(warn io.Writer, path, addr string) (*api.Client, error) {
	acc, err := readAgentAccess(warn, path)
	switch {
	case err != nil && addr == "":
		return nil, usageError("no --addr, and %v", err)
	case err != nil && errors.Is(err, fs.ErrNotExist):
		return api.NewClient(addr), nil
	case err != nil:
		fmt.Fprintf(warn, "warning: %v: calling %s without its [agent.client] credentials\n", err, addr)
		return api.NewClient(addr), nil
	}
	if addr == "" {
		addr = acc.Listen
	}
	tls, err := api.WebTLS(acc.WebConfigFile)
	if err != nil {
		return nil, fmt.Errorf("agent.web_config_file of %s (does the agent serve TLS?): %w", path, err)
	}
	return api.NewClientFor(addr, acc.Client, tls)
}
