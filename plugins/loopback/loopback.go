// Package loopback is the loopback plugin: it brings "lo" up in the
// container's network namespace (ADD) and down again (DEL).
package loopback

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"

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
	var res *spec.Result
	err := netns.Do(a.Netns, func() error {
		h, err := netlink.NewHandle()
		if err != nil {
			return err
		}
		defer h.Close()
		lo, err := h.LinkByName("lo")
		if err != nil {
			return fmt.Errorf("find lo: %w", err)
		}
		if err := h.LinkSetUp(lo); err != nil {
			return fmt.Errorf("set lo up: %w", err)
		}
		addrs, err := h.AddrList(lo, netlink.FAMILY_ALL)
		if err != nil {
			return fmt.Errorf("list lo addresses: %w", err)
		}
		res = loResult(a.Netns, lo, addrs)
		return nil
	})
	if err != nil {
		return nil, netns.CNIError("loopback", a.Netns, err)
	}
	// In a chain, a previous result is passed through unchanged (spec §5).
	if a.Conf.PrevResult != nil {
		return a.Conf.PrevResult, nil
	}
	return res, nil
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

func del(a *skel.CmdArgs) error {
	if a.Netns == "" {
		return nil
	}
	err := netns.Do(a.Netns, func() error {
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return nil // nothing to undo
		}
		return netlink.LinkSetDown(lo)
	})
	if err != nil && !netns.Gone(a.Netns) {
		return netns.CNIError("loopback", a.Netns, err)
	}
	return nil // DEL tolerates a namespace that is already gone
}

func check(a *skel.CmdArgs) error {
	return netns.CNIError("loopback", a.Netns, netns.Do(a.Netns, func() error {
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return fmt.Errorf("find lo: %w", err)
		}
		if lo.Attrs().Flags&net.FlagUp == 0 {
			return spec.Errorf(spec.ErrInternal, "loopback interface lo in %s is down", a.Netns)
		}
		return nil
	}))
}
