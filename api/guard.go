package api

import (
	"net"
	"net/http"
)

// allowWrite decides whether r may change anything (pause, resume, stop,
// restart): it returns nil, or the Error to answer. A write is allowed when
//
//   - the agent listens on a loopback address (127.0.0.0/8, ::1, or the
//     name localhost): it can be reached only from its own host, where
//     whoever asks could as well use berth's CLI; or
//   - the listener authenticated the request (Authenticated): a client
//     certificate verified against the web configuration's client CA, or
//     basic-auth credentials checked against its basic_auth_users.
//
// Any other write is refused with 403. This is the one place that decides.
func (s *server) allowWrite(r *http.Request) *Error {
	if loopback(s.opts.Listen) || Authenticated(r, s.opts.WebConfigFile) {
		return nil
	}
	return &Error{Code: http.StatusForbidden, Message: "writes are refused: this agent listens on " + s.opts.Listen +
		", not a loopback address, and the request is not authenticated; configure basic_auth_users or client certificates " +
		"(client_auth_type RequireAndVerifyClientCert or VerifyClientCertIfGiven) in agent.web_config_file, or use berth's CLI"}
}

// loopback reports whether the listen address host:port names only
// loopback addresses. An unspecified host ("", 0.0.0.0, ::) listens on
// every interface and is not loopback.
func loopback(listen string) bool {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		host = listen
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// write wraps a handler that changes something: allowWrite first.
func (s *server) write(f http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if e := s.allowWrite(r); e != nil {
			writeJSON(w, e.Code, e)
			return
		}
		f(w, r)
	}
}
