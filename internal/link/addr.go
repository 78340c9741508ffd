package link

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/patchbay-cni/patchbay/spec"
)

// IPNet converts a prefix (host bits kept) to a *net.IPNet.
func IPNet(p netip.Prefix) *net.IPNet {
	a := p.Addr().Unmap()
	return &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(p.Bits(), a.BitLen())}
}

// Prefix converts a *net.IPNet (host bits kept) to a prefix.
func Prefix(n *net.IPNet) netip.Prefix {
	if n == nil {
		return netip.Prefix{}
	}
	a, _ := netip.AddrFromSlice(n.IP)
	ones, _ := n.Mask.Size()
	return netip.PrefixFrom(a.Unmap(), ones)
}

// Family returns netlink.FAMILY_V4 or FAMILY_V6 for an address.
func Family(a netip.Addr) int {
	if a.Unmap().Is4() {
		return netlink.FAMILY_V4
	}
	return netlink.FAMILY_V6
}

// IfaceOpts tunes ConfigureIface.
type IfaceOpts struct {
	// DAD keeps IPv6 duplicate address detection and waits for it to end;
	// otherwise addresses are added with IFA_F_NODAD and usable at once.
	DAD bool
	// DADSysctls also sets the interface's accept_dad to follow DAD (and
	// enhanced_dad on with DAD), so the addresses the kernel adds itself
	// (link-local) follow the same rule, as the reference bridge does.
	DADSysctls bool
	// ARPNotify sets arp_notify: the kernel announces the interface's
	// IPv4 addresses when it comes up or its MAC changes.
	ARPNotify bool
	// NDiscNotify sets ndisc_notify: the IPv6 counterpart of ARPNotify
	// (unsolicited neighbour advertisements), as the reference macvlan
	// and ipvlan set it.
	NDiscNotify bool
	// NoPrefixRoute adds addresses without the kernel's subnet route
	// (ptp routes the subnet through the gateway instead).
	NoPrefixRoute bool
	// SkipRoutes leaves result routes to the caller (see AddResultRoutes).
	SkipRoutes bool
}

// ConfigureIface applies res to link l (result interface index idx): the
// interface's sysctls, the addresses for that index, link up, then the
// routes, whose gateway defaults to the first gateway of the route's
// family (as the reference ConfigureIface does). IPv6 is enabled on the
// link when the kernel refuses an address because it is off there.
func (n *NS) ConfigureIface(l netlink.Link, res *spec.Result, idx int, o IfaceOpts) error {
	name := l.Attrs().Name
	var haveV6 bool
	for _, ipc := range res.IPs {
		if ipc.Interface != nil && *ipc.Interface == idx && !ipc.Address.Addr().Is4() {
			haveV6 = true
		}
	}
	// All in one visit to the namespace. Failures are ignored, as the
	// reference does: IPv6 may be off entirely, and kernels before 4.6
	// lack keep_addr_on_down.
	var sysctls [][2]string
	if o.DADSysctls {
		v := "0"
		if o.DAD {
			v = "1"
			sysctls = append(sysctls, [2]string{"net/ipv6/conf/" + name + "/enhanced_dad", "1"})
		}
		sysctls = append(sysctls, [2]string{"net/ipv6/conf/" + name + "/accept_dad", v})
	}
	if o.ARPNotify {
		sysctls = append(sysctls, [2]string{"net/ipv4/conf/" + name + "/arp_notify", "1"})
	}
	if o.NDiscNotify {
		sysctls = append(sysctls, [2]string{"net/ipv6/conf/" + name + "/ndisc_notify", "1"})
	}
	if haveV6 {
		// Keep the IPv6 addresses if the link goes down and up again (the
		// kernel drops them otherwise and nothing would add them back), as
		// the reference does.
		sysctls = append(sysctls, [2]string{"net/ipv6/conf/" + name + "/keep_addr_on_down", "1"})
	}
	if len(sysctls) > 0 {
		n.Do(func() error {
			for _, kv := range sysctls {
				WriteSysctl(kv[0], kv[1])
			}
			return nil
		})
	}
	for _, ipc := range res.IPs {
		if ipc.Interface == nil || *ipc.Interface != idx {
			continue
		}
		v6 := !ipc.Address.Addr().Is4()
		addr := &netlink.Addr{IPNet: IPNet(ipc.Address)}
		if o.NoPrefixRoute {
			addr.Flags |= unix.IFA_F_NOPREFIXROUTE
		}
		if v6 && !o.DAD {
			addr.Flags |= unix.IFA_F_NODAD
		}
		err := n.H.AddrAdd(l, addr)
		if errors.Is(err, unix.EACCES) && v6 {
			// IPv6 is disabled on the link: enable it and try again.
			if serr := n.Do(func() error { return enableIPv6(name) }); serr != nil {
				return fmt.Errorf("enable IPv6 on %q: %w", name, serr)
			}
			err = n.H.AddrAdd(l, addr)
		}
		if err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("add address %s to %q: %w", ipc.Address, name, err)
		}
	}
	if l.Attrs().Flags&net.FlagUp == 0 {
		if err := n.H.LinkSetUp(l); err != nil {
			return fmt.Errorf("set %q up: %w", name, err)
		}
	}
	if haveV6 && o.DAD {
		if err := n.SettleAddresses(l, 5*time.Second); err != nil {
			return err
		}
	}
	if o.SkipRoutes {
		return nil
	}
	return n.AddResultRoutes(l, res, idx)
}

