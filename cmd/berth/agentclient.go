package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"time"

	"github.com/berthd/berth/api"
	"github.com/berthd/berth/config"
	"github.com/spf13/cobra"
)

// defaultRequestTimeout bounds one request to an agent's API unless
// --request-timeout says otherwise.
const defaultRequestTimeout = 10 * time.Second

// requestTimeoutFlag adds --request-timeout to c, into d: how long one
// request to the agent may take (kubectl's flag of that name), 0 for no
// limit. At 10,000 jobs a loaded host's GET /v1/jobs can take longer
// than the default.
func requestTimeoutFlag(c *cobra.Command, d *time.Duration) {
	c.Flags().DurationVar(d, "request-timeout", defaultRequestTimeout, "how long one request to the agent may take (0: no limit)")
}

// requestContext is ctx bounded by the request timeout d (none when d is
// 0), and cl's own HTTP timeout set to d. It returns a usage error for a
// negative d.
func requestContext(ctx context.Context, cl *api.Client, d time.Duration) (context.Context, context.CancelFunc, error) {
	if d < 0 {
		return nil, nil, usageError("--request-timeout %v is negative (0: no limit)", d)
	}
	cl.HTTP.Timeout = d
	if d == 0 {
		ctx, cancel := context.WithCancel(ctx)
		return ctx, cancel, nil
	}
	ctx, cancel := context.WithTimeout(ctx, d)
	return ctx, cancel, nil
}

// clientOf returns a client of the API of the agent whose [agent] settings
// are ag: at addr when it is given (--addr: host:port or a URL), else at
// ag.Listen; over https when ag.WebConfigFile turns TLS on (or addr is an
// https URL); presenting the [agent.client] CA, client certificate and
// basic-auth credentials. It returns an error when the web configuration
// or the credentials cannot be read.
func clientOf(ag config.Agent, addr string) (*api.Client, error) {
	if addr == "" {
		addr = ag.Listen
	}
	tls, err := api.WebTLS(ag.WebConfigFile)
	if err != nil {
		return nil, fmt.Errorf("agent.web_config_file (does the agent serve TLS?): %w", err)
	}
	return api.NewClientFor(addr, ag.Client, tls)
}

// agentClient returns a client of the API of the agent that the file path
// configures (read as agentOf reads it), at addr when it is given, else at
// its agent.listen (clientOf). With addr, a file that does not exist means
// no credentials, and one that cannot be read is warned about on warn and
// ignored. It returns a usage error when the file cannot be read and no
// addr is given.
func agentClient(warn io.Writer, path, addr string) (*api.Client, error) {
	ag, err := agentOf(warn, path)
	switch {
	case err != nil && addr == "":
		return nil, usageError("no --addr, and %v", err)
	case err != nil && errors.Is(err, fs.ErrNotExist):
		return api.NewClient(addr), nil
	case err != nil:
		fmt.Fprintf(warn, "warning: %v: calling %s without its [agent.client] credentials\n", err, addr)
		return api.NewClient(addr), nil
	}
	return clientOf(ag, addr)
}

// reachError wraps the error of a first request to an agent: "is the agent
// running?" when it could not be reached, "the agent refused the request"
// when it answered with an error (an HTTP status: it runs).
func reachError(err error) error {
	var ae *api.Error
	if errors.As(err, &ae) {
		return fmt.Errorf("the agent refused the request: %w", err)
	}
	return fmt.Errorf("is the agent running? %w", err)
}
