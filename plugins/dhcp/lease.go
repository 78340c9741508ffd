package dhcp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/vishvananda/netlink"

	"github.com/patchbay-cni/patchbay/internal/link"
	"github.com/patchbay-cni/patchbay/spec"
)

// record is one lease as persisted in the state directory: enough to renew,
// rebind and release it after the daemon restarts.
type record struct {
	Version     int          `json:"version"`
	Network     string       `json:"network"`
	ContainerID string       `json:"containerID"`
	IfName      string       `json:"ifName"`
	Netns       string       `json:"netns"` // as the runtime gave it (no host prefix)
	ClientID    []byte       `json:"clientID"`
	Provide     []sentOption `json:"provide,omitempty"`
	Request     []byte       `json:"request,omitempty"`
	Priority    int          `json:"priority,omitempty"`
	// ACK is the last DHCPACK as received.
	ACK []byte `json:"ack"`
	// ServerMAC is the link-layer next hop toward the server (the server,
	// or a relay), learnt from its last reply: unicast renewals and the
	// release go there.
	ServerMAC string    `json:"serverMAC,omitempty"`
	Renew     time.Time `json:"renew"`  // T1
	Rebind    time.Time `json:"rebind"` // T2
	Expire    time.Time `json:"expire"`
	// Lost says why the lease is gone (expired, refused by the server) and
	// when; the interface was set down then. A lost lease is kept until
	// DEL or GC so CHECK can report it.
	Lost string `json:"lost,omitempty"`
}

const recordVersion = 1

func (r *record) key() string { return leaseKey(r.Network, r.ContainerID, r.IfName) }

func leaseKey(network, containerID, ifName string) string {
	return network + "/" + containerID + "/" + ifName
}

// defaultLeaseTime applies when an ACK carries no lease time (RFC 2131
// requires one; the reference assumes an hour).
const defaultLeaseTime = time.Hour

// errZeroLease is an ACK whose lease time is 0: the address would be lost
// the moment it is given. ADD refuses it; at a renewal it ends the lease.
var errZeroLease = errors.New("the server's DHCPACK grants a lease time of 0 s")

// leaseTimes are an ACK's T1, T2 and lease time: the lease time assumed
// an hour when missing (RFC 2131 requires it; the reference assumes that),
// a T1 or T2 that is missing, 0 or out of order taken at RFC 2131's
// defaults (a zero one would renew in a tight loop), and errZeroLease for
// a lease time of 0.
func leaseTimes(ack *dhcpv4.DHCPv4) (t1, t2, lt time.Duration, err error) {
	lt = ack.IPAddressLeaseTime(defaultLeaseTime)
	if lt <= 0 {
		return 0, 0, 0, errZeroLease
	}
	t2 = ack.IPAddressRebindingTime(lt * 7 / 8)
	t1 = ack.IPAddressRenewalTime(lt / 2)
	if t2 <= 0 || t2 > lt {
		t2 = lt * 7 / 8
	}
	if t1 <= 0 || t1 > t2 {
		t1 = t2 / 2
	}
	return t1, t2, lt, nil
}

// commit records a DHCPACK that leaseTimes accepts: the times count from
// when the request was sent (RFC 2131 4.4.1), which is sent.
func (r *record) commit(ack *dhcpv4.DHCPv4, mac net.HardwareAddr, sent time.Time) {
	t1, t2, lt, _ := leaseTimes(ack)
	r.ACK = ack.ToBytes()
	if mac != nil {
		r.ServerMAC = mac.String()
	}
	r.Renew, r.Rebind, r.Expire = sent.Add(t1), sent.Add(t2), sent.Add(lt)
	r.Lost = ""
}

