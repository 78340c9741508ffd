// Package bridge is the bridge plugin: it attaches the container to a Linux
// bridge in the host namespace through a veth pair, addresses the container
// from IPAM, and optionally makes the bridge the gateway and masquerades.
package bridge

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"

	"github.com/vishvananda/netlink"

	"github.com/patchbay-cni/patchbay/internal/firewall"
	"github.com/patchbay-cni/patchbay/internal/ifplugin"
	"github.com/patchbay-cni/patchbay/internal/link"
	"github.com/patchbay-cni/patchbay/skel"
	"github.com/patchbay-cni/patchbay/spec"
)

// Plugin returns the bridge plugin.
func Plugin() skel.Plugin {
	return skel.Plugin{
		Type:   "bridge",
		Add:    add,
		Del:    del,
		Check:  check,
		GC:     gc,
		Status: status,
		About:  "patchbay bridge plugin: connects containers to a Linux bridge through veth pairs",
	}
}

// Result interface indexes, as in the spec's example.
const (
	idxBridge = iota
	idxHost
	idxCont
)

func add(a *skel.CmdArgs) (res *spec.Result, err error) {
	c, err := load(a)
	if err != nil {
		return nil, err
	}
	host, cont, done, err := link.OpenForAdd(a.Netns, a.IfName)
	if err != nil {
		return nil, err
	}
	defer done()
	fw := firewall.NewSession() // one nftables connection for the whole ADD, opened on first use
	defer fw.Close()

	// From here on a failure removes what this ADD made.
	var undo link.Undo
	defer undo.Unwind(&err)
	br, created, err := host.EnsureBridge(link.BridgeOpts{Name: c.Bridge, MTU: c.MTU, Promisc: c.PromiscMode,
		VlanFiltering: c.Vlan != 0 || c.VlanTrunk != nil})
	if err != nil {
		return nil, err
	}
	if created {
		// Made by this ADD: removed again on failure, unless another
		// attachment joined it meanwhile.
		undo.Push("delete bridge "+br.Name, func() error { return host.DelBridgeIfUnused(br) })
	}
	hostV, contV, err := host.AddVeth(cont, link.VethOpts{ContName: a.IfName, MTU: c.MTU, ContMAC: c.mac})
	if err != nil {
		return nil, err
	}
	undo.Push("delete "+a.IfName, func() error { return cont.H.LinkDel(contV) })

	if err = host.AttachPort(br, hostV, link.PortOpts{Hairpin: c.HairpinMode, Isolated: c.PortIsolation,
		Vlan: c.Vlan, Trunk: c.vlans, PreserveDefaultVlan: c.PreserveDefaultVlan}); err != nil {
		return nil, err
	}
	if err = host.H.LinkSetUp(hostV); err != nil {
		return nil, fmt.Errorf("set %q up: %w", hostV.Attrs().Name, err)
	}
	res = &spec.Result{Interfaces: []*spec.Interface{
		{Name: br.Name, Mac: br.HardwareAddr.String()},
		{Name: hostV.Attrs().Name, Mac: hostV.Attrs().HardwareAddr.String()},
		{Name: contV.Attrs().Name, Mac: contV.Attrs().HardwareAddr.String(), Sandbox: a.Netns},
	}}

	if c.MacSpoofChk {
		id := a.ContainerID + "-" + a.IfName
		if err = fw.SetupSpoofCheck(hostV.Attrs().Name, res.Interfaces[idxCont].Mac, id); err != nil {
			return nil, err
		}
		undo.Push("remove the MAC spoof check", func() error { return fw.TeardownSpoofCheck(id) })
	}

	if c.IPAM.Type == "" {
		// Layer 2 only: interfaces, no addresses.
		if !c.DisableContainerInterface {
			if err = cont.H.LinkSetUp(contV); err != nil {
				return nil, fmt.Errorf("set %q up: %w", a.IfName, err)
			}
		}
		refreshMACs(host, res)
		return ifplugin.WithDNS(res, c.DNS), nil
	}

	if err = ifplugin.IPAMAdd(a, c.IPAM.Type, res, idxCont, &undo); err != nil {
		return nil, err
	}
	gws := gateways(c, res)

	if err = cont.ConfigureIface(contV, res, idxCont, link.IfaceOpts{DAD: c.EnableDad, DADSysctls: true, ARPNotify: true}); err != nil {
		return nil, err
	}
	if c.IsGateway {
		if err = setupGateways(host, br, c, gws, res); err != nil {
			return nil, err
		}
	}
	if c.IPMasq {
		key := firewall.Attachment{Network: c.Name, IfName: a.IfName, ContainerID: a.ContainerID}
		if err = fw.SetupMasquerade(firewall.Kind(c.IPMasqBackend), addrs(res.IPs), key); err != nil {
			return nil, err
		}
	}
	refreshMACs(host, res)
	return ifplugin.WithDNS(res, c.DNS), nil
}

// refreshMACs re-reads the bridge's and host veth's MACs at the end of ADD:
// a bridge made without a fixed MAC (by someone else) takes its lowest
// port's MAC as ports join, and CHECK compares the result's MACs. The
// reference re-reads them too.
func refreshMACs(host *link.NS, res *spec.Result) {
	for _, i := range []int{idxBridge, idxHost} {
		if l, err := host.LinkByName(res.Interfaces[i].Name); err == nil {
			res.Interfaces[i].Mac = l.Attrs().HardwareAddr.String()
		}
	}
}

