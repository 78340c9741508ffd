package dhcp

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/insomniacslk/dhcp/dhcpv4"

	"github.com/patchbay-cni/patchbay/spec"
)

func testACK(addr netip.Addr, mods ...dhcpv4.Modifier) (*dhcpv4.DHCPv4, error) {
	base := []dhcpv4.Modifier{
		dhcpv4.WithMessageType(dhcpv4.MessageTypeAck),
		dhcpv4.WithYourIP(addr.AsSlice()),
		dhcpv4.WithNetmask(net.CIDRMask(24, 32)),
		dhcpv4.WithOption(dhcpv4.OptServerIdentifier(net.IPv4(10, 99, 0, 1))),
		dhcpv4.WithLeaseTime(120),
	}
	m, err := dhcpv4.New(append(base, mods...)...)
	if err != nil {
		return nil, err
	}
	m.OpCode = dhcpv4.OpcodeBootReply
	return m, nil
}

func newTestACK(addr netip.Addr) ([]byte, error) {
	m, err := testACK(addr, dhcpv4.WithRouter(net.IPv4(10, 99, 0, 1)))
	if err != nil {
		return nil, err
	}
	return m.ToBytes(), nil
}

// TestLeaseResult covers the result shapes: router and default route;
// option 121 replacing 3 and 33 (RFC 3442) with on-link routes scoped link;
// option 33's classful destinations; priority on every route; no mask.
func TestLeaseResult(t *testing.T) {
	a := netip.MustParseAddr("10.99.0.7")
	gw := net.IPv4(10, 99, 0, 1)
	link := 253
	cases := []struct {
		name     string
		mods     []dhcpv4.Modifier
		priority int
		want     *spec.Result
	}{
		{"router", []dhcpv4.Modifier{dhcpv4.WithRouter(gw)}, 0, &spec.Result{
			IPs:    []*spec.IPConfig{{Address: netip.MustParsePrefix("10.99.0.7/24"), Gateway: netip.MustParseAddr("10.99.0.1")}},
			Routes: []*spec.Route{{Dst: netip.MustParsePrefix("0.0.0.0/0"), GW: netip.MustParseAddr("10.99.0.1")}}}},
		{"classless wins", []dhcpv4.Modifier{dhcpv4.WithRouter(gw),
			dhcpv4.WithGeneric(dhcpv4.OptionStaticRoutingTable, []byte{192, 168, 1, 0, 10, 99, 0, 2}),
			dhcpv4.WithOption(dhcpv4.OptClasslessStaticRoute(
				&dhcpv4.Route{Dest: &net.IPNet{IP: net.IPv4(172, 16, 0, 0).To4(), Mask: net.CIDRMask(12, 32)}, Router: net.IPv4(10, 99, 0, 3)},
				&dhcpv4.Route{Dest: &net.IPNet{IP: net.IPv4(10, 100, 0, 0).To4(), Mask: net.CIDRMask(16, 32)}, Router: net.IPv4zero},
			))}, 50, &spec.Result{
			IPs: []*spec.IPConfig{{Address: netip.MustParsePrefix("10.99.0.7/24"), Gateway: netip.MustParseAddr("10.99.0.1")}},
			Routes: []*spec.Route{
				{Dst: netip.MustParsePrefix("172.16.0.0/12"), GW: netip.MustParseAddr("10.99.0.3"), Priority: 50},
				{Dst: netip.MustParsePrefix("10.100.0.0/16"), Scope: &link, Priority: 50},
			}}},
		{"static routes", []dhcpv4.Modifier{dhcpv4.WithRouter(gw),
			dhcpv4.WithGeneric(dhcpv4.OptionStaticRoutingTable, []byte{192, 168, 1, 0, 10, 99, 0, 2, 172, 20, 0, 0, 10, 99, 0, 3})}, 0, &spec.Result{
			IPs: []*spec.IPConfig{{Address: netip.MustParsePrefix("10.99.0.7/24"), Gateway: netip.MustParseAddr("10.99.0.1")}},
			Routes: []*spec.Route{
				{Dst: netip.MustParsePrefix("192.168.1.0/24"), GW: netip.MustParseAddr("10.99.0.2")},
				{Dst: netip.MustParsePrefix("172.20.0.0/16"), GW: netip.MustParseAddr("10.99.0.3")},
				{Dst: netip.MustParsePrefix("0.0.0.0/0"), GW: netip.MustParseAddr("10.99.0.1")},
			}}},
		{"no router", nil, 0, &spec.Result{IPs: []*spec.IPConfig{{Address: netip.MustParsePrefix("10.99.0.7/24")}}}},
	}
	for _, c := range cases {
		ack, err := testACK(a, c.mods...)
		if err != nil {
			t.Fatal(err)
		}
		got, err := leaseResult(ack, c.priority)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if d := cmp.Diff(c.want, got, cmp.Comparer(func(x, y netip.Addr) bool { return x == y }),
			cmp.Comparer(func(x, y netip.Prefix) bool { return x == y })); d != "" {
			t.Errorf("%s: result (-want +got):\n%s", c.name, d)
		}
	}
	ack, _ := testACK(a, dhcpv4.WithoutOption(dhcpv4.OptionSubnetMask))
	if _, err := leaseResult(ack, 0); err == nil {
		t.Errorf("an ACK without a subnet mask gave a result")
	}
}

