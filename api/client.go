package api

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"time"

	"github.com/berthd/berth/host"
	"github.com/berthd/berth/spec"
	promconfig "github.com/prometheus/common/config"
)

// Client calls one agent's API.
type Client struct {
	// Base is the agent's URL, "http://127.0.0.1:9750".
	Base string
	// HTTP is the client used; NewClient sets one with a 10 s timeout.
	HTTP *http.Client
}

// clientTimeout bounds one request of a Client.
const clientTimeout = 10 * time.Second

// NewClient returns a client for the agent at addr: "host:port" or a URL.
func NewClient(addr string) *Client {
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	return &Client{Base: strings.TrimSuffix(addr, "/"), HTTP: &http.Client{Timeout: clientTimeout}}
}

// NewClientFor returns a client for the agent at addr ("host:port" or a
// URL) that presents what auth ([agent.client]) gives: the CA that signed
// the agents' certificates, a client certificate, basic-auth credentials
// (password_file read now, host.ReadPasswordFile). A bare host:port is
// reached over https when tls is true (the agent's web configuration turns
// TLS on: WebTLS), else over http; a URL keeps its scheme. The transport
// is the Prometheus HTTP client's (prometheus/common/config, what a scrape
// configuration's tls_config and basic_auth build). It returns an error
// when the password file cannot be used or the TLS settings are invalid.
func NewClientFor(addr string, auth spec.APIClient, tls bool) (*Client, error) {
	if !strings.Contains(addr, "://") {
		scheme := "http://"
		if tls {
			scheme = "https://"
		}
		addr = scheme + addr
	}
	hc := promconfig.HTTPClientConfig{TLSConfig: promconfig.TLSConfig{
		CAFile: auth.TLS.CA, CertFile: auth.TLS.Cert, KeyFile: auth.TLS.Key, ServerName: auth.TLS.ServerName,
	}}
	if auth.Username != "" {
		pw := auth.Password
		if auth.PasswordFile != "" {
			var err error
			if pw, err = host.ReadPasswordFile(auth.PasswordFile); err != nil {
				return nil, fmt.Errorf("agent.client: %w", err)
			}
		}
		hc.BasicAuth = &promconfig.BasicAuth{Username: auth.Username, Password: promconfig.Secret(pw)}
	}
	h, err := promconfig.NewClientFromConfig(hc, "berth")
	if err != nil {
		return nil, fmt.Errorf("agent.client: %w", err)
	}
	h.Timeout = clientTimeout
	return &Client{Base: strings.TrimSuffix(addr, "/"), HTTP: h}, nil
}

// Get fetches path ("/v1/jobs") and decodes the JSON answer into v. A
// non-2xx answer is returned as *Error (decoded from its body, or made up
// from the status when the body is not an Error); a transport failure is
// wrapped with the URL and why the agent could not be reached. When an
// http:// agent answers that it serves https now (its web configuration
// turned TLS on while it runs), the request is made once more over https
// with the same trust and credentials; never the other way round.
func (c *Client) Get(ctx context.Context, path string, v any) error {
	err := c.get(ctx, c.Base+path, v)
	var e *Error
	if rest, ok := strings.CutPrefix(c.Base, "http://"); ok && errors.As(err, &e) && servesHTTPS(e) {
		err = c.get(ctx, "https://"+rest+path, v)
		if err != nil && !errors.As(err, &e) {
			return fmt.Errorf("the agent at %s serves https (its web configuration turns TLS on): %w", rest, err)
		}
	}
	return err
}

// servesHTTPS reports whether e is an agent's answer to a plain request
// that it serves https: Go's http.Server's 400 to plain HTTP on a TLS
// listener, or Server's 421 to a connection kept from before TLS was
// turned on.
func servesHTTPS(e *Error) bool {
	return e.Code == http.StatusBadRequest && strings.Contains(e.Message, "HTTP request to an HTTPS server") ||
		e.Code == http.StatusMisdirectedRequest && strings.Contains(e.Message, "connect again over https")
}

