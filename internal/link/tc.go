package link

import (
	"fmt"
	"math"
	"net"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	vnetns "github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// The dumps the meta plugins (bandwidth, sbr) read, with the same retry as
// the lookups in ns.go.

// QdiscList lists the qdiscs of l.
func (n *NS) QdiscList(l netlink.Link) ([]netlink.Qdisc, error) {
	return retry(func() ([]netlink.Qdisc, error) { return n.H.QdiscList(l) })
}

// FilterList lists the tc filters of l under parent.
func (n *NS) FilterList(l netlink.Link, parent uint32) ([]netlink.Filter, error) {
	return retry(func() ([]netlink.Filter, error) { return n.H.FilterList(l, parent) })
}

// RuleList lists the policy routing rules of a family (netlink.FAMILY_*).
func (n *NS) RuleList(family int) ([]netlink.Rule, error) {
	return retry(func() ([]netlink.Rule, error) { return n.H.RuleList(family) })
}

// Tbf is a root token bucket filter qdisc (handle 1:) in the kernel's units.
type Tbf struct {
	LinkIndex int
	Rate      uint64 // bytes per second
	Limit     uint32 // bytes queued behind the bucket
	// Buffer is the bucket's size as the time to send it at Rate, in
	// scheduler ticks (TCA_TBF_PARMS). Used when Burst is 0.
	Buffer uint32
	// Burst, when not 0, is the bucket's size in bytes, sent as
	// TCA_TBF_BURST: the kernel then computes the buffer itself (64 bits
	// of nanoseconds), as tc(8) does. For buckets whose time does not fit
	// Buffer's 32 bits of ticks (longer than 274.9 s at Rate).
	Burst uint32
}

// AddTbf creates the root tbf (handle 1:) of a link; it fails with EEXIST
// when the link has a root qdisc other than the kernel's default.
func (n *NS) AddTbf(t Tbf) error {
	return n.setTbf(t, unix.NLM_F_CREATE|unix.NLM_F_EXCL)
}

// ReplaceTbf creates or replaces the root tbf (handle 1:) of a link.
func (n *NS) ReplaceTbf(t Tbf) error {
	return n.setTbf(t, unix.NLM_F_CREATE|unix.NLM_F_REPLACE)
}

// setTbf sends the tbf with flags. vishvananda/netlink v1.3.1 cannot send
// TCA_TBF_BURST, so a Tbf with Burst goes out as a request of its own, on
// a netlink socket opened in n for it (one more socket, only for buckets
// that need it); every other Tbf takes n's handle.
func (n *NS) setTbf(t Tbf, flags int) error {
	attrs := netlink.QdiscAttrs{LinkIndex: t.LinkIndex, Handle: netlink.MakeHandle(1, 0), Parent: netlink.HANDLE_ROOT}
	if t.Burst == 0 {
		q := &netlink.Tbf{QdiscAttrs: attrs, Rate: t.Rate, Limit: t.Limit, Buffer: t.Buffer}
		if flags&unix.NLM_F_REPLACE != 0 {
			return n.H.QdiscReplace(q)
		}
		return n.H.QdiscAdd(q)
	}
	req := nl.NewNetlinkRequest(unix.RTM_NEWQDISC, flags|unix.NLM_F_ACK)
	req.AddData(&nl.TcMsg{Family: nl.FAMILY_ALL, Ifindex: int32(t.LinkIndex), Handle: attrs.Handle, Parent: attrs.Parent})
	req.AddData(nl.NewRtAttr(nl.TCA_KIND, nl.ZeroTerminated("tbf")))
	opts := nl.NewRtAttr(nl.TCA_OPTIONS, nil)
	parms := nl.TcTbfQopt{Limit: t.Limit, Buffer: t.Buffer}
	parms.Rate.Rate = uint32(min(t.Rate, math.MaxUint32))
	opts.AddRtAttr(nl.TCA_TBF_PARMS, parms.Serialize())
	if t.Rate > math.MaxUint32 {
		opts.AddRtAttr(nl.TCA_TBF_RATE64, nl.Uint64Attr(t.Rate))
	}
	opts.AddRtAttr(nl.TCA_TBF_BURST, nl.Uint32Attr(t.Burst))
	req.AddData(opts)
	s, err := nl.GetNetlinkSocketAt(n.fd, vnetns.None(), unix.NETLINK_ROUTE)
	if err != nil {
		return fmt.Errorf("open a netlink socket in %s: %w", n, err)
	}
	defer s.Close()
	req.Sockets = map[int]*nl.SocketHandle{unix.NETLINK_ROUTE: {Socket: s}}
	_, err = req.Execute(unix.NETLINK_ROUTE, 0)
	return err
}

// RandomMAC is a random, locally administered unicast MAC address.
func RandomMAC() net.HardwareAddr { return randomMAC() }

// KernelTbfTicks is the buffer the kernel reports (TCA_TBF_PARMS) for a
// tbf created with a burst of bytes at rate bytes/s through TCA_TBF_BURST:
// the time to send burst, as psched_ratecfg_precompute and psched_l2t_ns
// compute it, in 64 ns ticks, cut to the report's 32 bits.
func KernelTbfTicks(rate uint64, burst uint32) uint32 {
	if rate == 0 {
		return 0
	}
	var mult uint32
	var shift uint
	for factor := uint64(1e9); ; factor <<= 1 {
		mult = uint32(factor / rate) // the kernel's mult is 32 bits
		if mult&(1<<31) != 0 || factor&(1<<63) != 0 {
			break
		}
		shift++
	}
	ns := (uint64(burst) * uint64(mult)) >> shift
	return uint32(ns >> 6)
}
