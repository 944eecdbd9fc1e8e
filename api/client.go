package api

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Client calls one agent's API.
type Client struct {
	// Base is the agent's URL, "http://127.0.0.1:9750".
	Base string
	// HTTP is the client used; NewClient sets one with a 10 s timeout.
	HTTP *http.Client
}

// NewClient returns a client for the agent at addr: "host:port" or a URL.
func NewClient(addr string) *Client {
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	return &Client{Base: strings.TrimSuffix(addr, "/"), HTTP: &http.Client{Timeout: 10 * time.Second}}
}

// Get fetches path ("/v1/jobs") and decodes the JSON answer into v. A
// non-2xx answer is returned as *Error (decoded from its body, or made up
// from the status when the body is not an Error); a transport failure is
// wrapped with the URL.
func (c *Client) Get(ctx context.Context, path string, v any) error {
	u := c.Base + path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return fmt.Errorf("GET %s: %w", u, err)
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return fmt.Errorf("GET %s: %w", u, err)
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
		}
		return e
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("GET %s: decode answer: %w", u, err)
	}
	return nil
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
