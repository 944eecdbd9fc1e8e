package spec

// APIClient is [agent.client]: the TLS trust and credentials that berth's
// own HTTP requests to agents' APIs use (berth status and the other
// commands that ask the agent of their --config, and an agent asking its
// peers for their jobs' states). Zero: plain requests, the system's CAs.
type APIClient struct {
	// TLS: CA is the CA bundle that signed the agents' server
	// certificates (empty: the system's); Cert and Key are the client
	// certificate presented to an agent whose web configuration asks for
	// one; ServerName overrides the name the server certificate is checked
	// against (default: the host of the address).
	TLS TLS
	// Username is the basic-auth user name; "" sends no basic auth.
	Username string
	// Password is the basic-auth password, written in the file itself;
	// exclusive with PasswordFile.
	Password string
	// PasswordFile is the absolute path of a file holding the basic-auth
	// password (read with host.ReadPasswordFile: only its owner may read it).
	PasswordFile string
}

// TLS names the PEM files of a client's TLS configuration.
type TLS struct {
	// CA is the bundle that signed the servers' certificates; "" trusts
	// the system's CAs.
	CA string
	// Cert and Key are the client certificate and its private key, given
	// together; "" presents none.
	Cert, Key string
	// ServerName is the name the server's certificate must carry; "" uses
	// the host of the address dialled.
	ServerName string
}

// Enabled reports whether any TLS setting is given: the client then speaks
// TLS.
func (t TLS) Enabled() bool { return t != TLS{} }
