//go:build soak

package soak

import (
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/berthd/berth/internal/testutil"
	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// cutMode is how an agent's store link is cut.
type cutMode int

const (
	healed cutMode = iota
	// linkDown sets the host side of the veth pair down: the agent's side
	// loses carrier, as when a cable is pulled.
	linkDown
	// dropAll keeps both sides up and drops every packet, silently: no
	// carrier change, no ICMP, no reset. netem with 100 % loss on both
	// sides where the kernel has sch_netem; otherwise a tc BPF filter
	// (clsact, direct action TC_ACT_SHOT) on the agent's side, ingress and
	// egress.
	dropAll
	// dropIn drops, silently, only what the store sends the agent (netem
	// on the host side; the BPF filter on the agent's ingress): its
	// requests, a lease renewal among them, still reach etcd, but no
	// answer, not even a TCP acknowledgement, comes back.
	dropIn
	// dropOut drops only what the agent sends (netem on its side; the BPF
	// filter on its egress): nothing it asks reaches etcd.
	dropOut
)

func (m cutMode) String() string {
	return [...]string{"healed", "link-down", "drop", "drop-in", "drop-out"}[m]
}

// partition cuts h's store link.
func (h *nsHost) partition(m cutMode) error {
	if h.cut != healed {
		return fmt.Errorf("%s is already cut (%s)", h.name, h.cut)
	}
	var err error
	switch m {
	case linkDown:
		err = netlink.LinkSetDown(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: h.storeHost}})
	case dropAll, dropIn, dropOut:
		err = h.drop(m)
	}
	if err != nil {
		return fmt.Errorf("cut %s (%s): %w", h.name, m, err)
	}
	h.cut = m
	return nil
}

// heal undoes the cut.
func (h *nsHost) heal() error {
	var err error
	switch h.cut {
	case linkDown:
		err = netlink.LinkSetUp(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: h.storeHost}})
	case dropAll, dropIn, dropOut:
		err = h.undrop()
	}
	if err != nil {
		return fmt.Errorf("heal %s (%s): %w", h.name, h.cut, err)
	}
	h.cut = healed
	return nil
}

// drop drops every packet on the store link in the directions of mode m
// (dropAll, dropIn, dropOut): netem loss 100 % on the sending end of each,
// or where the kernel has no sch_netem, the BPF filter on the agent's
// side.
func (h *nsHost) drop(m cutMode) error {
	in, out := m != dropOut, m != dropIn
	hostLink, err := netlink.LinkByName(h.storeHost)
	if err != nil {
		return err
	}
	inside, err := h.handle.LinkByName(h.storeInside)
	if err != nil {
		return err
	}
	netem := func(hd *netlink.Handle, l netlink.Link) error {
		return hd.QdiscAdd(netlink.NewNetem(netlink.QdiscAttrs{LinkIndex: l.Attrs().Index, Handle: netlink.MakeHandle(1, 0), Parent: netlink.HANDLE_ROOT},
			netlink.NetemQdiscAttrs{Loss: 100}))
	}
	root := netlink.Handle{}
	// The host side's egress is what the agent receives; the inside's,
	// what it sends.
	first, firstHandle, second := hostLink, &root, inside
	if !in {
		first, firstHandle, second = inside, h.handle, nil
	}
	if err := netem(firstHandle, first); err == nil {
		if in && out {
			if err := netem(h.handle, second); err != nil {
				return errors.Join(err, root.QdiscDel(&netlink.GenericQdisc{QdiscAttrs: netlink.QdiscAttrs{LinkIndex: hostLink.Attrs().Index, Parent: netlink.HANDLE_ROOT}}))
			}
		}
		return nil
	} else if !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.EOPNOTSUPP) {
		return fmt.Errorf("netem on %s: %w", first.Attrs().Name, err)
	}
	// No sch_netem in this kernel: the BPF filter.
	if h.n.drop == nil {
		if h.n.drop, err = loadDropProgram(); err != nil {
			return err
		}
	}
	idx := inside.Attrs().Index
	if err := h.handle.QdiscAdd(&netlink.Clsact{QdiscAttrs: netlink.QdiscAttrs{LinkIndex: idx, Handle: netlink.MakeHandle(0xffff, 0), Parent: netlink.HANDLE_CLSACT}}); err != nil {
		return fmt.Errorf("clsact on %s: %w", h.storeInside, err)
	}
	var parents []uint32
	if in {
		parents = append(parents, netlink.HANDLE_MIN_INGRESS)
	}
	if out {
		parents = append(parents, netlink.HANDLE_MIN_EGRESS)
	}
	for _, parent := range parents {
		f := &netlink.BpfFilter{
			FilterAttrs: netlink.FilterAttrs{LinkIndex: idx, Parent: parent, Handle: netlink.MakeHandle(0, 1), Protocol: unix.ETH_P_ALL, Priority: 1},
			Fd:          h.n.drop.prog.FD(), Name: "soak-drop", DirectAction: true,
		}
		if err := h.handle.FilterAdd(f); err != nil {
			return errors.Join(fmt.Errorf("drop filter on %s: %w", h.storeInside, err), h.undrop())
		}
	}
	return nil
}

