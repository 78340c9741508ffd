// Package ptp is the ptp plugin: a veth pair whose container end holds the
// IPAM address and routes everything through the host end, and whose host
// end routes the container address (/32 or /128) back.
package ptp

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/patchbay-cni/patchbay/internal/firewall"
	"github.com/patchbay-cni/patchbay/internal/ifplugin"
	"github.com/patchbay-cni/patchbay/internal/link"
	"github.com/patchbay-cni/patchbay/skel"
	"github.com/patchbay-cni/patchbay/spec"
)

// Config is the ptp plugin's configuration (reference keys).
type Config struct {
	spec.NetConf
	IPMasq        bool   `json:"ipMasq"`
	IPMasqBackend string `json:"ipMasqBackend,omitempty"`
	MTU           int    `json:"mtu"`
}

// Plugin returns the ptp plugin.
func Plugin() skel.Plugin {
	return skel.Plugin{
		Type:   "ptp",
		Add:    add,
		Del:    del,
		Check:  check,
		GC:     gc,
		Status: status,
		About:  "patchbay ptp plugin: a routed veth pair per container",
	}
}

// Result interface indexes.
const (
	idxHost = iota
	idxCont
)

func load(a *skel.CmdArgs) (*Config, error) {
	c := &Config{}
	if err := a.DecodeConf(c); err != nil {
		return nil, err
	}
	if c.IPAM.Type == "" {
		return nil, spec.Errorf(spec.ErrInvalidNetworkConfig, "\"ipam\" is required: ptp needs addresses to route")
	}
	if err := link.ValidateMTU(c.MTU); err != nil {
		return nil, err
	}
	if _, err := firewall.ParseKind("ipMasqBackend", c.IPMasqBackend, firewall.NFTables); err != nil {
		return nil, err
	}
	return c, nil
}

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

	// From here on a failure removes what this ADD made.
	var undo link.Undo
	defer undo.Unwind(&err)
	res = &spec.Result{}
	if err = ifplugin.IPAMAdd(a, c.IPAM.Type, res, idxCont, &undo); err != nil {
		return nil, err
	}
	for _, ipc := range res.IPs {
		if !ipc.Gateway.IsValid() {
			return nil, spec.Errorf(spec.ErrInvalidNetworkConfig, "IPAM gave %s no gateway: ptp routes through it", ipc.Address)
		}
		if err = host.EnableForwarding(ipc.Address.Addr()); err != nil {
			return nil, err
		}
	}

	hostV, contV, err := host.AddVeth(cont, link.VethOpts{ContName: a.IfName, MTU: c.MTU})
	if err != nil {
		return nil, err
	}
	undo.Push("delete "+a.IfName, func() error { return cont.H.LinkDel(contV) })
	res.Interfaces = []*spec.Interface{
		{Name: hostV.Attrs().Name, Mac: hostV.Attrs().HardwareAddr.String()},
		{Name: contV.Attrs().Name, Mac: contV.Attrs().HardwareAddr.String(), Sandbox: a.Netns},
	}
	if err = setupContainer(cont, contV, res); err != nil {
		return nil, err
	}
	if err = setupHost(host, hostV, res); err != nil {
		return nil, err
	}
	if c.IPMasq {
		var ips []netip.Prefix
		for _, ipc := range res.IPs {
			ips = append(ips, ipc.Address)
		}
		key := firewall.Attachment{Network: c.Name, IfName: a.IfName, ContainerID: a.ContainerID}
		fw := firewall.NewSession()
		defer fw.Close()
		if err = fw.SetupMasquerade(firewall.Kind(c.IPMasqBackend), ips, key); err != nil {
			return nil, err
		}
	}
	return ifplugin.WithDNS(res, c.DNS), nil
}

