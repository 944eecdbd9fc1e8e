package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/exporter-toolkit/web"
)

// Timeouts bound the API server's connections (http.Server's fields of
// the same names). Zero fields take DefaultTimeouts' values.
type Timeouts struct {
	// ReadHeader bounds reading a request's headers, from the moment its
	// connection is accepted or was last used (and a TLS handshake).
	ReadHeader time.Duration
	// Read bounds reading a whole request, body included: a body sent a
	// byte at a time cannot hold a handler (nor the answer, which
	// net/http writes only after it has consumed the body) longer.
	Read time.Duration
	// Write bounds writing an answer, from the end of its request's
	// headers: a client that never reads cannot hold a handler.
	Write time.Duration
	// Idle bounds how long a keep-alive connection waits for its next
	// request before the server closes it.
	Idle time.Duration
}

// DefaultTimeouts are the agent's: 10 s for headers, 30 s for a whole
// request (the API's requests have no body to speak of), 2 min for an
// answer (a scrape of thousands of jobs; a Connect status view asks each
// peer that owns a job for 2 s at most, one after the other, so dozens of
// unreachable peers fit), 2 min of keep-alive idleness (Prometheus
// scrapes every 15 s to 1 min keep their connection). No endpoint
// streams: berth logs -f reads the log files, not the API.
var DefaultTimeouts = Timeouts{ReadHeader: 10 * time.Second, Read: 30 * time.Second, Write: 2 * time.Minute, Idle: 2 * time.Minute}

// ServerOptions configure a Server beyond its listener and handler.
type ServerOptions struct {
	// WebConfigFile is the exporter-toolkit web configuration file
	// (agent.web_config_file); "" serves plain HTTP.
	WebConfigFile string
	// Timeouts bound connections; zero fields are DefaultTimeouts'.
	Timeouts Timeouts
	// Log receives the server's lines; nil: slog.Default().
	Log *slog.Logger
}

// Server serves the API on one bound listener with the TLS and
// authentication of a web configuration file, and keeps serving it with
// the TLS the file asks for when the file changes.
//
// The exporter-toolkit reads the web configuration again for every TLS
// handshake (certificates) and request (basic_auth_users), but whether
// the listener speaks TLS at all it decides once, when it starts
// (exporter-toolkit issue 443): a file that drops tls_server_config would
// fail every handshake, one that adds it would leave the agent serving
// plain HTTP while the file says TLS. Server owns the accept loop and
// reads the file's TLS switch for each connection it accepts: when the
// switch changed, it starts a new http.Server in the new mode on the same
// listener, hands it this connection and shuts the old one down (its
// requests in progress finish; a kept-alive connection's next request is
// answered 421 and the connection closed: sameMode). When the file turns
// TLS on but its certificates do not load, connections are closed
// unanswered, with an ERROR line, until the file is fixed: never plain
// HTTP while the file says TLS.
type Server struct {
	ln      net.Listener
	handler http.Handler
	file    string
	to      Timeouts
	log     *slog.Logger

	mu      sync.Mutex
	cur     *mode // what new connections are handed to
	closed  bool
	lastErr string         // the last web configuration error logged
	retired sync.WaitGroup // the shutdowns of modes that were replaced
}

// mode is one http.Server serving connections in one TLS mode.
type mode struct {
	tls  bool
	srv  *http.Server // nil: refusing (the file turns TLS on but does not load)
	q    *connQueue
	done chan struct{} // closed when srv's Serve returned
}

// NewServer returns a server of h on the bound listener ln, configured by
// opts. Serve starts it.
func NewServer(ln net.Listener, h http.Handler, opts ServerOptions) *Server {
	to := opts.Timeouts
	def := DefaultTimeouts
	for _, p := range []struct {
		v *time.Duration
		d time.Duration
	}{
		{&to.ReadHeader, def.ReadHeader}, {&to.Read, def.Read}, {&to.Write, def.Write}, {&to.Idle, def.Idle},
	} {
		if *p.v <= 0 {
			*p.v = p.d
		}
	}
	log := opts.Log
	if log == nil {
		log = slog.Default()
	}
	return &Server{ln: ln, handler: h, file: opts.WebConfigFile, to: to, log: log}
}

