package daemon

import (
	"net"
	"testing"
)

// The member record's address: agent.advertise when set; listen as it is
// when its host is an address or name; with 0.0.0.0 or :: replaced by an
// address another host can reach (IPv4 first), and an error naming
// agent.advertise when there is none.
func TestAdvertiseAddr(t *testing.T) {
	cidr := func(s string) net.Addr {
		ip, n, err := net.ParseCIDR(s)
		if err != nil {
			t.Fatal(err)
		}
		n.IP = ip
		return n
	}
	some := func() ([]net.Addr, error) {
		return []net.Addr{cidr("fe80::1/64"), cidr("2001:db8::7/64"), cidr("10.0.0.7/24")}, nil
	}
	onlyV6 := func() ([]net.Addr, error) { return []net.Addr{cidr("fe80::1/64"), cidr("2001:db8::7/64")}, nil }
	none := func() ([]net.Addr, error) { return []net.Addr{cidr("fe80::1/64")}, nil }
	tcp := func(s string) net.Addr {
		a, err := net.ResolveTCPAddr("tcp", s)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	for _, c := range []struct {
		advertise, listen string
		addrs             func() ([]net.Addr, error)
		want              string
		err               bool
	}{
		{"berth-a.example.net:9750", "0.0.0.0:9750", none, "berth-a.example.net:9750", false},
		{"", "127.0.0.1:9750", none, "127.0.0.1:9750", false},
		{"", "10.1.2.3:9750", none, "10.1.2.3:9750", false},
		{"", "0.0.0.0:9750", some, "10.0.0.7:9750", false},
		{"", "[::]:9750", some, "10.0.0.7:9750", false},
		{"", "[::]:9750", onlyV6, "[2001:db8::7]:9750", false},
		{"", "0.0.0.0:9750", none, "0.0.0.0:9750", true},
	} {
		got, err := advertiseAddr(c.advertise, tcp(c.listen), c.addrs)
		if got != c.want || (err != nil) != c.err {
			t.Errorf("advertise %q, listen %s: %q, %v; want %q (error %v)", c.advertise, c.listen, got, err, c.want, c.err)
		}
	}
}
