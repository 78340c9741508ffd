package skel

import "github.com/patchbay-cni/patchbay/spec"

// CheckErr is a failed CHECK: code 999 and what differs from what ADD
// made (the runtime names the plugin).
func CheckErr(format string, args ...any) error {
	return spec.Errorf(spec.ErrInternal, "CHECK: "+format, args...)
}

// CheckPrev starts a CHECK: it runs the CHECK of the IPAM plugin
// ipamType ("" for none) first, as the reference plugins do, and returns
// the prevResult to compare against (none is code 7).
func (a *CmdArgs) CheckPrev(ipamType string) (*spec.Result, error) {
	if err := DelegateIPAM(a, spec.CmdCheck, ipamType); err != nil {
		return nil, err
	}
	if a.Conf.PrevResult == nil {
		return nil, spec.Errorf(spec.ErrInvalidNetworkConfig, "CHECK requires \"prevResult\"")
	}
	return a.Conf.PrevResult, nil
}
