package link

import (
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// DelLink deletes the named link if it exists; found is false when it
// did not.
func (n *NS) DelLink(name string) (found bool, err error) {
	_, found, err = n.delLink(name, false)
	return found, err
}

// DelLinkWithAddrs deletes the named link and returns its global
// addresses (callers tear down masquerade rules for them). A missing link
// is not an error: found is false.
func (n *NS) DelLinkWithAddrs(name string) (addrs []netlink.Addr, found bool, err error) {
	return n.delLink(name, true)
}

func (n *NS) delLink(name string, withAddrs bool) (addrs []netlink.Addr, found bool, err error) {
	l, err := n.FindLink(name)
	if l == nil {
		return nil, false, err
	}
	if withAddrs {
		all, err := n.AddrList(l, netlink.FAMILY_ALL)
		if err != nil {
			return nil, true, fmt.Errorf("list addresses of %q: %w", name, err)
		}
		for _, a := range all {
			if a.Scope == unix.RT_SCOPE_UNIVERSE {
				addrs = append(addrs, a)
			}
		}
	}
	if err := n.H.LinkDel(l); err != nil && !IsNotFound(err) {
		return addrs, true, fmt.Errorf("delete %q: %w", name, err)
	}
	return addrs, true, nil
}

// DelContainerLink deletes ifname inside the namespace at nsPath and returns
// the global addresses it had (for cleaning up rules keyed by address). It
// is DEL-tolerant: an empty path, a namespace that is gone, or a missing
// link are not errors.
func DelContainerLink(nsPath, ifname string) ([]netip.Prefix, error) {
	cont, err := OpenIfExists(nsPath)
	if cont == nil {
		return nil, err
	}
	defer cont.Close()
	as, _, err := cont.DelLinkWithAddrs(ifname)
	if err != nil {
		return nil, err
	}
	removed := make([]netip.Prefix, 0, len(as))
	for _, ad := range as {
		removed = append(removed, Prefix(ad.IPNet))
	}
	return removed, nil
}