// undrop removes the netem qdiscs or the clsact qdisc (and its filters).
func (h *nsHost) undrop() error {
	inside, err := h.handle.LinkByName(h.storeInside)
	if err != nil {
		return err
	}
	var errs []error
	qs, err := h.handle.QdiscList(inside)
	errs = append(errs, err)
	for _, q := range qs {
		if q.Type() == "clsact" || q.Type() == "netem" {
			errs = append(errs, h.handle.QdiscDel(q))
		}
	}
	if hostLink, err := netlink.LinkByName(h.storeHost); err == nil {
		qs, err := netlink.QdiscList(hostLink)
		errs = append(errs, err)
		for _, q := range qs {
			if q.Type() == "netem" {
				errs = append(errs, netlink.QdiscDel(q))
			}
		}
	}
	return errors.Join(errs...)
}

// dropProgram is a tc classifier that drops every packet: r0 =
// TC_ACT_SHOT; exit.
type dropProgram struct{ prog *ebpf.Program }

func loadDropProgram() (*dropProgram, error) {
	const tcActShot = 2 // include/uapi/linux/pkt_cls.h
	p, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:         "soak_drop",
		Type:         ebpf.SchedCLS,
		License:      "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, tcActShot), asm.Return()},
	})
	if err != nil {
		return nil, fmt.Errorf("load the BPF drop program: %w", err)
	}
	return &dropProgram{prog: p}, nil
}

func (d *dropProgram) close() { _ = d.prog.Close() }

// The cuts do what they say: a connection from an agent's namespace to the
// store bridge works when healed; with the link down or every packet
// dropped, either way or one way only, a connect neither succeeds nor is
// refused (it times out: no reset); healed again, it works; and the
// management link is never cut.
func TestSoakNetworkCuts(t *testing.T) {
	testutil.NeedRoot(t)
	n := newNetwork(t)
	h := n.addHost(0)
	store, err := net.Listen("tcp", net.JoinHostPort(n.store.ip(1).String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	mgmt, err := net.Listen("tcp", net.JoinHostPort(n.mgmt.ip(1).String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer mgmt.Close()
	for _, ln := range []net.Listener{store, mgmt} {
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		}()
	}
	dial := func(addr string) error {
		return inNS(h.ns, func() error {
			c, err := net.DialTimeout("tcp", addr, 1500*time.Millisecond)
			if err == nil {
				c.Close()
			}
			return err
		})
	}
	if err := dial(store.Addr().String()); err != nil {
		t.Fatalf("healed: connect to the store bridge from the namespace: %v", err)
	}
	for _, m := range []cutMode{linkDown, dropAll, dropIn, dropOut} {
		if err := h.partition(m); err != nil {
			t.Fatal(err)
		}
		err := dial(store.Addr().String())
		var ne net.Error
		if err == nil || !errors.As(err, &ne) || !ne.Timeout() {
			t.Errorf("%s: connect = %v, want a timeout (no answer, no reset)", m, err)
		}
		if err := dial(mgmt.Addr().String()); err != nil {
			t.Errorf("%s: the management link is cut too: %v", m, err)
		}
		if err := h.heal(); err != nil {
			t.Fatal(err)
		}
		if !testutil.Poll(10*time.Second, func() bool { return dial(store.Addr().String()) == nil }) {
			t.Errorf("%s: healed, but no connection within 10s", m)
		}
	}
}

// dropMechanism says how dropAll cuts on this host, for the figures.
func (n *network) dropMechanism() string {
	if n.drop != nil {
		return "every packet dropped by a tc BPF filter (no sch_netem in this kernel)"
	}
	return "every packet dropped (netem loss 100 %)"
}
