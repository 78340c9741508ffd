// Package portmap is the portmap plugin: a chained plugin that forwards host
// ports to the container addresses of prevResult (DNAT from other hosts in
// PREROUTING and from the host itself in OUTPUT, hairpin and localhost
// masquerade). Its default backend is nftables over netlink; the iptables
// backend runs iptables-restore.
//
// A request without port mappings does no kernel work at all: not even a
// netlink socket is opened.
package portmap

import (
	"errors"
	"fmt"
	"os"
	"os/exec"

	"github.com/patchbay-cni/patchbay/internal/firewall"
	"github.com/patchbay-cni/patchbay/skel"
	"github.com/patchbay-cni/patchbay/spec"
)

// Plugin returns the portmap plugin.
func Plugin() skel.Plugin {
	return skel.Plugin{
		Type:  "portmap",
		Add:   add,
		Del:   del,
		Check: check,
		GC:    gc,
		About: "patchbay portmap plugin: forwards host ports to the container (nftables or iptables)",
	}
}

// rulesets are the attachment's rules in the chosen backend's layout.
func rulesets(kind firewall.Kind, r *request) []*firewall.Ruleset {
	if kind == backendIPT {
		return iptRulesets(r)
	}
	return []*firewall.Ruleset{nftRuleset(r)}
}

// selector picks the rules of the attachments owner selects.
func selector(kind firewall.Kind, owner firewall.Owner, key string) firewall.Selector {
	if kind == backendIPT {
		var chains []firewall.Name
		if key != "" {
			chains = append(chains, iptChain(key))
		}
		return iptSelector(owner, chains...)
	}
	return firewall.Selector{Table: nftTable, Owner: owner, In: nftKeyChains}
}

func add(a *skel.CmdArgs) (*spec.Result, error) {
	p, err := parse(a)
	if err != nil {
		return nil, err
	}
	prev := a.Conf.PrevResult
	if prev == nil {
		return nil, invalid("portmap must be called as a chained plugin: \"prevResult\" is missing")
	}
	r := &p.req
	if len(r.Mappings) == 0 {
		return prev, nil
	}
	if err := r.setContainer(prev, a.IfName); err != nil {
		return nil, err
	}
	fw := firewall.NewSession()
	defer fw.Close()
	if err := fw.Backend(p.backend).Apply(rulesets(p.backend, r)...); err != nil {
		return nil, internal("set up port mappings", err)
	}
	if r.ContV4.IsValid() && r.SNAT {
		// 127.0.0.1-sourced connections DNATed to the container must be
		// allowed to leave through the interface towards it.
		if err := enableRouteLocalnet(r.ContV4); err != nil {
			return nil, internal("enable route_localnet", err)
		}
	}
	// Stale UDP conntrack entries would keep sending the port elsewhere.
	if err := flushUDPConntrack(r); err != nil {
		a.Log.Warn("failed to delete stale UDP conntrack entries", "err", err)
	}
	return prev, nil
}

func del(a *skel.CmdArgs) error {
	p, err := parse(a)
	if se := (*spec.Error)(nil); errors.As(err, &se) && se.Code == spec.ErrInvalidNetworkConfig {
		return delByKey(a, err)
	}
	if err != nil {
		return err
	}
	if len(p.req.Mappings) == 0 {
		return nil
	}
	fw := firewall.NewSession()
	defer fw.Close()
	if err := fw.Backend(p.backend).Remove(selector(p.backend, firewall.Owner{Exact: p.req.Key}, p.req.Key)); err != nil {
		return internal("remove port mappings", err)
	}
	return nil
}

// delByKey is DEL for a configuration that does not validate: the
// runtime sends DEL after ADD refused it, and again while DEL fails, so
// refusing would block the attachment's teardown (the reference's DEL does
// not validate the mappings). The attachment's rules are found by its key
// alone, in both backends; iptables is looked at only where it is
// installed, and its failures are reported on stderr, not returned.
func delByKey(a *skel.CmdArgs, why error) error {
	fmt.Fprintf(os.Stderr, "portmap DEL: invalid configuration (%v); removing this attachment's rules by key\n", why)
	var name string
	if a.Conf != nil {
		name = a.Conf.Name
	}
	key := attachKey(name, a.ContainerID, a.IfName)
	owner := firewall.Owner{Exact: key}
	fw := firewall.NewSession()
	defer fw.Close()
	if _, err := exec.LookPath("iptables-save"); err == nil {
		if err := fw.Backend(backendIPT).Remove(selector(backendIPT, owner, key)); err != nil {
			fmt.Fprintf(os.Stderr, "portmap DEL: iptables: %v\n", err)
		}
	}
	if err := fw.Backend(backendNFT).Remove(selector(backendNFT, owner, key)); err != nil {
		return internal("remove port mappings", err)
	}
	return nil
}

func check(a *skel.CmdArgs) error {
	p, err := parse(a)
	if err != nil {
		return err
	}
	r := &p.req
	if len(r.Mappings) == 0 {
		return nil
	}
	prev := a.Conf.PrevResult
	if prev == nil {
		return invalid("CHECK requires \"prevResult\"")
	}
	if err := r.setContainer(prev, a.IfName); err != nil {
		return err
	}
	fw := firewall.NewSession()
	defer fw.Close()
	for _, rs := range rulesets(p.backend, r) {
		if err := fw.Backend(p.backend).Check(rs); err != nil {
			return internal("check port mappings", err)
		}
	}
	return nil
}

func gc(a *skel.CmdArgs) error {
	p, err := parse(a)
	if err != nil {
		return err
	}
	valid := map[string]bool{}
	for _, at := range a.Conf.Attachments() {
		valid[attachKey(p.c.Name, at.ContainerID, at.IfName)] = true
	}
	fw := firewall.NewSession()
	defer fw.Close()
	if err := fw.Backend(p.backend).Remove(selector(p.backend, firewall.Owner{Prefix: p.req.NetPrefix, Keep: valid}, "")); err != nil {
		return internal("garbage-collect port mappings", err)
	}
	return nil
}

// internal keeps a *spec.Error's code, else reports code 999 with context.
func internal(what string, err error) error {
	var ce *spec.Error
	if errors.As(err, &ce) {
		return err
	}
	return spec.Errorf(spec.ErrInternal, "%s: %v", what, err)
}