func (c *Client) get(ctx context.Context, u string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return fmt.Errorf("GET %s: %w", u, err)
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return fmt.Errorf("GET %s: %w%s", u, err, unreachable(u, err))
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("GET %s: read answer: %w", u, err)
	}
	if resp.StatusCode/100 != 2 {
		e := &Error{}
		if json.Unmarshal(body, e) != nil || e.Message == "" {
			e = &Error{Code: resp.StatusCode, Message: strings.TrimSpace(string(body))}
			if strings.Contains(e.Message, "HTTP request to an HTTPS server") {
				e.Message += " (the agent serves https: its web configuration turns TLS on; " +
					"give --addr https://HOST:PORT, or the agent.web_config_file it runs with)"
			}
		}
		e.Message += answerHint(e)
		return e
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("GET %s: decode answer: %w", u, err)
	}
	return nil
}

// answerHint says what to do about an answer the agent refused a request
// with: "" when its message says it already.
func answerHint(e *Error) string {
	switch {
	case e.Code == http.StatusUnauthorized:
		return " (the agent's web configuration asks for basic auth: set username and password_file in [agent.client], docs/security.md)"
	}
	return ""
}

// unreachable explains a transport error of a request to url: why the
// agent could not be reached, in its operator's terms ("" when the error
// says it already).
func unreachable(url string, err error) string {
	msg := err.Error()
	https := strings.HasPrefix(url, "https://")
	var cert *tls.CertificateVerificationError
	var unknown x509.UnknownAuthorityError
	var host x509.HostnameError
	switch {
	case strings.Contains(msg, "server gave HTTP response to HTTPS client"):
		return " (the agent serves plain HTTP although agent.web_config_file turns TLS on here: " +
			"it runs with another web configuration, or its TLS does not apply yet; see its log)"
	case errors.As(err, &unknown), errors.As(err, &host), errors.As(err, &cert):
		return " (the agent's certificate is not trusted: set [agent.client.tls] ca, or server_name to a name it holds)"
	case errors.Is(err, syscall.ECONNREFUSED):
		return " (no agent listens there: is it running, with this agent.listen?)"
	case https && (errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || strings.Contains(msg, "handshake")):
		return " (the agent closed the connection during the TLS handshake: its web configuration may not load, " +
			"or it requires a client certificate ([agent.client.tls] cert and key); see its log)"
	case errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET):
		return " (the agent closed the connection: does it serve TLS (agent.web_config_file)? see its log)"
	case errors.Is(err, context.DeadlineExceeded) || strings.Contains(msg, "Client.Timeout"):
		return " (no answer in time: the agent may be stopped (SIGSTOP), overloaded or behind a firewall)"
	}
	return ""
}

// Jobs is GET /v1/jobs.
func (c *Client) Jobs(ctx context.Context) ([]Job, error) {
	var js []Job
	return js, c.Get(ctx, "/v1/jobs", &js)
}

// Job is GET /v1/jobs/{id}.
func (c *Client) Job(ctx context.Context, id string) (Job, error) {
	var j Job
	return j, c.Get(ctx, "/v1/jobs/"+url.PathEscape(id), &j)
}

// Agent is GET /v1/agent.
func (c *Client) Agent(ctx context.Context) (Agent, error) {
	var a Agent
	return a, c.Get(ctx, "/v1/agent", &a)
}

// Groups is GET /v1/groups.
func (c *Client) Groups(ctx context.Context) ([]Group, error) {
	var gs []Group
	return gs, c.Get(ctx, "/v1/groups", &gs)
}

// Members is GET /v1/members.
func (c *Client) Members(ctx context.Context) ([]Member, error) {
	var ms []Member
	return ms, c.Get(ctx, "/v1/members", &ms)
}

// Assignment is GET /v1/assignment.
func (c *Client) Assignment(ctx context.Context) (Assignment, error) {
	var a Assignment
	return a, c.Get(ctx, "/v1/assignment", &a)
}

// Connectors is GET /connectors.
func (c *Client) Connectors(ctx context.Context) ([]string, error) {
	var names []string
	return names, c.Get(ctx, "/connectors", &names)
}

// Connector is GET /connectors/{name}.
func (c *Client) Connector(ctx context.Context, name string) (ConnectorInfo, error) {
	var ci ConnectorInfo
	return ci, c.Get(ctx, "/connectors/"+url.PathEscape(name), &ci)
}

// ConnectorStatus is GET /connectors/{name}/status.
func (c *Client) ConnectorStatus(ctx context.Context, name string) (ConnectorStatus, error) {
	var cs ConnectorStatus
	return cs, c.Get(ctx, "/connectors/"+url.PathEscape(name)+"/status", &cs)
}
