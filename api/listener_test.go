package api

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berthd/berth/internal/testutil"
	"github.com/berthd/berth/spec"
)

// startServer serves h with a Server on a free loopback port with the
// web configuration file web and timeouts to; it is shut down when the
// test ends.
func startServer(t *testing.T, h http.Handler, web string, to Timeouts, log *slog.Logger) (*Server, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	s := NewServer(ln, h, ServerOptions{WebConfigFile: web, Timeouts: to, Log: log})
	served := make(chan error, 1)
	go func() { served <- s.Serve() }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
	})
	return s, ln.Addr().String()
}

// readStatus reads an HTTP/1.1 answer's status line from c, waiting at
// most wait; "" and the error when none came.
func readStatus(c net.Conn, wait time.Duration) (string, error) {
	_ = c.SetReadDeadline(time.Now().Add(wait))
	line, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(line), err
}

// A keep-alive connection that sends nothing after its answer is closed
// after Idle.
func TestServerClosesIdleConnections(t *testing.T) {
	_, addr := startServer(t, Handler(newSecBackend("a", &spec.Workload{}), Options{}), "",
		Timeouts{Idle: 200 * time.Millisecond}, nil)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: %s\r\n\r\n", addr)
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	r := bufio.NewReader(c)
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Close {
		t.Fatalf("GET /healthz: %d, close %v; want 200 over a kept-alive connection", resp.StatusCode, resp.Close)
	}
	// The server closes it: EOF long before the 30 s deadline (the
	// default Idle is 2 min).
	if _, err := r.ReadByte(); !errors.Is(err, io.EOF) {
		t.Errorf("an idle keep-alive connection: %v, want EOF (closed by the server after Idle)", err)
	}
}

// A request body sent a byte at a time holds neither the handler nor the
// answer longer than Read: net/http consumes an unread body before it
// answers, and the read deadline ends that.
func TestServerBoundsSlowBodies(t *testing.T) {
	_, addr := startServer(t, Handler(newSecBackend("a", secretWorkload()), Options{}), "",
		Timeouts{Read: 300 * time.Millisecond}, nil)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// 100000 bytes at one per 10 ms would take 1000 s.
	fmt.Fprintf(c, "PUT /connectors/orders/pause HTTP/1.1\r\nHost: %s\r\nContent-Length: 100000\r\n\r\n", addr)
	stop := make(chan struct{})
	dribbled := make(chan struct{})
	go func() {
		defer close(dribbled)
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				if _, err := c.Write([]byte{'x'}); err != nil {
					return
				}
			}
		}
	}()
	defer func() { close(stop); <-dribbled }()
	// 20 s: well above the 300 ms bound, below the default 30 s.
	line, err := readStatus(c, 20*time.Second)
	if err != nil && !errors.Is(err, io.EOF) {
		t.Fatalf("a body sent a byte at a time: no answer and no close within 20 s: %v", err)
	}
	t.Logf("answer: %q, %v", line, err)
}

// A slow header is bounded by ReadHeader.
func TestServerBoundsSlowHeaders(t *testing.T) {
	_, addr := startServer(t, Handler(newSecBackend("a", &spec.Workload{}), Options{}), "",
		Timeouts{ReadHeader: 200 * time.Millisecond}, nil)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: %s\r\n", addr) // never ends its headers
	// 8 s: well above the 200 ms bound, below the default 10 s.
	if _, err := readStatus(c, 8*time.Second); err != nil && !errors.Is(err, io.EOF) {
		t.Errorf("headers never finished: %v, want the server to answer or close within ReadHeader", err)
	}
}

// tlsFiles writes a CA, a server certificate for 127.0.0.1 and the web
// configuration that turns TLS on with them; it returns the CA's file and
// that configuration.
func tlsFiles(t *testing.T) (ca, tlsConfig string) {
	t.Helper()
	c := testutil.NewCA(t, "berth-test")
	cert, key := c.Issue("agent", "127.0.0.1")
	return c.File, fmt.Sprintf("tls_server_config:\n  cert_file: %s\n  key_file: %s\n", cert, key)
}

