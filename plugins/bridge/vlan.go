package bridge

import (
	"fmt"
	"sort"
	"strings"

	"github.com/vishvananda/netlink"

	"github.com/patchbay-cni/patchbay/internal/link"
)

// checkVlans verifies the vlans of the container's bridge port against the
// configuration (the reference's CHECK does not look at them): vlan
// filtering on the bridge, the access vlan as PVID and untagged, the trunk
// vlans tagged, vlan 1 native on a trunk without an access vlan, and no
// other vlan (vlan 1 is allowed with preserveDefaultVlan).
func checkVlans(host *link.NS, br *netlink.Bridge, port netlink.Link, c *Config) error {
	if c.Vlan == 0 && len(c.vlans) == 0 {
		return nil
	}
	if br.VlanFiltering == nil || !*br.VlanFiltering {
		return fmt.Errorf("bridge %q has vlan filtering off", br.Name)
	}
	have, err := host.PortVlans(port)
	if err != nil {
		return fmt.Errorf("list the vlans of %q: %v", port.Attrs().Name, err)
	}
	want := map[uint16]link.PortVlan{}
	for _, v := range c.vlans {
		want[uint16(v)] = link.PortVlan{Vid: uint16(v)}
	}
	if c.Vlan != 0 {
		want[uint16(c.Vlan)] = link.PortVlan{Vid: uint16(c.Vlan), PVID: true, Untagged: true}
	} else {
		want[1] = link.PortVlan{Vid: 1, PVID: true, Untagged: true}
	}
	var wrong []string
	for _, h := range have {
		w, ok := want[h.Vid]
		delete(want, h.Vid)
		switch {
		case !ok && h.Vid == 1 && c.PreserveDefaultVlan:
		case !ok:
			wrong = append(wrong, fmt.Sprintf("vlan %d is on the port", h.Vid))
		case h != w:
			wrong = append(wrong, fmt.Sprintf("vlan %d is %s, want %s", h.Vid, vlanMode(h), vlanMode(w)))
		}
	}
	for vid := range want {
		wrong = append(wrong, fmt.Sprintf("vlan %d is missing", vid))
	}
	if len(wrong) > 0 {
		sort.Strings(wrong)
		return fmt.Errorf("port %q of bridge %q: %s", port.Attrs().Name, br.Name, strings.Join(wrong, "; "))
	}
	return nil
}

func vlanMode(v link.PortVlan) string {
	switch {
	case v.PVID && v.Untagged:
		return "untagged PVID"
	case v.PVID:
		return "tagged PVID"
	case v.Untagged:
		return "untagged"
	}
	return "tagged"
}
