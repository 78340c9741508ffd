package ifplugin

import (
	"github.com/patchbay-cni/patchbay/internal/link"
	"github.com/patchbay-cni/patchbay/skel"
	"github.com/patchbay-cni/patchbay/spec"
)

// The pieces below are the same in every plugin that puts one interface
// into the container and addresses it, whether built on Kind or not
// (bridge, ptp, tap, host-device).

// IPAMAdd runs ADD of the IPAM plugin ipamType, pushes the release of its
// allocation onto undo, and puts its IPs (each on result interface idx),
// routes and DNS into res. An answer without IPs is an error.
func IPAMAdd(a *skel.CmdArgs, ipamType string, res *spec.Result, idx int, undo *link.Undo) error {
	ipam, err := skel.DelegateAdd(a, ipamType)
	if err != nil {
		return err
	}
	undo.Push("release the IPAM allocation", func() error { return skel.DelegateVerb(a, spec.CmdDel, ipamType) })
	if len(ipam.IPs) == 0 {
		return spec.Errorf(spec.ErrInternal, "IPAM plugin %s returned no IP configuration", ipamType)
	}
	res.IPs, res.Routes, res.DNS = ipam.IPs, ipam.Routes, ipam.DNS
	for _, ipc := range res.IPs {
		ipc.Interface = spec.IntPtr(idx)
	}
	return nil
}

// WithDNS applies the configuration's "dns", which replaces IPAM's when
// set, and returns res.
func WithDNS(res *spec.Result, dns spec.DNS) *spec.Result {
	if !dns.IsEmpty() {
		res.DNS = dns
	}
	return res
}

// CheckStart starts the CHECK of the container interface: IPAM's CHECK
// (ipamType; "" for none) and prevResult (skel's CheckPrev), and the index
// of CNI_IFNAME in CNI_NETNS among prevResult's interfaces.
func CheckStart(a *skel.CmdArgs, ipamType string) (prev *spec.Result, idx int, err error) {
	if prev, err = a.CheckPrev(ipamType); err != nil {
		return nil, -1, err
	}
	if idx = link.FindIface(prev, a.IfName, a.Netns); idx < 0 {
		return nil, -1, skel.CheckErr("prevResult has no interface %q in sandbox %q", a.IfName, a.Netns)
	}
	return prev, idx, nil
}