// setupContainer addresses the container end without the subnet route,
// then routes: the gateway on-link (/32 or /128), the subnet via the
// gateway, and the IPAM routes. Everything therefore goes through the host.
func setupContainer(cont *link.NS, l netlink.Link, res *spec.Result) error {
	if err := cont.ConfigureIface(l, res, idxCont, link.IfaceOpts{NoPrefixRoute: true, SkipRoutes: true}); err != nil {
		return err
	}
	for _, ipc := range res.IPs {
		gw, src := ipc.Gateway, ipc.Address.Addr().AsSlice()
		for _, r := range []*netlink.Route{
			{LinkIndex: l.Attrs().Index, Dst: link.IPNet(netip.PrefixFrom(gw, gw.BitLen())), Scope: netlink.SCOPE_LINK, Src: src},
			{LinkIndex: l.Attrs().Index, Dst: link.IPNet(ipc.Address.Masked()), Gw: gw.AsSlice(), Src: src},
		} {
			if err := cont.H.RouteAdd(r); err != nil && !errors.Is(err, unix.EEXIST) {
				return fmt.Errorf("add route %v in container: %w", r, err)
			}
		}
	}
	return cont.AddResultRoutes(l, res, idxCont)
}

// setupHost gives the host end each gateway address (/32, /128) and a host
// route to each container address.
func setupHost(host *link.NS, l netlink.Link, res *spec.Result) error {
	if err := host.H.LinkSetUp(l); err != nil {
		return fmt.Errorf("set %q up: %w", l.Attrs().Name, err)
	}
	for _, ipc := range res.IPs {
		gw := ipc.Gateway
		addr := &netlink.Addr{IPNet: link.IPNet(netip.PrefixFrom(gw, gw.BitLen()))}
		if gw.Is6() {
			addr.Flags = unix.IFA_F_NODAD
		}
		if err := host.H.AddrAdd(l, addr); err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("add %s to %q: %w", gw, l.Attrs().Name, err)
		}
		a := ipc.Address.Addr()
		r := &netlink.Route{LinkIndex: l.Attrs().Index, Dst: link.IPNet(netip.PrefixFrom(a, a.BitLen())), Scope: netlink.SCOPE_LINK}
		if err := host.H.RouteAdd(r); err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("add host route to %s: %w", a, err)
		}
	}
	return nil
}

func del(a *skel.CmdArgs) error {
	// Decoded, not validated: DEL must succeed for a configuration ADD
	// refused (the runtime sends one after the failed ADD and retries while
	// it fails), and masquerade teardown copes with any backend value.
	c := &Config{}
	if err := a.DecodeConf(c); err != nil {
		return err
	}
	// Without ipam ADD allocated nothing.
	if err := skel.DelegateIPAM(a, spec.CmdDel, c.IPAM.Type); err != nil {
		return err
	}
	removed, err := link.DelContainerLink(a.Netns, a.IfName)
	if err != nil {
		return err
	}
	if c.IPMasq {
		if len(removed) == 0 && a.Conf.PrevResult != nil {
			for _, ipc := range a.Conf.PrevResult.IPs {
				removed = append(removed, ipc.Address)
			}
		}
		fw := firewall.NewSession()
		defer fw.Close()
		return fw.TeardownMasquerade(firewall.Kind(c.IPMasqBackend), removed, firewall.Attachment{Network: c.Name, IfName: a.IfName, ContainerID: a.ContainerID})
	}
	return nil
}

func check(a *skel.CmdArgs) error {
	c, err := load(a)
	if err != nil {
		return err
	}
	prev, idx, err := ifplugin.CheckStart(a, c.IPAM.Type)
	if err != nil {
		return err
	}
	cont, err := link.OpenContainer(a.Netns)
	if err != nil {
		return err
	}
	defer cont.Close()
	l, err := cont.CheckLink(a.IfName, link.LinkWant{Type: "veth", MAC: prev.Interfaces[idx].Mac})
	if err == nil {
		err = cont.CheckResult(l, prev, idx)
	}
	if err != nil {
		return skel.CheckErr("%v", err)
	}
	return nil
}

// gc passes GC on to IPAM and removes the masquerade rules of attachments
// not in the valid list (as bridge does).
func gc(a *skel.CmdArgs) error {
	c, err := load(a)
	if err != nil {
		return err
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

func status(a *skel.CmdArgs) error {
	c, err := load(a)
	if err != nil {
		return err
	}
	return skel.DelegateVerb(a, spec.CmdStatus, c.IPAM.Type)
}
