package link

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/patchbay-cni/patchbay/spec"
)

// defaultTxQLen is the kernel's DEFAULT_TX_QUEUE_LEN (ether_setup).
const defaultTxQLen = 1000

// VethOpts describes a veth pair between a host namespace and a container.
type VethOpts struct {
	ContName string // interface name inside the container (CNI_IFNAME)
	HostName string // host-side name; "" picks a random vethXXXXXXXX
	MTU      int    // 0 keeps the kernel default
	ContMAC  string // container-side MAC; "" lets the kernel choose
}

// RandomVethName returns "veth" and 8 random hex digits, the naming the
// reference plugins use (NetworkManager ignores veth* devices).
func RandomVethName() string {
	b := make([]byte, 4)
	rand.Read(b)
	return "veth" + hex.EncodeToString(b)
}

// AddVeth creates a veth pair from the host namespace with its peer created
// directly in the container namespace (no move afterwards, so the host
// index stays valid). It returns both links as the kernel reports them.
func (host *NS) AddVeth(cont *NS, o VethOpts) (hostLink, contLink netlink.Link, err error) {
	var mac net.HardwareAddr
	if o.ContMAC != "" {
		if mac, err = net.ParseMAC(o.ContMAC); err != nil {
			return nil, nil, fmt.Errorf("invalid MAC address %q: %w", o.ContMAC, err)
		}
	}
	for range 10 {
		name := o.HostName
		if name == "" {
			name = RandomVethName()
		}
		attrs := netlink.NewLinkAttrs()
		attrs.Name = name
		attrs.MTU = o.MTU
		// Queue lengths as the reference ends up with (it creates the pair
		// from the container side): the container has the kernel's default
		// for Ethernet devices (1000), the host side 0. The netlink library
		// sends the host value for the peer unless the peer has its own.
		attrs.TxQLen = 0
		v := &netlink.Veth{
			LinkAttrs:        attrs,
			PeerName:         o.ContName,
			PeerHardwareAddr: mac,
			PeerNamespace:    netlink.NsFd(cont.Fd()),
			PeerMTU:          uint32(o.MTU),
			PeerTxQLen:       defaultTxQLen,
		}
		err = retryErr(func() error { return host.H.LinkAdd(v) })
		if errors.Is(err, unix.EEXIST) {
			// Either side's name may be taken: retry only a random host name.
			if _, lerr := host.LinkByName(name); lerr == nil && o.HostName == "" {
				continue
			}
			if _, lerr := cont.LinkByName(o.ContName); lerr == nil {
				return nil, nil, fmt.Errorf("container interface %q already exists in %s", o.ContName, cont.Path)
			}
			return nil, nil, fmt.Errorf("host interface %q already exists", name)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("create veth pair %s/%s: %w", name, o.ContName, err)
		}
		if hostLink, err = host.LinkByName(name); err != nil {
			return nil, nil, fmt.Errorf("look up new veth %q: %w", name, err)
		}
		// The plugin owns the routes through the host side: ignore router
		// advertisements from the container (the reference does the same).
		// Best effort, as there: IPv6 may be disabled on the host.
		host.Do(func() error { return WriteSysctl("net/ipv6/conf/"+name+"/accept_ra", "0") })
		if contLink, err = cont.LinkByName(o.ContName); err != nil {
			host.H.LinkDel(hostLink)
			return nil, nil, fmt.Errorf("look up new veth %q in %s: %w", o.ContName, cont.Path, err)
		}
		return hostLink, contLink, nil
	}
	return nil, nil, fmt.Errorf("could not find a free host veth name")
}

// CheckNameFree fails when the container already has an interface called
// name. Plugins call it before they change anything, so an ADD refused for
// a taken CNI_IFNAME (the spec requires an error) leaves nothing behind;
// AddVeth still catches a name taken in between.
func (cont *NS) CheckNameFree(name string) error {
	l, err := cont.FindLink(name)
	switch {
	case err != nil:
		return fmt.Errorf("look up %q in %s: %w", name, cont.Path, err)
	case l != nil:
		// Code 4: CNI_IFNAME names an interface the container already has
		// (an earlier ADD of this attachment, or someone else's link).
		return spec.Errorf(spec.ErrInvalidEnvironment, "interface %q already exists in %s (CNI_IFNAME must name a new interface)", name, cont.Path)
	}
	return nil
}

// PeerIndex returns the ifindex of a veth's peer (in whatever namespace it is).
func PeerIndex(l netlink.Link) (int, error) {
	if _, ok := l.(*netlink.Veth); !ok {
		return 0, fmt.Errorf("%q is not a veth", l.Attrs().Name)
	}
	// IFLA_LINK holds the peer's index for veths.
	if l.Attrs().ParentIndex == 0 {
		return 0, fmt.Errorf("%q reports no peer", l.Attrs().Name)
	}
	return l.Attrs().ParentIndex, nil
}
