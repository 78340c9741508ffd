package dhcp

import (
	"net"
	"net/netip"
	"testing"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/dhcpv4/server4"

	"github.com/patchbay-cni/patchbay/internal/netns"
	"github.com/patchbay-cni/patchbay/spec"
)

// TestLeaseTimes: a lease time of 0 is refused (errZeroLease); a missing
// one is an hour.
func TestLeaseTimes(t *testing.T) {
	a := netip.MustParseAddr("10.99.0.7")
	zero, err := testACK(a, dhcpv4.WithLeaseTime(0))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := leaseTimes(zero); err != errZeroLease {
		t.Errorf("lease time 0: %v, want errZeroLease", err)
	}
	none, err := testACK(a)
	if err != nil {
		t.Fatal(err)
	}
	none.Options.Del(dhcpv4.OptionIPAddressLeaseTime)
	if t1, t2, lt, err := leaseTimes(none); err != nil || lt != defaultLeaseTime || t1 != lt/2 || t2 != lt*7/8 {
		t.Errorf("no lease time: %v %v %v %v", t1, t2, lt, err)
	}
}

// TestZeroLeaseTimeRefused: a server whose DHCPACK grants a lease time of
// 0 would leave the container an address it has already lost: ADD fails
// naming that, and no lease is kept. The server is the test's own (dnsmasq
// never sends 0): insomniacslk's server4 on the lab's bridge.
func TestZeroLeaseTimeRefused(t *testing.T) {
	t.Parallel()
	l := newLab(t, serverOpts{none: true})
	var srv *server4.Server
	handler := func(conn net.PacketConn, peer net.Addr, m *dhcpv4.DHCPv4) {
		typ := dhcpv4.MessageTypeOffer
		if m.MessageType() == dhcpv4.MessageTypeRequest {
			typ = dhcpv4.MessageTypeAck
		} else if m.MessageType() != dhcpv4.MessageTypeDiscover {
			return
		}
		reply, err := dhcpv4.NewReplyFromRequest(m, dhcpv4.WithMessageType(typ), dhcpv4.WithYourIP(net.IPv4(10, 99, 0, 77)),
			dhcpv4.WithNetmask(net.CIDRMask(24, 32)), dhcpv4.WithRouter(net.ParseIP(labServer)),
			dhcpv4.WithServerIP(net.ParseIP(labServer)), dhcpv4.WithOption(dhcpv4.OptServerIdentifier(net.ParseIP(labServer))),
			dhcpv4.WithLeaseTime(0))
		if err != nil {
			t.Error(err)
			return
		}
		if _, err := conn.WriteTo(reply.ToBytes(), &net.UDPAddr{IP: net.IPv4bcast, Port: dhcpv4.ClientPort}); err != nil {
			t.Errorf("reply: %v", err)
		}
	}
	if err := netns.Do(l.hostPath, func() (err error) {
		srv, err = server4.NewServer(l.bridge, &net.UDPAddr{Port: dhcpv4.ServerPort}, handler)
		return err
	}); err != nil {
		t.Fatalf("DHCP server on %s: %v", l.bridge, err)
	}
	go srv.Serve()
	defer srv.Close()
	l.startDaemon()
	c := l.container("eth0")
	l.want(pluginCall{cmd: "ADD", id: "zero1", netns: c.path, ifName: c.ifName}, l.ipamConf(spec.Current, nil),
		spec.ErrInternal, "lease time of 0")
	if recs := stateRecords(t, l.state); len(recs) != 0 {
		t.Errorf("a refused lease was kept: %+v", recs)
	}
}