// leaseResult builds the CNI result from an ACK, as the reference does:
// yiaddr with the subnet mask, the first router as gateway; routes from
// option 121 when present (RFC 3442: then 3 and 33 are ignored), otherwise
// option 33 plus a default route through the router. DNS comes from
// options 6, 15 and 119 (the reference returns none).
func leaseResult(ack *dhcpv4.DHCPv4, priority int) (*spec.Result, error) {
	ip, ok := netip.AddrFromSlice(ack.YourIPAddr)
	ip = ip.Unmap()
	if !ok || !ip.Is4() || ip.IsUnspecified() {
		return nil, fmt.Errorf("DHCPACK carries no address (yiaddr %v)", ack.YourIPAddr)
	}
	mask := ack.SubnetMask()
	if mask == nil {
		return nil, errors.New("DHCPACK has no subnet mask (option 1)")
	}
	ones, bits := mask.Size()
	if bits != 32 {
		return nil, fmt.Errorf("DHCPACK has an invalid subnet mask %v", net.IP(mask))
	}
	res := &spec.Result{}
	ipc := &spec.IPConfig{Address: netip.PrefixFrom(ip, ones)}
	var gw netip.Addr
	if rs := ack.Router(); len(rs) > 0 {
		if a, ok := netip.AddrFromSlice(rs[0]); ok {
			gw = a.Unmap()
			ipc.Gateway = gw
		}
	}
	res.IPs = []*spec.IPConfig{ipc}

	if cl := ack.ClasslessStaticRoute(); len(cl) > 0 {
		for _, r := range cl {
			dst, ok := prefixOf(*r.Dest)
			if !ok {
				continue
			}
			rt := &spec.Route{Dst: dst.Masked()}
			if a, ok := netip.AddrFromSlice(r.Router); ok && !a.Unmap().IsUnspecified() {
				rt.GW = a.Unmap()
			} else {
				rt.Scope = spec.IntPtr(int(netlink.SCOPE_LINK)) // on-link destination
			}
			res.Routes = append(res.Routes, rt)
		}
	} else {
		st := ack.Options.Get(dhcpv4.OptionStaticRoutingTable)
		for ; len(st) >= 8; st = st[8:] {
			dst, _ := netip.AddrFromSlice(st[0:4])
			via, _ := netip.AddrFromSlice(st[4:8])
			ones, _ := net.IP(st[0:4]).DefaultMask().Size()
			res.Routes = append(res.Routes, &spec.Route{Dst: netip.PrefixFrom(dst, ones).Masked(), GW: via})
		}
		if gw.IsValid() {
			res.Routes = append(res.Routes, &spec.Route{Dst: netip.PrefixFrom(netip.IPv4Unspecified(), 0), GW: gw})
		}
	}
	if priority != 0 {
		for _, r := range res.Routes {
			r.Priority = priority
		}
	}
	for _, ns := range ack.DNS() {
		res.DNS.Nameservers = append(res.DNS.Nameservers, ns.String())
	}
	res.DNS.Domain = ack.DomainName()
	if s := ack.DomainSearch(); s != nil {
		res.DNS.Search = append(res.DNS.Search, s.Labels...)
	}
	return res, nil
}

// freshRepeat is when the first DISCOVER on a link that has just come up is
// repeated (see acquire).
const freshRepeat = 300 * time.Millisecond

// timing is how the client paces retransmissions.
type timing struct {
	// first is the wait for a reply to the first transmission; each
	// retransmission doubles it, up to max (RFC 2131 4.1: 4 s, 8 s, ... 64 s,
	// randomized by ±1 s).
	first, max time.Duration
}

func (t timing) backoff(i int) time.Duration {
	w := t.first
	for ; i > 0 && w < t.max; i-- {
		w *= 2
	}
	w = min(w, t.max)
	j := min(time.Second, w/4)
	return w + time.Duration(rand.Int64N(int64(2*j+1))) - j
}

// untilHalf paces RENEWING and REBINDING (RFC 2131 4.4.5): wait half the
// time left before the deadline, but not less than first (nor past the
// deadline).
func (t timing) untilHalf(deadline time.Time) func(int) time.Duration {
	return func(int) time.Duration {
		left := time.Until(deadline)
		return max(left/2, min(t.first, left))
	}
}

