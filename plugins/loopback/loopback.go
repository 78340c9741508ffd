// Package loopback is the loopback plugin: it brings "lo" up in the
// container's network namespace (ADD) and down again (DEL).
package loopback

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"

	"github.com/patchbay-cni/patchbay/internal/link"
	"github.com/patchbay-cni/patchbay/internal/netns"
	"github.com/patchbay-cni/patchbay/skel"
	"github.com/patchbay-cni/patchbay/spec"
)

// Plugin returns the loopback plugin.
func Plugin() skel.Plugin {
	return skel.Plugin{
		Type:  "loopback",
		Add:   add,
		Del:   del,
		Check: check,
		About: "patchbay loopback plugin: brings lo up in the container network namespace",
	}
}

func add(a *skel.CmdArgs) (*spec.Result, error) {
	cont, err := link.OpenContainer(a.Netns)
	if err != nil {
		return nil, netns.CNIError(a.Netns, err)
	}
	defer cont.Close()
	res, err := setLoUp(cont, a.Netns)
	if err != nil {
		return nil, netns.CNIError(a.Netns, err)
	}
	// In a chain, a previous result is passed through unchanged (spec §5).
	if a.Conf.PrevResult != nil {
		return a.Conf.PrevResult, nil
	}
	return res, nil
}

// setLoUp brings lo up and returns the result describing it.
func setLoUp(cont *link.NS, sandbox string) (*spec.Result, error) {
	lo, err := cont.LinkByName("lo")
	if err != nil {
		return nil, fmt.Errorf("find lo: %w", err)
	}
	if err := cont.H.LinkSetUp(lo); err != nil {
		return nil, fmt.Errorf("set lo up: %w", err)
	}
	addrs, err := cont.AddrList(lo, netlink.FAMILY_ALL)
	if err != nil {
		return nil, fmt.Errorf("list lo addresses: %w", err)
	}
	return loResult(sandbox, lo, addrs), nil
}

func loResult(sandbox string, lo netlink.Link, addrs []netlink.Addr) *spec.Result {
	r := &spec.Result{Interfaces: []*spec.Interface{{Name: "lo", Mac: "00:00:00:00:00:00", Sandbox: sandbox}}}
	for _, ad := range addrs {
		ip, ok := netip.AddrFromSlice(ad.IP)
		if !ok {
			continue
		}
		ones, _ := ad.Mask.Size()
		r.IPs = append(r.IPs, &spec.IPConfig{Interface: spec.IntPtr(0), Address: netip.PrefixFrom(ip.Unmap(), ones)})
	}
	return r
}

// del tolerates a namespace that is already gone, and a missing lo.
func del(a *skel.CmdArgs) error {
	cont, err := link.OpenIfExists(a.Netns)
	if cont == nil {
		return netns.CNIError(a.Netns, err)
	}
	defer cont.Close()
	lo, err := cont.LinkByName("lo")
	if err != nil {
		return nil // nothing to undo
	}
	if err := cont.H.LinkSetDown(lo); err != nil && !netns.Gone(a.Netns) {
		return netns.CNIError(a.Netns, err)
	}
	return nil
}

func check(a *skel.CmdArgs) error {
	cont, err := link.OpenContainer(a.Netns)
	if err != nil {
		return netns.CNIError(a.Netns, err)
	}
	defer cont.Close()
	lo, err := cont.LinkByName("lo")
	if err != nil {
		return netns.CNIError(a.Netns, fmt.Errorf("find lo: %w", err))
	}
	if lo.Attrs().Flags&net.FlagUp == 0 {
		return spec.Errorf(spec.ErrInternal, "loopback interface lo in %s is down", a.Netns)
	}
	return nil
}