// TLS reports whether the server hands new connections to TLS (the web
// configuration's tls_server_config as last read).
func (s *Server) TLS() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur != nil && s.cur.tls
}

// Refusing reports whether the server closes every new connection
// unanswered because the web configuration turns TLS on but does not load
// (logged at ERROR when it starts): what a metric or a health check can
// show.
func (s *Server) Refusing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur != nil && s.cur.srv == nil
}

// Serve accepts connections until Shutdown, and returns
// http.ErrServerClosed then, or the listener's error when accepting fails
// otherwise. It returns an error at once, serving nothing, when the web
// configuration cannot be read or turns TLS on but does not load. It may
// be called once.
func (s *Server) Serve() error {
	tls, err := WebTLS(s.file)
	if err != nil {
		return err
	}
	s.mu.Lock()
	if !s.closed {
		s.cur = s.start(tls)
	}
	m, lastErr := s.cur, s.lastErr
	s.mu.Unlock()
	if m != nil && m.srv == nil {
		return fmt.Errorf("serve on %s: web configuration %s: %s", s.ln.Addr(), s.file, lastErr)
	}
	var backoff time.Duration
	for {
		c, err := s.ln.Accept()
		if err != nil {
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if closed {
				return http.ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && !errors.Is(err, net.ErrClosed) {
				// Out of descriptors and the like: wait and accept again,
				// as http.Server does.
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				s.log.Error("accept a connection to the API", "error", err, "retry_in", backoff)
				time.Sleep(backoff)
				continue
			}
			return fmt.Errorf("accept on %s: %w", s.ln.Addr(), err)
		}
		backoff = 0
		s.dispatch(c)
	}
}

// dispatch hands c to the mode that the web configuration asks for now.
func (s *Server) dispatch(c net.Conn) {
	want, err := WebTLS(s.file)
	for range 3 {
		m := s.modeFor(want, err)
		if m == nil {
			break // shut down, or refusing
		}
		select {
		case m.q.conns <- c:
			return
		case <-m.q.closed: // replaced meanwhile: hand c to the new one
		case <-m.done:
		}
	}
	_ = c.Close()
}

// modeFor returns the mode to hand a new connection to when the web
// configuration's TLS switch reads want (readErr: the file could not be
// read; the current mode stays), starting it when it is not the current
// one; nil when the server is shut down or the file turns TLS on but does
// not load.
func (s *Server) modeFor(want bool, readErr error) *mode {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	if readErr != nil {
		s.logOnce("cannot read the web configuration: the listener keeps its TLS mode, and every request fails (500) until the file reads again, as with node_exporter (the exporter-toolkit reads it for each request)", readErr)
		if s.cur != nil {
			want = s.cur.tls
		}
	}
	m := s.cur
	if m != nil && m.tls == want && m.srv != nil {
		select {
		case <-m.done: // its Serve failed: start it again
		default:
			return m
		}
	}
	n := s.start(want)
	switch {
	case m == nil:
	case m.tls && !n.tls:
		s.log.Warn("the web configuration turned TLS off: serving plain HTTP from now on (a connection already open gets 421 and connects again)",
			"listen", s.ln.Addr().String(), "web_config_file", s.file)
	case !m.tls && n.tls && n.srv != nil:
		s.log.Warn("the web configuration turned TLS on: serving https from now on (a connection already open gets 421 and connects again)",
			"listen", s.ln.Addr().String(), "web_config_file", s.file)
	case m.srv == nil && n.srv != nil:
		s.log.Info("the web configuration loads again: serving https", "listen", s.ln.Addr().String(), "web_config_file", s.file)
	}
	s.cur = n
	if m != nil && m != n {
		s.retire(m)
	}
	if n.srv == nil {
		return nil
	}
	return n
}

// logOnce logs err at ERROR with msg unless it is the error last logged.
func (s *Server) logOnce(msg string, err error) {
	if err.Error() == s.lastErr {
		return
	}
	s.lastErr = err.Error()
	s.log.Error(msg, "web_config_file", s.file, "error", err)
}

// start returns a new mode serving with TLS on or off. With TLS on, the
// web configuration must load (certificates, client CA): when it does
// not, the mode refuses every connection.
func (s *Server) start(tls bool) *mode {
	m := &mode{tls: tls, q: newConnQueue(s.ln.Addr()), done: make(chan struct{})}
	if tls {
		if _, err := CheckWebConfig(s.file); err != nil {
			s.logOnce("the web configuration turns TLS on but does not load: refusing every connection until it does (never plain HTTP while it says TLS)", err)
			close(m.done)
			return m
		}
	}
	s.lastErr = ""
	m.srv = &http.Server{Handler: s.sameMode(s.handler), ReadHeaderTimeout: s.to.ReadHeader, ReadTimeout: s.to.Read,
		WriteTimeout: s.to.Write, IdleTimeout: s.to.Idle,
		// TLS handshake failures and the like, in the agent's log.
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelWarn)}
	file := s.file
	go func() {
		defer close(m.done)
		err := web.Serve(m.q, m.srv, &web.FlagConfig{WebConfigFile: &file}, s.log)
		// A server replaced by one of the other mode (its listener
		// closed under it) did not fail.
		if !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
			s.mu.Lock()
			s.logOnce("serving the API failed; trying again at the next connection", err)
			s.mu.Unlock()
		}
	}()
	return m
}