// exchange sends msg and waits for a matching reply, retransmitting after
// each wait; it gives up when ctx ends. Errors wrap errTimeout when no
// reply came.
func (c *conn) exchange(ctx context.Context, msg *dhcpv4.DHCPv4, src, dst netip.Addr, dstMAC net.HardwareAddr,
	wait func(int) time.Duration, match func(*dhcpv4.DHCPv4) bool) (*dhcpv4.DHCPv4, net.HardwareAddr, error) {
	// A cancelled ctx (DEL arriving, daemon stopping) ends the read at once.
	stop := context.AfterFunc(ctx, func() { c.pc.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	for i := 0; ; i++ {
		if err := ctx.Err(); err != nil {
			return nil, nil, fmt.Errorf("%w after %d transmission(s): %w", errTimeout, i, context.Cause(ctx))
		}
		if err := c.send(msg, src, dst, dstMAC); err != nil {
			return nil, nil, fmt.Errorf("send %s: %w", msg.MessageType(), err)
		}
		deadline := time.Now().Add(wait(i))
		if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
			deadline = d
		}
		reply, mac, err := c.recv(deadline, func(m *dhcpv4.DHCPv4) bool {
			return m.TransactionID == msg.TransactionID && match(m)
		})
		if err == nil {
			return reply, mac, nil
		}
		if !errors.Is(err, errTimeout) {
			if ctx.Err() != nil {
				continue // reported above
			}
			return nil, nil, err
		}
	}
}

// message builds a client message carrying the attachment's client ID,
// provided options and parameter request list.
func (r *record) message(mac net.HardwareAddr, typ dhcpv4.MessageType, broadcast bool, mods ...dhcpv4.Modifier) (*dhcpv4.DHCPv4, error) {
	base := []dhcpv4.Modifier{
		dhcpv4.WithHwAddr(mac),
		dhcpv4.WithMessageType(typ),
		dhcpv4.WithOption(dhcpv4.OptClientIdentifier(r.ClientID)),
	}
	if typ != dhcpv4.MessageTypeRelease {
		base = append(base, dhcpv4.WithOption(dhcpv4.OptMaxMessageSize(1500)))
		if len(r.Request) > 0 {
			codes := make([]dhcpv4.OptionCode, len(r.Request))
			for i, c := range r.Request {
				codes[i] = dhcpv4.GenericOptionCode(c)
			}
			base = append(base, dhcpv4.WithOption(dhcpv4.OptParameterRequestList(codes...)))
		}
		for _, o := range r.Provide {
			base = append(base, dhcpv4.WithGeneric(dhcpv4.GenericOptionCode(o.Code), o.Value))
		}
		if broadcast {
			base = append(base, dhcpv4.WithBroadcast(true))
		}
	}
	return dhcpv4.New(append(base, mods...)...)
}

func isType(t ...dhcpv4.MessageType) func(*dhcpv4.DHCPv4) bool {
	return func(m *dhcpv4.DHCPv4) bool {
		mt := m.MessageType()
		for _, x := range t {
			if mt == x {
				return true
			}
		}
		return false
	}
}

// errNak is the server refusing a request.
type errNak struct{ msg string }

func (e *errNak) Error() string {
	if e.msg == "" {
		return "the server answered DHCPNAK"
	}
	return "the server answered DHCPNAK: " + e.msg
}

// attachment is an open view of a lease's interface for one operation.
type attachment struct {
	ns *link.NS
	l  netlink.Link
}

func (a *attachment) Close() { a.ns.Close() }

// errGone means the namespace or the interface no longer exists.
type errGone struct{ what string }

func (e *errGone) Error() string { return e.what }

// waitOperUp waits (at most limit) until the interface is operationally up.
// A link just set up transmits only once the kernel's linkwatch has
// activated its queue (it drops what is sent before: the reference's first
// DISCOVER is lost that way, costing it its 10 s timeout), and the operstate
// turns up at that same moment. Without carrier it never does: then the
// exchange's own retransmissions take over.
// It reports whether the link was not up yet when called (it has just come
// up, or never did).
func (a *attachment) waitOperUp(ctx context.Context, limit time.Duration) (fresh bool) {
	deadline := time.Now().Add(limit)
	for {
		if st := a.l.Attrs().OperState; st == netlink.OperUp || st == netlink.OperUnknown {
			return fresh
		}
		fresh = true
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fresh
		}
		time.Sleep(2 * time.Millisecond)
		if l, err := a.ns.LinkByIndex(a.l.Attrs().Index); err == nil {
			a.l = l
		}
	}
}

