package api

import (
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// Two guards stand before every handler, against web pages that the
// operator's browser shows while it can reach the agent:
//
//   - hosts: a plain-HTTP request whose Host header names neither an IP
//     address nor a name the agent answers to is refused with 421
//     Misdirected Request (RFC 9110 section 15.5.20). This is what a
//     DNS-rebinding page sends: its own name, re-pointed at the agent's
//     address, so that the browser lets it read the answers. etcd's --host-whitelist is the same check (it
//     answers 421 to plain-HTTP requests for other names, CVE-2018-5702).
//     Over TLS the check is left out, as in etcd: a rebinding page's
//     browser would not accept the agent's certificate for its name.
//   - cross-origin writes: a PUT or POST that a browser sends for a page of
//     another origin (its Sec-Fetch-Site header, or an Origin that is not
//     the Host) is refused with 403, by the standard library's
//     http.CrossOriginProtection. A no-cors fetch cannot read the answer,
//     but before this it could still restart a connector.
//
// Requests that carry neither header (berth's CLI, curl, a Prometheus
// scrape, a peer agent, a Kafka Connect client) pass both guards as
// before; so does any request that names the agent by an IP address.

// hostGuard decides which Host headers the agent answers to.
type hostGuard struct {
	any   bool            // "*" listed: every Host
	names map[string]bool // lower-case host names, without port
}

// newHostGuard returns the guard for the names of listen (the configured
// agent.listen, host:port) and the operator's allowed (agent.allowed_hosts:
// host names, optionally with a port that is ignored; "*" for any). The
// names localhost and this host's own name (os.Hostname) are always
// allowed.
func newHostGuard(listen string, allowed []string) *hostGuard {
	g := &hostGuard{names: map[string]bool{"localhost": true}}
	if h, err := os.Hostname(); err == nil && h != "" {
		g.names[strings.ToLower(h)] = true
	}
	for _, a := range append([]string{listen}, allowed...) {
		if a == "*" {
			g.any = true
			continue
		}
		if h := hostOnly(a); h != "" {
			g.names[h] = true
		}
	}
	return g
}

// hostOnly is the lower-case host of a Host header or address, without
// its port or an IPv6 literal's brackets, and without a trailing dot.
func hostOnly(hostport string) string {
	h := hostport
	if host, _, err := net.SplitHostPort(hostport); err == nil {
		h = host
	}
	h = strings.TrimSuffix(strings.TrimPrefix(strings.TrimSuffix(h, "]"), "["), ".")
	return strings.ToLower(h)
}

// allows reports whether the agent answers to the Host header host: any IP
// address (a page whose origin is an IP address cannot re-point it), one
// of the guard's names, or any Host when "*" is allowed. An empty Host
// (HTTP/1.0) is allowed: a browser always sends one.
func (g *hostGuard) allows(host string) bool {
	if g.any || host == "" {
		return true
	}
	h := hostOnly(host)
	if i := strings.IndexByte(h, '%'); i >= 0 {
		h = h[:i] // an IPv6 zone
	}
	return net.ParseIP(h) != nil || g.names[h]
}

// guardOrigin wraps h with the Host guard and the cross-origin guard
// (see above), logging each refusal on log.
func guardOrigin(h http.Handler, hosts *hostGuard, log *slog.Logger) http.Handler {
	crossLog, hostLog := newRefusalLog(log), newRefusalLog(log)
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		crossLog.warn("refused a cross-origin write from a web page", "method", r.Method, "path", r.URL.Path,
			"origin", r.Header.Get("Origin"), "sec_fetch_site", r.Header.Get("Sec-Fetch-Site"), "remote", r.RemoteAddr)
		WriteError(w, http.StatusForbidden, "cross-origin request refused: a web page of another origin ("+
			originOf(r)+") may not "+r.Method+" "+r.URL.Path+"; use berth's CLI or a client that sends no Origin")
	}))
	guarded := cop.Handler(h)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil && !hosts.allows(r.Host) {
			hostLog.warn("refused a request for a host name this agent does not answer to (DNS rebinding?)", "host", r.Host,
				"method", r.Method, "path", r.URL.Path, "remote", r.RemoteAddr)
			WriteError(w, http.StatusMisdirectedRequest, "misdirected request: this agent does not answer to the host name "+
				r.Host+"; name it by its IP address, localhost or its host name, or list the name in agent.allowed_hosts")
			return
		}
		guarded.ServeHTTP(w, r)
	})
}

// originOf names the origin a refused request came from, for its answer.
func originOf(r *http.Request) string {
	if o := r.Header.Get("Origin"); o != "" {
		return o
	}
	return "Sec-Fetch-Site: " + r.Header.Get("Sec-Fetch-Site")
}

// refusalLog logs refused requests of one kind at most once per
// refusalEvery, saying how many were refused without a line since: a page
// that keeps sending requests cannot flood the agent's log.
type refusalLog struct {
	log        *slog.Logger
	sometimes  rate.Sometimes
	suppressed atomic.Int64
}

// refusalEvery is how often a refusal of one kind is logged at most.
const refusalEvery = 10 * time.Second

func newRefusalLog(log *slog.Logger) *refusalLog {
	return &refusalLog{log: log, sometimes: rate.Sometimes{First: 1, Interval: refusalEvery}}
}

// warn logs msg with args, or counts it when a line of this kind was
// logged less than refusalEvery ago.
func (l *refusalLog) warn(msg string, args ...any) {
	logged := false
	l.sometimes.Do(func() {
		logged = true
		if n := l.suppressed.Swap(0); n > 0 {
			args = append(args, "refused_without_a_line_since", n)
		}
		l.log.Warn(msg, args...)
	})
	if !logged {
		l.suppressed.Add(1)
	}
}