func enableIPv6(ifname string) error {
	for _, i := range []string{"lo", ifname} {
		if err := WriteSysctl("net/ipv6/conf/"+i+"/disable_ipv6", "0"); err != nil {
			return err
		}
	}
	return nil
}

// SettleAddresses waits until no IPv6 address of l is tentative (DAD done).
func (n *NS) SettleAddresses(l netlink.Link, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		addrs, err := n.AddrList(l, netlink.FAMILY_V6)
		if err != nil {
			return fmt.Errorf("list addresses of %q: %w", l.Attrs().Name, err)
		}
		pending := false
		for _, a := range addrs {
			if a.Flags&unix.IFA_F_DADFAILED != 0 {
				return fmt.Errorf("duplicate address detection failed for %s on %q", a.IPNet, l.Attrs().Name)
			}
			if a.Flags&unix.IFA_F_TENTATIVE != 0 && a.Scope == unix.RT_SCOPE_UNIVERSE {
				pending = true
			}
		}
		if !pending {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("IPv6 addresses of %q still tentative after %v", l.Attrs().Name, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// EnsureAddr puts prefix p on l. An identical address is kept. Another IPv4
// address, or an overlapping IPv6 one, is replaced when force is set and is
// an error otherwise (the reference bridge's rule).
func (n *NS) EnsureAddr(l netlink.Link, p netip.Prefix, force bool) error {
	addrs, err := n.AddrList(l, Family(p.Addr()))
	if err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("list addresses of %q: %w", l.Attrs().Name, err)
	}
	for _, a := range addrs {
		have := Prefix(a.IPNet)
		if have == p {
			return nil
		}
		if a.Scope != unix.RT_SCOPE_UNIVERSE {
			continue // link-local addresses never conflict
		}
		if p.Addr().Is4() || have.Overlaps(p) {
			if !force {
				return fmt.Errorf("%q already has an IP address different from %v", l.Attrs().Name, p)
			}
			if err := n.H.AddrDel(l, &a); err != nil {
				return fmt.Errorf("remove address %s from %q: %w", have, l.Attrs().Name, err)
			}
		}
	}
	addr := &netlink.Addr{IPNet: IPNet(p)}
	if p.Addr().Is6() {
		addr.Flags = unix.IFA_F_NODAD
	}
	if err := n.H.AddrAdd(l, addr); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("add address %s to %q: %w", p, l.Attrs().Name, err)
	}
	return nil
}

// EnableForwarding turns on IP forwarding in n for the family of a,
// writing only when it is off.
func (n *NS) EnableForwarding(a netip.Addr) error {
	key := "net/ipv4/ip_forward"
	if !a.Is4() {
		key = "net/ipv6/conf/all/forwarding"
	}
	err := n.Do(func() error {
		if v, err := ReadSysctl(key); err == nil && v == "1" {
			return nil
		}
		return WriteSysctl(key, "1")
	})
	if err != nil {
		return fmt.Errorf("enable forwarding: %w", err)
	}
	return nil
}

// ValidateMTU refuses an "mtu" key value no link can have (code 7); 0
// means the kernel's default.
func ValidateMTU(mtu int) error {
	if mtu < 0 || mtu > 65535 || (mtu > 0 && mtu < 68) {
		return spec.Errorf(spec.ErrInvalidNetworkConfig, "\"mtu\" value %d is invalid: must be 0 (kernel default) or between 68 and 65535", mtu)
	}
	return nil
}

// GatewayFor returns the first host address of p's network (10.1.0.0/16 ->
// 10.1.0.1), the gateway the reference assumes when IPAM gives none.
func GatewayFor(p netip.Prefix) netip.Addr {
	return p.Masked().Addr().Next()
}