// openAttachment opens the lease's namespace and finds its interface.
func openAttachment(nsPath, ifName string) (*attachment, error) {
	ns, err := link.OpenIfExists(nsPath)
	if err != nil {
		return nil, err
	}
	if ns == nil {
		return nil, &errGone{fmt.Sprintf("network namespace %q does not exist", nsPath)}
	}
	l, err := ns.LinkByName(ifName)
	if err != nil {
		ns.Close()
		if link.IsNotFound(err) {
			return nil, &errGone{fmt.Sprintf("interface %q does not exist in %q", ifName, nsPath)}
		}
		return nil, fmt.Errorf("look up %q in %q: %w", ifName, nsPath, err)
	}
	return &attachment{ns: ns, l: l}, nil
}

// acquire runs DISCOVER/OFFER/REQUEST/ACK on the attachment's interface
// (setting it up first if it is down, as the reference does: the interface
// plugin configures it only after IPAM answers). A DHCPNAK restarts the
// exchange; ctx bounds it all.
func acquire(ctx context.Context, log *slog.Logger, att *attachment, r *record, t timing, broadcast bool) (*dhcpv4.DHCPv4, net.HardwareAddr, time.Time, error) {
	setUp := att.l.Attrs().Flags&net.FlagUp == 0
	if setUp {
		if err := att.ns.H.LinkSetUp(att.l); err != nil {
			return nil, nil, time.Time{}, fmt.Errorf("set %q up: %w", r.IfName, err)
		}
	}
	t0 := time.Now()
	fresh := att.waitOperUp(ctx, 3*time.Second) || setUp
	log.Debug("interface ready", "operstate", att.l.Attrs().OperState, "waited", time.Since(t0).Round(time.Microsecond))
	// On a link that has just come up, the far side may not forward yet
	// (a veth's peer on a bridge becomes a forwarding port when the kernel
	// has processed its own carrier change, which our side cannot see):
	// the first DISCOVER can vanish. Repeat it once after a short wait
	// rather than after the full first timeout; then the usual backoff.
	discoverWait := t.backoff
	if fresh {
		discoverWait = func(i int) time.Duration {
			if i == 0 {
				return min(t.first, freshRepeat)
			}
			return t.backoff(i - 1)
		}
	}
	c, err := openConn(att.ns, att.l)
	if err != nil {
		return nil, nil, time.Time{}, err
	}
	defer c.Close()
	zero, bcast := netip.IPv4Unspecified(), netip.AddrFrom4([4]byte{255, 255, 255, 255})
	for {
		discover, err := r.message(c.mac, dhcpv4.MessageTypeDiscover, broadcast)
		if err != nil {
			return nil, nil, time.Time{}, err
		}
		t0 := time.Now()
		offer, _, err := c.exchange(ctx, discover, zero, bcast, nil, discoverWait, isType(dhcpv4.MessageTypeOffer))
		if err != nil {
			return nil, nil, time.Time{}, fmt.Errorf("DHCPDISCOVER: %w", err)
		}
		log.Debug("offer", "address", offer.YourIPAddr, "server", offer.ServerIdentifier(), "rtt", time.Since(t0).Round(time.Microsecond))
		server := offer.ServerIdentifier()
		request, err := r.message(c.mac, dhcpv4.MessageTypeRequest, broadcast,
			dhcpv4.WithTransactionID(offer.TransactionID),
			dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(offer.YourIPAddr)),
			dhcpv4.WithOption(dhcpv4.OptServerIdentifier(server)))
		if err != nil {
			return nil, nil, time.Time{}, err
		}
		sent := time.Now()
		ack, mac, err := c.exchange(ctx, request, zero, bcast, nil, t.backoff, func(m *dhcpv4.DHCPv4) bool {
			return isType(dhcpv4.MessageTypeAck, dhcpv4.MessageTypeNak)(m) && m.ServerIdentifier().Equal(server)
		})
		if err != nil {
			return nil, nil, time.Time{}, fmt.Errorf("DHCPREQUEST for %v: %w", offer.YourIPAddr, err)
		}
		log.Debug("reply to REQUEST", "type", ack.MessageType(), "rtt", time.Since(sent).Round(time.Microsecond))
		if ack.MessageType() == dhcpv4.MessageTypeNak {
			// The offer was taken meanwhile: start over after a short pause.
			select {
			case <-ctx.Done():
				return nil, nil, time.Time{}, fmt.Errorf("%w: %w", &errNak{ack.Message()}, context.Cause(ctx))
			case <-time.After(t.backoff(0) / 4):
			}
			continue
		}
		if _, err := leaseResult(ack, 0); err != nil {
			return nil, nil, time.Time{}, err
		}
		if _, _, _, err := leaseTimes(ack); err != nil {
			return nil, nil, time.Time{}, fmt.Errorf("DHCPREQUEST for %v: %w", offer.YourIPAddr, err)
		}
		return ack, mac, sent, nil
	}
}

