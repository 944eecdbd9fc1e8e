package daemon

import (
	"errors"
	"fmt"
	"net"
)

// advertiseAddr is the host:port this agent's member record publishes, so
// that other members reach its API (a Connect status view asks them for
// their jobs): agent.advertise when set; else the address it listens on,
// ln, with an unspecified host (0.0.0.0, ::) replaced by the first
// address of this host that another host could reach (up, not loopback,
// global unicast; IPv4 first), as Nomad's advertise address defaults. An
// error when listen binds every address and the host has no such address
// (the caller then publishes ln's address and warns).
func advertiseAddr(advertise string, ln net.Addr, addrs func() ([]net.Addr, error)) (string, error) {
	if advertise != "" {
		return advertise, nil
	}
	host, port, err := net.SplitHostPort(ln.String())
	if err != nil {
		return ln.String(), err
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsUnspecified() {
		return ln.String(), nil
	}
	as, err := addrs()
	if err != nil {
		return ln.String(), fmt.Errorf("list this host's addresses: %w", err)
	}
	var v6 net.IP
	for _, a := range as {
		n, ok := a.(*net.IPNet)
		if !ok || !n.IP.IsGlobalUnicast() {
			continue
		}
		if n.IP.To4() != nil {
			return net.JoinHostPort(n.IP.String(), port), nil
		}
		if v6 == nil {
			v6 = n.IP
		}
	}
	if v6 != nil {
		return net.JoinHostPort(v6.String(), port), nil
	}
	return ln.String(), errors.New("listen binds every address and this host has no address another host could reach: set agent.advertise")
}

// upAddrs lists the addresses of this host's interfaces that are up and
// not loopback.
func upAddrs() ([]net.Addr, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, err
	}
	var out []net.Addr
	for _, i := range ifs {
		if i.Flags&net.FlagUp == 0 || i.Flags&net.FlagLoopback != 0 {
			continue
		}
		as, err := i.Addrs()
		if err != nil {
			continue
		}
		out = append(out, as...)
	}
	return out, nil
}
