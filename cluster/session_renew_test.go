package cluster

import (
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berthd/berth/assign"
	"github.com/berthd/berth/internal/testutil"
)

// After a slow grant — a request that waited in a network that has just
// healed — the first renewal is due one renewal interval after the grant
// was SENT, as every later one is after the previous renewal was sent: not
// one interval after Join returned, which can leave the session to fence
// itself moments after it began (seen in the partition soak: a second
// fencing right after every rejoin whose grant had waited out the cut).
func TestFirstRenewalDueFromGrantSent(t *testing.T) {
	px := startDelayProxy(t, shared.Endpoints()[0])
	// A TTL long enough that a loaded machine's slow write after the grant
	// still leaves more than an interval before the local deadline (Join
	// then does not renew itself), and that "at once" and "an interval
	// later" (8 s) stay far apart.
	const ttl = 30 * time.Second
	c := connect(t, []string{px.URL()}, uniqueName(t), func(cfg *Config) { cfg.SessionTTL = ttl })
	delay := renewInterval(ttl) + time.Second
	held := px.delayNext(delay) // the grant waits 9 s on its way
	var s *Session
	joined := make(chan struct{})
	go func() {
		defer close(joined)
		s = join(t, c, assign.Member{ID: "a1"})
	}()
	<-held
	px.delayNext(0)
	<-joined
	returned := time.Now()
	granted := s.LastRenewal()
	if returned.Sub(granted) < delay {
		t.Fatalf("Join returned %s after the grant was sent; the proxy did not hold it %s", returned.Sub(granted), delay)
	}
	// The grant's interval (8 s for a 30 s TTL) has passed: renew now.
	var first time.Time
	testutil.Eventually(t, ttl, "the first renewal", func() bool {
		first = s.LastRenewal()
		return first.After(granted)
	})
	if late := first.Sub(returned); late > renewInterval(ttl)/2 {
		t.Fatalf("first renewal sent %s after Join returned, %s after the grant was sent; want it at once (interval %s after the grant)",
			late, first.Sub(granted), renewInterval(ttl))
	}
	if err := s.Err(); err != nil {
		t.Fatalf("session ended: %v", err)
	}
}

// delayProxy forwards TCP to an etcd server; the next chunk the client
// sends after delayNext(d) waits d before it is forwarded.
type delayProxy struct {
	ln       net.Listener
	upstream string

	mu    sync.Mutex
	delay time.Duration
	held  chan struct{} // closed when a chunk starts waiting
	conns []net.Conn
}

func startDelayProxy(t testing.TB, upstreamURL string) *delayProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &delayProxy{ln: ln, upstream: strings.TrimPrefix(upstreamURL, "http://")}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		p.serve(&wg)
	}()
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
		wg.Wait()
	})
	return p
}

func (p *delayProxy) URL() string { return "http://" + p.ln.Addr().String() }

// delayNext makes the next client chunk wait d (0: none) and returns a
// channel closed once one does.
func (p *delayProxy) delayNext(d time.Duration) <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.delay, p.held = d, make(chan struct{})
	return p.held
}

func (p *delayProxy) serve(wg *sync.WaitGroup) {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		u, err := net.Dial("tcp", p.upstream)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, u)
		p.mu.Unlock()
		wg.Add(2)
		go func() {
			defer wg.Done()
			defer u.Close()
			buf := make([]byte, 32<<10)
			for {
				n, err := c.Read(buf)
				if n > 0 {
					p.mu.Lock()
					d, held := p.delay, p.held
					if d > 0 {
						p.delay = 0
						close(held)
					}
					p.mu.Unlock()
					time.Sleep(d) // the network is slow, not the test waiting
					if _, werr := u.Write(buf[:n]); werr != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		}()
		go func() {
			defer wg.Done()
			defer c.Close()
			_, _ = io.Copy(c, u)
		}()
	}
}
