package api

import (
	"net"
	"net/http"
)

// allowWrite decides whether r may change anything (pause, resume, stop,
// restart): it returns nil, or the Error to answer. The API has no
// authentication yet, so the rule is the listen address: an agent that
// listens on a loopback address (127.0.0.0/8, ::1, or the name localhost)
// can be reached only from its own host, where whoever asks could as well
// use berth's CLI; an agent listening on any other address refuses every
// write with 403. This is the one place that decides: authentication
// extends it.
func (s *server) allowWrite(r *http.Request) *Error {
	if loopback(s.opts.Listen) {
		return nil
	}
	return &Error{Code: http.StatusForbidden, Message: "writes are refused: this agent listens on " + s.opts.Listen +
		", not a loopback address, and the API has no authentication yet; use berth's CLI, or the API of an agent listening on 127.0.0.1"}
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
