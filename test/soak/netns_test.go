//go:build soak

package soak

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"runtime"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// The soak's network, made with netlink (github.com/vishvananda/netlink and
// netns) rather than ip(8): two bridges in the host's network namespace —
// "store", on whose address the etcd members listen, and "mgmt", over which
// the test reads each agent's API — and one network namespace per agent,
// joined to each bridge by a veth pair. Only the store link is ever cut, so
// the test keeps seeing a cut agent.

// network is the two bridges.
type network struct {
	t           testing.TB
	tag         string
	store, mgmt *bridge
	drop        *dropProgram // loaded on the first drop cut
}

// bridge is one bridge and its /24: the host has .1.
type bridge struct {
	link   *netlink.Bridge
	prefix [3]byte // 10.x.y
}

func (b *bridge) ip(host byte) net.IP {
	return net.IPv4(b.prefix[0], b.prefix[1], b.prefix[2], host)
}

// newNetwork makes the two bridges on free 10.x.y.0/24 subnets and
// removes them in Cleanup.
func newNetwork(t testing.TB) *network {
	t.Helper()
	n := &network{t: t, tag: randHex(3)}
	used := map[[3]byte]bool{}
	addrs, err := netlink.AddrList(nil, netlink.FAMILY_V4)
	if err != nil {
		t.Fatalf("list addresses: %v", err)
	}
	for _, a := range addrs {
		if ip := a.IP.To4(); ip != nil {
			used[[3]byte{ip[0], ip[1], ip[2]}] = true
		}
	}
	pick := func() [3]byte {
		for {
			p := [3]byte{10, byte(200 + rand.IntN(50)), byte(rand.IntN(256))}
			if !used[p] {
				used[p] = true
				return p
			}
		}
	}
	n.store = n.newBridge("sks"+n.tag, pick())
	n.mgmt = n.newBridge("skm"+n.tag, pick())
	t.Cleanup(func() {
		for _, b := range []*bridge{n.store, n.mgmt} {
			_ = netlink.LinkDel(b.link)
		}
		if n.drop != nil {
			n.drop.close()
		}
	})
	return n
}

func (n *network) newBridge(name string, prefix [3]byte) *bridge {
	n.t.Helper()
	b := &bridge{link: &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: name}}, prefix: prefix}
	if err := netlink.LinkAdd(b.link); err != nil {
		n.t.Fatalf("add bridge %s: %v", name, err)
	}
	addr := &netlink.Addr{IPNet: &net.IPNet{IP: b.ip(1), Mask: net.CIDRMask(24, 32)}}
	if err := netlink.AddrAdd(b.link, addr); err != nil {
		n.t.Fatalf("address %s on %s: %v", addr, name, err)
	}
	if err := netlink.LinkSetUp(b.link); err != nil {
		n.t.Fatalf("set %s up: %v", name, err)
	}
	return b
}

// nsHost is one agent's network namespace.
type nsHost struct {
	n      *network
	name   string // /run/netns/<name>
	ns     netns.NsHandle
	handle *netlink.Handle // netlink inside the namespace
	// storeIP and mgmtIP are its addresses on the two bridges.
	storeIP, mgmtIP net.IP
	// storeHost is the host side of the store link (a bridge port);
	// storeInside its peer in the namespace.
	storeHost, storeInside string
	cut                    cutMode
}

// addHost makes network namespace number i (0..199) with one link to
// each bridge, and deletes it in Cleanup (after the agents in it are
// gone: register it before starting them).
func (n *network) addHost(i int) *nsHost {
	n.t.Helper()
	h := &nsHost{n: n, name: fmt.Sprintf("soak-%s-%d", n.tag, i),
		storeIP: n.store.ip(byte(10 + i)), mgmtIP: n.mgmt.ip(byte(10 + i)),
		storeHost: fmt.Sprintf("vs%s%d", n.tag, i), storeInside: fmt.Sprintf("ps%s%d", n.tag, i)}
	var err error
	h.ns, err = newNamedNS(h.name)
	if err != nil {
		n.t.Fatalf("network namespace %s: %v", h.name, err)
	}
	n.t.Cleanup(func() {
		if h.handle != nil {
			h.handle.Close()
		}
		h.ns.Close()
		_ = netns.DeleteNamed(h.name) // its veth ends go with it
		_ = netlink.LinkDel(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: h.storeHost}})
	})
	if h.handle, err = netlink.NewHandleAt(h.ns); err != nil {
		n.t.Fatalf("netlink in %s: %v", h.name, err)
	}
	h.link(n.store, h.storeHost, h.storeInside, h.storeIP)
	h.link(n.mgmt, fmt.Sprintf("vm%s%d", n.tag, i), fmt.Sprintf("pm%s%d", n.tag, i), h.mgmtIP)
	lo, err := h.handle.LinkByName("lo")
	if err == nil {
		err = h.handle.LinkSetUp(lo)
	}
	if err != nil {
		n.t.Fatalf("loopback up in %s: %v", h.name, err)
	}
	return h
}

// newNamedNS makes a named network namespace from a locked thread and
// returns that thread to the host's namespace before unlocking it.
func newNamedNS(name string) (netns.NsHandle, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		return netns.None(), err
	}
	defer orig.Close()
	ns, err := netns.NewNamed(name) // switches this thread into it
	if serr := netns.Set(orig); serr != nil {
		// This thread must not run anything else: it stays locked, so it
		// ends with this goroutine.
		runtime.LockOSThread()
		return netns.None(), fmt.Errorf("back to the host's namespace: %w", serr)
	}
	return ns, err
}

// inNS runs f on a thread that has entered ns, then returns the thread to
// the namespace it came from. The thread must not end (a Go thread ends
// when its goroutine returns locked): a child started with Pdeathsig from
// that thread earlier — an etcd member, a burner — would be killed with
// it. Only a thread that cannot go back is left to end.
func inNS(ns netns.NsHandle, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer orig.Close()
		if err := netns.Set(ns); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("enter network namespace: %w", err)
			return
		}
		ferr := f()
		if err := netns.Set(orig); err != nil {
			errc <- errors.Join(ferr, fmt.Errorf("back to the host's namespace: %w", err)) // the thread ends, locked
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// link makes a veth pair: hostSide a port of b, inside (with ip/24) in the
// namespace, both up.
func (h *nsHost) link(b *bridge, hostSide, inside string, ip net.IP) {
	t := h.n.t
	t.Helper()
	v := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: hostSide, MasterIndex: b.link.Index},
		PeerName: inside, PeerNamespace: netlink.NsFd(int(h.ns))}
	if err := netlink.LinkAdd(v); err != nil {
		t.Fatalf("veth %s/%s: %v", hostSide, inside, err)
	}
	if err := netlink.LinkSetUp(v); err != nil {
		t.Fatalf("set %s up: %v", hostSide, err)
	}
	l, err := h.handle.LinkByName(inside)
	if err != nil {
		t.Fatalf("%s in %s: %v", inside, h.name, err)
	}
	if err := h.handle.AddrAdd(l, &netlink.Addr{IPNet: &net.IPNet{IP: ip, Mask: net.CIDRMask(24, 32)}}); err != nil {
		t.Fatalf("address %s on %s: %v", ip, inside, err)
	}
	if err := h.handle.LinkSetUp(l); err != nil {
		t.Fatalf("set %s up: %v", inside, err)
	}
}
