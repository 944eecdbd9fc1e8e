package testutil

import (
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// CutMode is how the proxy partitions.
type CutMode int

const (
	// Stall stops forwarding bytes but keeps every connection open, as a
	// network that drops packets does; bytes read are held and delivered
	// when the partition heals, as TCP retransmission would.
	Stall CutMode = iota
	// Reset closes every connection with RST (SO_LINGER 0) and refuses new
	// ones the same way until healed.
	Reset
)

// String is "stall" or "reset".
func (m CutMode) String() string { return [...]string{"stall", "reset"}[m] }

// Proxy forwards loopback TCP connections to one target, one goroutine
// per direction per connection, and can partition them.
type Proxy struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	cut    bool
	mode   CutMode
	open   chan struct{} // closed while healed; a fresh one while cut
	conns  map[net.Conn]bool
	closed bool
	wg     sync.WaitGroup
}

// StartProxy listens on a free loopback port and forwards to target
// ("http://host:port" or "host:port"); it is closed in Cleanup.
func StartProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	open := make(chan struct{})
	close(open)
	p := &Proxy{ln: ln, target: strings.TrimPrefix(target, "http://"), open: open, conns: map[net.Conn]bool{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// Endpoint is the proxy's client URL.
func (p *Proxy) Endpoint() string { return "http://" + p.ln.Addr().String() }

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		refuse := p.closed || (p.cut && p.mode == Reset)
		p.mu.Unlock()
		if refuse {
			rst(c)
			continue
		}
		up, err := net.DialTimeout("tcp", p.target, 2*time.Second)
		if err != nil {
			rst(c)
			continue
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			rst(c)
			rst(up)
			continue
		}
		p.conns[c], p.conns[up] = true, true
		p.wg.Add(2)
		p.mu.Unlock()
		go p.pipe(up, c)
		go p.pipe(c, up)
	}
}

// pipe copies src to dst; while the proxy is cut (stall) it holds what it
// read until the partition heals.
func (p *Proxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			gate := p.open
			p.mu.Unlock()
			<-gate
			p.mu.Lock()
			dead := !p.conns[dst]
			p.mu.Unlock()
			if dead {
				break
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				if tc, ok := dst.(*net.TCPConn); ok {
					_ = tc.CloseWrite()
				}
				return
			}
			break
		}
	}
	p.drop(dst)
	p.drop(src)
}

func (p *Proxy) drop(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	rst(c)
}

// rst closes c with an RST rather than a FIN.
func rst(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

// Partition cuts every connection through the proxy.
func (p *Proxy) Partition(mode CutMode) {
	p.mu.Lock()
	if !p.cut {
		p.cut, p.mode = true, mode
		p.open = make(chan struct{})
	}
	var victims []net.Conn
	if mode == Reset {
		for c := range p.conns {
			victims = append(victims, c)
			delete(p.conns, c)
		}
	}
	p.mu.Unlock()
	for _, c := range victims {
		rst(c)
	}
}

// Heal resumes forwarding (held bytes are delivered) and accepting.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		p.cut = false
		close(p.open)
	}
}

// close stops the proxy: every connection is reset and every goroutine
// waited for (Cleanup of StartProxy).
func (p *Proxy) close() {
	p.mu.Lock()
	p.closed = true
	var cs []net.Conn
	for c := range p.conns {
		cs = append(cs, c)
		delete(p.conns, c)
	}
	if p.cut {
		p.cut = false
		close(p.open)
	}
	p.mu.Unlock()
	p.ln.Close()
	for _, c := range cs {
		rst(c)
	}
	p.wg.Wait()
}
