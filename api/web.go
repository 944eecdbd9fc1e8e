package api

import (
	"fmt"
	"net/http"
	"os"

	"github.com/prometheus/exporter-toolkit/web"
	"go.yaml.in/yaml/v2"
)

// The listener's TLS, client certificates and basic auth come from a web
// configuration file in the format of the Prometheus exporter-toolkit
// (its docs/web-configuration.md; node_exporter's --web.config.file):
//
//	tls_server_config:
//	  cert_file: /etc/berth/tls/agent.pem
//	  key_file: /etc/berth/tls/agent-key.pem
//	  client_auth_type: RequireAndVerifyClientCert   # or VerifyClientCertIfGiven, ...
//	  client_ca_file: /etc/berth/tls/ca.pem
//	basic_auth_users:
//	  prometheus: $2y$10$...                         # bcrypt hash (htpasswd -nBC 10 "" | tr -d ':\n')
//
// so that a Prometheus scrape configuration with tls_config and basic_auth
// reaches the agent as it reaches node_exporter. The toolkit reads the file
// again for every connection (TLS) and request (users), so certificates and
// users can change without a restart; Server reads its TLS switch again
// for every connection and request, so TLS itself can be turned on or off.

// CheckWebConfig validates the web configuration file at path as the
// exporter-toolkit reads it (known keys only, certificate and key load,
// client CA, bcrypt hashes of basic_auth_users) and reports whether it
// turns TLS on. An empty path is plain HTTP: false, nil. It returns an
// error naming the file when it cannot be read or does not validate.
func CheckWebConfig(path string) (tls bool, err error) {
	if path == "" {
		return false, nil
	}
	if err := web.Validate(path); err != nil {
		return false, fmt.Errorf("web configuration %s: %w", path, err)
	}
	return WebTLS(path)
}

// WebTLS reports whether the web configuration file at path turns TLS on
// (any tls_server_config key is set), without loading its certificates:
// what a client needs to know to choose https. An empty path is false,
// nil. It returns an error naming the file when it cannot be read or is
// not the toolkit's YAML.
func WebTLS(path string) (bool, error) {
	c, err := readWebConfig(path)
	if err != nil || c == nil {
		return false, err
	}
	return c.TLSConfig.IsEnabled(), nil
}

// readWebConfig parses the file as the toolkit does (strict YAML into its
// Config); nil for an empty path.
func readWebConfig(path string) (*web.Config, error) {
	if path == "" {
		return nil, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("web configuration: %w", err)
	}
	var c web.Config
	if err := yaml.UnmarshalStrict(b, &c); err != nil {
		return nil, fmt.Errorf("web configuration %s: %w", path, err)
	}
	return &c, nil
}

// Authenticated reports whether the listener authenticated r: it came
// with a client certificate verified against the web configuration's
// client CA, or with basic-auth credentials while the web configuration
// file webConfigFile lists basic_auth_users (Serve has then checked them:
// a request whose credentials do not match never reaches a handler). A
// request over plain HTTP without users configured, or with an
// unverified certificate (client_auth_type RequestClientCert or
// RequireAnyClientCert), is not authenticated.
func Authenticated(r *http.Request, webConfigFile string) bool {
	if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 {
		return true
	}
	if _, _, ok := r.BasicAuth(); !ok {
		return false
	}
	c, err := readWebConfig(webConfigFile)
	return err == nil && c != nil && len(c.Users) > 0
}

// Identity names who the listener authenticated r as, for logs: "user
// NAME" (basic auth checked against basic_auth_users), "certificate
// CN=NAME" (a verified client certificate), or "" when it did not
// (Authenticated is false).
func Identity(r *http.Request, webConfigFile string) string {
	if !Authenticated(r, webConfigFile) {
		return ""
	}
	if u, _, ok := r.BasicAuth(); ok {
		if c, err := readWebConfig(webConfigFile); err == nil && c != nil && len(c.Users) > 0 {
			return "user " + u
		}
	}
	return "certificate CN=" + r.TLS.VerifiedChains[0][0].Subject.CommonName
}
