// Package static is the static IPAM plugin: it hands back the addresses,
// routes and DNS written in its configuration (or passed by the runtime),
// allocating nothing. Keys, precedence and defaults follow the reference
// static plugin v1.9.1.
package static

import (
	"net/netip"

	"github.com/patchbay-cni/patchbay/skel"
	"github.com/patchbay-cni/patchbay/spec"
)

// Plugin returns the static IPAM plugin.
func Plugin() skel.Plugin {
	return skel.Plugin{
		Type:  "static",
		Add:   add,
		Del:   func(*skel.CmdArgs) error { return nil }, // nothing was allocated
		Check: check,
		GC:    func(*skel.CmdArgs) error { return nil },
		Status: func(*skel.CmdArgs) error {
			return nil // no state, no daemon: always ready
		},
		About: "patchbay static IPAM plugin: returns the configured addresses, routes and DNS",
	}
}

func add(a *skel.CmdArgs) (*spec.Result, error) {
	c, err := load(a)
	if err != nil {
		return nil, err
	}
	return c.result(), nil
}

// check verifies that every address this configuration would hand out is in
// prevResult, with its gateway when one is configured.
func check(a *skel.CmdArgs) error {
	c, err := load(a)
	if err != nil {
		return err
	}
	prev := a.Conf.PrevResult
	if prev == nil {
		return spec.Errorf(spec.ErrInvalidNetworkConfig, "CHECK requires \"prevResult\"")
	}
	for _, want := range c.addrs {
		found := false
		for _, got := range prev.IPs {
			if got.Address.Addr() != want.Address.Addr() {
				continue
			}
			if want.Gateway.IsValid() && got.Gateway != want.Gateway {
				return spec.Errorf(spec.ErrInternal, "address %s on %s has gateway %v in prevResult, configured %v",
					want.Address, a.IfName, gwString(got.Gateway), want.Gateway)
			}
			found = true
			break
		}
		if !found {
			return spec.Errorf(spec.ErrInternal, "configured address %s is missing from prevResult for %s", want.Address, a.IfName)
		}
	}
	return nil
}

func gwString(a netip.Addr) string {
	if !a.IsValid() {
		return "none"
	}
	return a.String()
}