// extend sends a DHCPREQUEST for the bound address: unicast to the server
// while RENEWING (T1..T2), broadcast while REBINDING (T2..expiry). It
// returns the ACK, or errNak, or a timeout when deadline passes unanswered.
func extend(ctx context.Context, att *attachment, r *record, ack *dhcpv4.DHCPv4, rebinding bool, deadline time.Time, t timing, broadcast bool) (*dhcpv4.DHCPv4, net.HardwareAddr, time.Time, error) {
	c, err := openConn(att.ns, att.l)
	if err != nil {
		return nil, nil, time.Time{}, err
	}
	defer c.Close()
	ip, _ := netip.AddrFromSlice(ack.YourIPAddr)
	ip = ip.Unmap()
	// RFC 2131 4.3.2: ciaddr set, no server identifier, no requested address.
	req, err := r.message(c.mac, dhcpv4.MessageTypeRequest, broadcast && rebinding, dhcpv4.WithClientIP(ack.YourIPAddr))
	if err != nil {
		return nil, nil, time.Time{}, err
	}
	dst, dstMAC := netip.AddrFrom4([4]byte{255, 255, 255, 255}), net.HardwareAddr(nil)
	if !rebinding {
		if s, ok := netip.AddrFromSlice(ack.ServerIdentifier()); ok {
			dst = s.Unmap()
			dstMAC, _ = net.ParseMAC(r.ServerMAC)
		}
	}
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	sent := time.Now()
	reply, mac, err := c.exchange(ctx, req, ip, dst, dstMAC, t.untilHalf(deadline), isType(dhcpv4.MessageTypeAck, dhcpv4.MessageTypeNak))
	if err != nil {
		return nil, nil, time.Time{}, err
	}
	if reply.MessageType() == dhcpv4.MessageTypeNak {
		return nil, nil, time.Time{}, &errNak{reply.Message()}
	}
	if !reply.YourIPAddr.Equal(ack.YourIPAddr) {
		return nil, nil, time.Time{}, &errNak{fmt.Sprintf("the server acknowledged %v instead of %v", reply.YourIPAddr, ack.YourIPAddr)}
	}
	if _, _, _, err := leaseTimes(reply); err != nil {
		return nil, nil, time.Time{}, &errNak{err.Error()}
	}
	return reply, mac, sent, nil
}

// release sends DHCPRELEASE for the lease, unicast from the leased address
// to the server (RFC 2131 4.4.6): ciaddr set, the server identifier, our
// client identifier (the one the lease was taken with, so the server
// finds it), no requested-address option (dnsmasq drops a RELEASE with one).
func release(att *attachment, r *record, ack *dhcpv4.DHCPv4) error {
	c, err := openConn(att.ns, att.l)
	if err != nil {
		return err
	}
	defer c.Close()
	msg, err := r.message(c.mac, dhcpv4.MessageTypeRelease, false,
		dhcpv4.WithClientIP(ack.YourIPAddr),
		dhcpv4.WithOption(dhcpv4.OptServerIdentifier(ack.ServerIdentifier())))
	if err != nil {
		return err
	}
	ip, _ := netip.AddrFromSlice(ack.YourIPAddr)
	server, ok := netip.AddrFromSlice(ack.ServerIdentifier())
	if !ok {
		return errors.New("the lease has no server identifier to release it to")
	}
	mac, _ := net.ParseMAC(r.ServerMAC)
	return c.send(msg, ip.Unmap(), server.Unmap(), mac)
}
