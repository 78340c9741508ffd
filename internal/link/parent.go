package link

import (
	"fmt"

	"github.com/vishvananda/netlink"
)

// Parent returns the link l (a link of n made on a parent: macvlan,
// ipvlan, vlan) sits on, looked up in parentNS, the namespace CHECK
// expects the parent in (n itself, or the host's when the link was made
// there and moved). The parent's index alone is ambiguous across
// namespaces; the kernel reports the parent's namespace as a namespace id
// relative to n when it is not n, and this verifies that too.
func (n *NS) Parent(l netlink.Link, parentNS *NS) (netlink.Link, error) {
	at := l.Attrs()
	if at.ParentIndex == 0 {
		return nil, fmt.Errorf("interface %q has no parent link", at.Name)
	}
	if parentNS == n {
		if at.NetNsID >= 0 {
			return nil, fmt.Errorf("interface %q sits on a link in another namespace (netnsid %d), not in %s", at.Name, at.NetNsID, n)
		}
	} else {
		id, err := n.H.GetNetNsIdByFd(parentNS.Fd())
		if err != nil {
			return nil, fmt.Errorf("namespace id of %s seen from %s: %w", parentNS, n, err)
		}
		if at.NetNsID < 0 || at.NetNsID != id {
			return nil, fmt.Errorf("interface %q does not sit on a link in %s (its parent's netnsid is %d, that namespace's %d)", at.Name, parentNS, at.NetNsID, id)
		}
	}
	p, err := parentNS.LinkByIndex(at.ParentIndex)
	if err != nil {
		return nil, fmt.Errorf("parent of %q (index %d) not found in %s: %w", at.Name, at.ParentIndex, parentNS, err)
	}
	return p, nil
}