// TestCommitTimes: T1/T2 from the ACK, the RFC defaults without them, and
// out-of-order values clamped.
func TestCommitTimes(t *testing.T) {
	a := netip.MustParseAddr("10.99.0.7")
	sent := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name           string
		mods           []dhcpv4.Modifier
		t1, t2, expire time.Duration
	}{
		{"defaults", nil, 60 * time.Second, 105 * time.Second, 120 * time.Second},
		{"server timers", []dhcpv4.Modifier{dhcpv4.WithOption(dhcpv4.OptRenewTimeValue(5 * time.Second)),
			dhcpv4.WithOption(dhcpv4.OptRebindingTimeValue(9 * time.Second))}, 5 * time.Second, 9 * time.Second, 120 * time.Second},
		{"T2 past expiry", []dhcpv4.Modifier{dhcpv4.WithOption(dhcpv4.OptRebindingTimeValue(300 * time.Second))},
			60 * time.Second, 105 * time.Second, 120 * time.Second},
		{"zero timers", []dhcpv4.Modifier{dhcpv4.WithOption(dhcpv4.OptRenewTimeValue(0)),
			dhcpv4.WithOption(dhcpv4.OptRebindingTimeValue(0))}, 52500 * time.Millisecond, 105 * time.Second, 120 * time.Second},
		{"T1 past T2", []dhcpv4.Modifier{dhcpv4.WithOption(dhcpv4.OptRenewTimeValue(100 * time.Second)),
			dhcpv4.WithOption(dhcpv4.OptRebindingTimeValue(80 * time.Second))}, 40 * time.Second, 80 * time.Second, 120 * time.Second},
	} {
		ack, err := testACK(a, c.mods...)
		if err != nil {
			t.Fatal(err)
		}
		var r record
		r.commit(ack, nil, sent)
		if r.Renew.Sub(sent) != c.t1 || r.Rebind.Sub(sent) != c.t2 || r.Expire.Sub(sent) != c.expire {
			t.Errorf("%s: T1 %v T2 %v expire %v, want %v %v %v", c.name, r.Renew.Sub(sent), r.Rebind.Sub(sent), r.Expire.Sub(sent), c.t1, c.t2, c.expire)
		}
	}
}

// TestUDP4Framing: the frames we build are valid IPv4/UDP (checksums
// verify) and udpPayload takes them apart again.
func TestUDP4Framing(t *testing.T) {
	payload := []byte("a DHCP message, odd length")
	pkt := udp4(payload, netip.MustParseAddr("10.99.0.7"), netip.MustParseAddr("10.99.0.1"))
	if checksum(pkt[:20], 0) != 0 {
		t.Errorf("IP header checksum does not verify")
	}
	// Verify the UDP checksum over the pseudo-header.
	pseudo := uint32(0)
	for i := 12; i < 20; i += 2 {
		pseudo += uint32(pkt[i])<<8 | uint32(pkt[i+1])
	}
	pseudo += 17 + uint32(len(pkt)-20)
	if checksum(pkt[20:], pseudo) != 0 {
		t.Errorf("UDP checksum does not verify")
	}
	// Swap ports so the packet is "to port 68", then parse it back.
	pkt[20], pkt[21], pkt[22], pkt[23] = pkt[22], pkt[23], pkt[20], pkt[21]
	got, ok := udpPayload(append(pkt, 0, 0, 0)) // trailing frame padding
	if !ok || string(got) != string(payload) {
		t.Errorf("udpPayload = %q, %v", got, ok)
	}
	for _, bad := range [][]byte{nil, pkt[:19], pkt[:27]} {
		if _, ok := udpPayload(bad); ok {
			t.Errorf("udpPayload accepted a truncated packet of %d bytes", len(bad))
		}
	}
}
