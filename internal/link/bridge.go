package link

import (
	"crypto/rand"
	"errors"
	"fmt"
	"net"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// BridgeOpts describes the bridge a plugin attaches to.
type BridgeOpts struct {
	Name          string
	MTU           int
	Promisc       bool
	VlanFiltering bool
}

// EnsureBridge returns the named bridge, creating it if needed, up and
// with accept_ra=0, and whether this call created it. A new bridge gets a
// fixed random MAC so the kernel does not switch it to the lowest port MAC
// as ports come and go.
func (n *NS) EnsureBridge(o BridgeOpts) (br *netlink.Bridge, created bool, err error) {
	l, err := n.FindLink(o.Name)
	if err != nil {
		return nil, false, fmt.Errorf("look up bridge %q: %w", o.Name, err)
	}
	if l == nil {
		attrs := netlink.NewLinkAttrs()
		attrs.Name = o.Name
		attrs.MTU = o.MTU
		attrs.HardwareAddr = randomMAC()
		br := &netlink.Bridge{LinkAttrs: attrs}
		if o.VlanFiltering {
			on := true
			br.VlanFiltering = &on
		}
		err := n.H.LinkAdd(br)
		if errors.Is(err, unix.EOPNOTSUPP) && o.VlanFiltering {
			return nil, false, fmt.Errorf("create bridge %q with vlan filtering: the kernel does not support it (CONFIG_BRIDGE_VLAN_FILTERING): %w", o.Name, err)
		}
		if err != nil && !errors.Is(err, unix.EEXIST) {
			return nil, false, fmt.Errorf("create bridge %q: %w", o.Name, err)
		}
		created = err == nil // EEXIST: a concurrent ADD made it first
		if l, err = n.LinkByName(o.Name); err != nil {
			return nil, created, fmt.Errorf("look up bridge %q: %w", o.Name, err)
		}
	}
	br, ok := l.(*netlink.Bridge)
	if !ok {
		return nil, false, fmt.Errorf("%q already exists but is not a bridge", o.Name)
	}
	// We own the bridge's routes: no router advertisements, on a bridge
	// someone else made too (as the reference). Best effort: IPv6 may be off.
	n.Do(func() error {
		key := "net/ipv6/conf/" + o.Name + "/accept_ra"
		if v, err := ReadSysctl(key); err == nil && v == "0" {
			return nil
		}
		return WriteSysctl(key, "0")
	})
	if o.VlanFiltering && (br.VlanFiltering == nil || !*br.VlanFiltering) {
		// A bridge with only its name and index: netlink's setter sends
		// every attribute of the link it is given, and the kernel refuses
		// some of those read back from an existing bridge (EINVAL).
		attrs := netlink.NewLinkAttrs()
		attrs.Name, attrs.Index = br.Name, br.Index
		if err := n.H.BridgeSetVlanFiltering(&netlink.Bridge{LinkAttrs: attrs}, true); err != nil {
			return nil, created, fmt.Errorf("enable vlan filtering on %q (the kernel needs CONFIG_BRIDGE_VLAN_FILTERING): %w", o.Name, err)
		}
		on := true
		br.VlanFiltering = &on
	}
	if o.Promisc && br.Promisc == 0 {
		if err := n.H.SetPromiscOn(br); err != nil {
			return nil, created, fmt.Errorf("set promiscuous mode on %q: %w", o.Name, err)
		}
	}
	if br.Flags&net.FlagUp == 0 {
		if err := n.H.LinkSetUp(br); err != nil {
			return nil, created, fmt.Errorf("set %q up: %w", o.Name, err)
		}
	}
	return br, created, nil
}

// DelBridgeIfUnused deletes bridge br unless it has ports (a failed ADD
// removes the bridge it created, never one another attachment uses).
func (n *NS) DelBridgeIfUnused(br *netlink.Bridge) error {
	links, err := n.LinkList()
	if err != nil {
		return fmt.Errorf("list links: %w", err)
	}
	for _, l := range links {
		if l.Attrs().MasterIndex == br.Index {
			return nil
		}
	}
	if err := n.H.LinkDel(br); err != nil && !IsNotFound(err) {
		return fmt.Errorf("delete bridge %q: %w", br.Name, err)
	}
	return nil
}

// randomMAC is a locally administered unicast address.
func randomMAC() net.HardwareAddr {
	m := make(net.HardwareAddr, 6)
	rand.Read(m)
	m[0] = m[0]&0xfe | 0x02
	return m
}

// PortOpts are a bridge port's settings.
type PortOpts struct {
	Hairpin  bool
	Isolated bool
	// Vlan is the access vlan (PVID, untagged); 0 for none.
	Vlan int
	// Trunk lists tagged vlans.
	Trunk []int
	// PreserveDefaultVlan keeps vlan 1 on the port when vlans are set.
	PreserveDefaultVlan bool
}

// AttachPort enslaves port to br and applies o. Settings equal to a new
// port's defaults are not written.
func (n *NS) AttachPort(br *netlink.Bridge, port netlink.Link, o PortOpts) error {
	name := port.Attrs().Name
	if err := n.H.LinkSetMasterByIndex(port, br.Index); err != nil {
		return fmt.Errorf("attach %q to bridge %q: %w", name, br.Name, err)
	}
	if o.Hairpin {
		if err := n.H.LinkSetHairpin(port, true); err != nil {
			return fmt.Errorf("set hairpin mode on %q: %w", name, err)
		}
	}
	if o.Isolated {
		if err := n.H.LinkSetIsolated(port, true); err != nil {
			return fmt.Errorf("set port isolation on %q: %w", name, err)
		}
	}
	if (o.Vlan != 0 || len(o.Trunk) > 0) && !o.PreserveDefaultVlan {
		if err := n.removePortVlans(port); err != nil {
			return fmt.Errorf("remove default vlan on %q: %w", name, err)
		}
	}
	if o.Vlan != 0 {
		if err := n.H.BridgeVlanAdd(port, uint16(o.Vlan), true, true, false, true); err != nil {
			return fmt.Errorf("set vlan %d on %q: %w", o.Vlan, name, err)
		}
	}
	// Contiguous trunk vlans go in as one range each: a trunk of 1-4094
	// is one netlink request instead of 4094 (the reference sends one per
	// vlan).
	for _, r := range vlanRuns(o.Trunk) {
		var err error
		if r[0] == r[1] {
			err = n.H.BridgeVlanAdd(port, uint16(r[0]), false, false, false, true)
		} else {
			err = n.H.BridgeVlanAddRange(port, uint16(r[0]), uint16(r[1]), false, false, false, true)
		}
		if err != nil {
			return fmt.Errorf("add trunk vlans %d-%d on %q: %w", r[0], r[1], name, err)
		}
	}
	if o.Vlan == 0 && len(o.Trunk) > 0 {
		// A trunk without an access vlan keeps vlan 1 native (reference behaviour).
		if err := n.H.BridgeVlanAdd(port, 1, true, true, false, true); err != nil {
			return fmt.Errorf("set native vlan 1 on %q: %w", name, err)
		}
	}
	return nil
}

func (n *NS) removePortVlans(port netlink.Link) error {
	all, err := retry(n.H.BridgeVlanList)
	if err != nil {
		return err
	}
	for _, info := range all[int32(port.Attrs().Index)] {
		if err := n.H.BridgeVlanDel(port, info.Vid, false, false, false, true); err != nil {
			return err
		}
	}
	return nil
}

// vlanRuns splits sorted vlan ids into [first, last] runs of consecutive ids.
func vlanRuns(vids []int) [][2]int {
	var runs [][2]int
	for _, v := range vids {
		if n := len(runs); n > 0 && runs[n-1][1] == v-1 {
			runs[n-1][1] = v
		} else {
			runs = append(runs, [2]int{v, v})
		}
	}
	return runs
}

// PortVlan is one vlan of a bridge port.
type PortVlan struct {
	Vid      uint16
	PVID     bool // untagged frames entering the port get this vlan
	Untagged bool // frames of this vlan leave the port untagged
}

// PortVlans lists the vlans on a bridge port (for tests and CHECK).
func (n *NS) PortVlans(port netlink.Link) ([]PortVlan, error) {
	all, err := retry(n.H.BridgeVlanList)
	if err != nil {
		return nil, err
	}
	var out []PortVlan
	for _, info := range all[int32(port.Attrs().Index)] {
		out = append(out, PortVlan{Vid: info.Vid, PVID: info.PortVID(), Untagged: info.EngressUntag()})
	}
	return out, nil
}