// sameMode wraps h: a request over a connection whose TLS is not what the
// web configuration asks for now (the file changed while a keep-alive
// connection stayed open) is answered 421 Misdirected Request without
// anything else, and its connection closed; the mode the file asks for
// takes the next connection. RFC 9110 section 15.5.20: a client may retry
// a request answered 421 over a different connection.
func (s *Server) sameMode(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		want, err := WebTLS(s.file)
		if err != nil || want == (r.TLS != nil) {
			h.ServeHTTP(w, r)
			return
		}
		_ = s.modeFor(want, nil)
		scheme := "http"
		if want {
			scheme = "https"
		}
		w.Header().Set("Connection", "close")
		WriteError(w, http.StatusMisdirectedRequest, "the agent's web configuration ("+s.file+") changed whether it serves TLS: connect again over "+scheme)
	})
}

// retire stops handing connections to m and shuts it down gracefully in
// the background (bounded by the Write timeout, then closed).
func (s *Server) retire(m *mode) {
	_ = m.q.Close()
	if m.srv == nil {
		return
	}
	s.retired.Add(1)
	go func() {
		defer s.retired.Done()
		ctx, cancel := context.WithTimeout(context.Background(), s.to.Write)
		defer cancel()
		if m.srv.Shutdown(ctx) != nil {
			_ = m.srv.Close()
		}
		<-m.done
	}()
}

// Shutdown stops accepting, lets the requests in progress finish until
// ctx ends (then closes their connections), and returns when Serve and
// every mode have returned: nil, or ctx's error when it ended first.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	m := s.cur
	s.cur = nil
	s.mu.Unlock()
	_ = s.ln.Close()
	var err error
	if m != nil {
		_ = m.q.Close()
		if m.srv != nil {
			if err = m.srv.Shutdown(ctx); err != nil {
				_ = m.srv.Close()
			}
		}
		<-m.done
	}
	s.retired.Wait()
	return err
}

// connQueue is a net.Listener whose connections the Server's accept loop
// hands over: one per mode, closed when the mode is replaced.
type connQueue struct {
	addr   net.Addr
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
}

func newConnQueue(addr net.Addr) *connQueue {
	return &connQueue{addr: addr, conns: make(chan net.Conn), closed: make(chan struct{})}
}

// Accept implements net.Listener: the next connection handed over, or
// net.ErrClosed once closed.
func (q *connQueue) Accept() (net.Conn, error) {
	select {
	case c := <-q.conns:
		return c, nil
	case <-q.closed:
		return nil, net.ErrClosed
	}
}

// Close implements net.Listener; the real listener stays open.
func (q *connQueue) Close() error {
	q.once.Do(func() { close(q.closed) })
	return nil
}

// Addr implements net.Listener: the real listener's address.
func (q *connQueue) Addr() net.Addr { return q.addr }