func writeWeb(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// The web configuration's TLS switch is applied while the agent runs, in
// both directions: the next connection is served in the mode the file
// asks for, a kept-alive connection of the old mode gets 421 for its next
// request; a file that turns TLS on with certificates that do not load
// closes connections unanswered, with an ERROR line. Never plain HTTP
// while the file says TLS.
func TestServerFollowsWebConfigTLS(t *testing.T) {
	ca, tlsOn := tlsFiles(t)
	web := filepath.Join(t.TempDir(), "web.yml")
	writeWeb(t, web, "http_server_config:\n  http2: false\n")
	var logBuf syncBuffer
	s, addr := startServer(t, Handler(newSecBackend("a", &spec.Workload{}), Options{}), web, Timeouts{},
		slog.New(slog.NewTextHandler(&logBuf, nil)))
	ctx := context.Background()
	plain := NewClient(addr)
	secure, err := NewClientFor(addr, spec.APIClient{TLS: spec.TLS{CA: ca}}, true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := plain.Jobs(ctx); err != nil || s.TLS() {
		t.Fatalf("plain HTTP at start: %v, TLS %v", err, s.TLS())
	}
	if _, err := secure.Jobs(ctx); err == nil {
		t.Fatal("https answered while the file does not turn TLS on")
	}
	// A connection kept alive from before the change.
	kept, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer kept.Close()
	fmt.Fprintf(kept, "GET /healthz HTTP/1.1\r\nHost: %s\r\n\r\n", addr)
	kr := bufio.NewReader(kept)
	_ = kept.SetReadDeadline(time.Now().Add(30 * time.Second))
	if resp, err := http.ReadResponse(kr, nil); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("kept connection: %v", err)
	} else {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}

	// TLS on.
	writeWeb(t, web, tlsOn)
	if _, err := secure.Jobs(ctx); err != nil {
		t.Errorf("https after the file turned TLS on: %v", err)
	}
	if !s.TLS() {
		t.Error("TLS() false after the file turned TLS on")
	}
	// A peer whose member record still says http:// (the agent started
	// without TLS) moves up to https with the same trust.
	peer, err := NewClientFor(addr, spec.APIClient{TLS: spec.TLS{CA: ca}}, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := peer.Jobs(ctx); err != nil {
		t.Errorf("an http:// client with the CA after TLS was turned on: %v, want the answer over https", err)
	}
	if _, err := plain.Jobs(ctx); err == nil || !strings.Contains(err.Error(), "serves https") {
		t.Errorf("plain HTTP while the file says TLS: %v, want an error saying the agent serves https", err)
	}
	fmt.Fprintf(kept, "GET /v1/jobs HTTP/1.1\r\nHost: %s\r\n\r\n", addr)
	if resp, err := http.ReadResponse(kr, nil); err == nil {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusMisdirectedRequest || !strings.Contains(string(body), "https") {
			t.Errorf("a kept plain connection after TLS was turned on: %d %s, want 421 naming https", resp.StatusCode, body)
		}
	}
	if !strings.Contains(logBuf.String(), "turned TLS on") {
		t.Errorf("no log line of TLS turned on:\n%s", logBuf.String())
	}

	// TLS off again.
	writeWeb(t, web, "")
	if _, err := plain.Jobs(ctx); err != nil {
		t.Errorf("plain HTTP after the file turned TLS off: %v", err)
	}
	if s.TLS() {
		t.Error("TLS() true after the file turned TLS off")
	}
	if !strings.Contains(logBuf.String(), "turned TLS off") {
		t.Errorf("no log line of TLS turned off:\n%s", logBuf.String())
	}

	// TLS on with a certificate that does not exist: nothing is served,
	// plain or not, and an ERROR says why; fixed, https again.
	writeWeb(t, web, strings.Replace(tlsOn, "cert_file: ", "cert_file: /nonexistent", 1))
	if _, err := plain.Jobs(ctx); err == nil {
		t.Error("plain HTTP answered while the file says TLS (with a broken certificate)")
	}
	if _, err := secure.Jobs(ctx); err == nil || !strings.Contains(err.Error(), "web configuration may not load") {
		t.Errorf("https with a certificate that does not load: %v, want an error saying why", err)
	}
	if !s.Refusing() {
		t.Error("Refusing() false while the web configuration turns TLS on but does not load")
	}
	if !strings.Contains(logBuf.String(), "level=ERROR") || !strings.Contains(logBuf.String(), "does not load") {
		t.Errorf("no ERROR line for a web configuration that does not load:\n%s", logBuf.String())
	}
	writeWeb(t, web, tlsOn)
	if _, err := secure.Jobs(ctx); err != nil {
		t.Errorf("https after the certificate was fixed: %v", err)
	}
	if s.Refusing() {
		t.Error("Refusing() true after the certificate was fixed")
	}
}

// A web configuration that turns TLS on but does not load fails Serve at
// once, naming the file: nothing is served.
func TestServeRefusesTLSThatDoesNotLoad(t *testing.T) {
	_, tlsOn := tlsFiles(t)
	web := filepath.Join(t.TempDir(), "web.yml")
	writeWeb(t, web, strings.Replace(tlsOn, "key_file: ", "key_file: /nonexistent", 1))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := NewServer(ln, http.NotFoundHandler(), ServerOptions{WebConfigFile: web, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err := s.Serve(); err == nil || !strings.Contains(err.Error(), web) {
		t.Errorf("Serve with a key that does not exist: %v, want an error naming %s", err, web)
	}
	if err := s.Shutdown(context.Background()); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
}