// gateways fills in missing gateways when the bridge is the gateway, adds default routes for
// isDefaultGateway, and returns the bridge addresses to configure.
func gateways(c *Config, res *spec.Result) []netip.Prefix {
	var gws []netip.Prefix
	haveDefault := map[bool]bool{}
	for _, r := range res.Routes {
		if r.Dst.Bits() == 0 && r.GW.IsValid() {
			haveDefault[r.Dst.Addr().Is4()] = true
		}
	}
	for _, ipc := range res.IPs {
		v4 := ipc.Address.Addr().Is4()
		if !ipc.Gateway.IsValid() && c.IsGateway {
			ipc.Gateway = link.GatewayFor(ipc.Address)
		}
		if c.IsDefaultGateway && !haveDefault[v4] {
			res.Routes = append(res.Routes, &spec.Route{Dst: link.DefaultDst(ipc.Address.Addr()), GW: ipc.Gateway})
			haveDefault[v4] = true
		}
		if c.IsGateway && ipc.Gateway.IsValid() {
			gws = append(gws, netip.PrefixFrom(ipc.Gateway, ipc.Address.Bits()))
		}
	}
	return gws
}

// setupGateways puts the gateway addresses on the bridge (or, with a vlan,
// on the bridge's vlan gateway interface) and enables forwarding.
func setupGateways(host *link.NS, br *netlink.Bridge, c *Config, gws []netip.Prefix, res *spec.Result) error {
	var target netlink.Link = br
	if c.Vlan != 0 && len(gws) > 0 {
		vl, err := vlanGateway(host, br, c)
		if err != nil {
			return err
		}
		target = vl
		res.Interfaces = append(res.Interfaces, &spec.Interface{Name: vl.Attrs().Name, Mac: vl.Attrs().HardwareAddr.String()})
	}
	for _, gw := range gws {
		if err := host.EnsureAddr(target, gw, c.ForceAddress); err != nil {
			return fmt.Errorf("set gateway address on %q: %w", target.Attrs().Name, err)
		}
		if err := host.EnableForwarding(gw.Addr()); err != nil {
			return err
		}
	}
	return nil
}

// vlanGateway returns "<bridge>.<vlan>", a veth end in the host namespace
// whose peer is an access port of the vlan (the reference's layout).
func vlanGateway(host *link.NS, br *netlink.Bridge, c *Config) (netlink.Link, error) {
	name := br.Name + "." + strconv.Itoa(c.Vlan)
	if l, err := host.FindLink(name); l != nil || err != nil {
		return l, err
	}
	if len(name) > spec.MaxInterfaceNameLen {
		return nil, invalid("vlan gateway interface name %q (from \"bridge\" and \"vlan\") is longer than %d characters", name, spec.MaxInterfaceNameLen)
	}
	port, gw, err := host.AddVeth(host, link.VethOpts{ContName: name, MTU: br.MTU})
	if err != nil {
		return nil, fmt.Errorf("create vlan gateway %q: %w", name, err)
	}
	if err := host.AttachPort(br, port, link.PortOpts{Vlan: c.Vlan, PreserveDefaultVlan: c.PreserveDefaultVlan}); err != nil {
		return nil, err
	}
	for _, l := range []netlink.Link{port, gw} {
		if err := host.H.LinkSetUp(l); err != nil {
			return nil, fmt.Errorf("set %q up: %w", l.Attrs().Name, err)
		}
	}
	return gw, nil
}

func addrs(ips []*spec.IPConfig) []netip.Prefix {
	out := make([]netip.Prefix, 0, len(ips))
	for _, ipc := range ips {
		out = append(out, ipc.Address)
	}
	return out
}

func del(a *skel.CmdArgs) error {
	c, err := decode(a)
	if err != nil {
		return err
	}
	// IPAM first, while the interface exists: a DHCP lease is released
	// over it (dhcp sends DHCPRELEASE on the container's interface).
	if err := skel.DelegateIPAM(a, spec.CmdDel, c.IPAM.Type); err != nil {
		return err
	}
	removed, err := link.DelContainerLink(a.Netns, a.IfName)
	if err != nil {
		return err
	}
	fw := firewall.NewSession()
	defer fw.Close()
	var errs []error
	if c.MacSpoofChk {
		if err := fw.TeardownSpoofCheck(a.ContainerID + "-" + a.IfName); err != nil {
			errs = append(errs, err)
		}
	}
	if c.IPAM.Type != "" && c.IPMasq {
		if len(removed) == 0 && a.Conf.PrevResult != nil {
			removed = addrs(a.Conf.PrevResult.IPs) // iptables needs addresses; nftables does not
		}
		key := firewall.Attachment{Network: c.Name, IfName: a.IfName, ContainerID: a.ContainerID}
		if err := fw.TeardownMasquerade(firewall.Kind(c.IPMasqBackend), removed, key); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func status(a *skel.CmdArgs) error {
	c, err := load(a)
	if err != nil {
		return err
	}
	return skel.DelegateIPAM(a, spec.CmdStatus, c.IPAM.Type)
}

func gc(a *skel.CmdArgs) error {
	c, err := load(a)
	if err != nil {
		return err
	}
	if c.IPAM.Type == "" {
		return nil
	}
	if err := skel.DelegateVerb(a, spec.CmdGC, c.IPAM.Type); err != nil {
		return err
	}
	if c.IPMasq {
		fw := firewall.NewSession()
		defer fw.Close()
		return fw.GCMasquerade(c.Name, c.Attachments())
	}
	return nil
}
