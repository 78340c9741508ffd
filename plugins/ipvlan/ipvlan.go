// Package ipvlan is the ipvlan plugin: it makes an ipvlan interface on a
// host ("master") interface straight inside the container, sharing the
// master's MAC address, and addresses it from IPAM or, chained, from the
// previous plugin's result.
package ipvlan

import (
	"fmt"

	"github.com/vishvananda/netlink"

	"github.com/patchbay-cni/patchbay/internal/ifplugin"
	"github.com/patchbay-cni/patchbay/skel"
	"github.com/patchbay-cni/patchbay/spec"
)

// Plugin returns the ipvlan plugin.
func Plugin() skel.Plugin {
	return skel.Plugin{
		Type:   "ipvlan",
		Add:    add,
		Del:    kind(nil).Del,
		Check:  check,
		GC:     ifplugin.GC,
		Status: status,
		About:  "patchbay ipvlan plugin: an ipvlan interface on a host interface, inside the container",
	}
}

// Config is the ipvlan plugin's configuration; keys and defaults follow
// the reference ipvlan plugin v1.9.1.
type Config struct {
	ifplugin.Base
	Mode string `json:"mode"`

	mode netlink.IPVlanMode
}

// modes maps the "mode" key to the kernel's ipvlan modes; "" is l2.
var modes = map[string]netlink.IPVlanMode{
	"":    netlink.IPVLAN_MODE_L2,
	"l2":  netlink.IPVLAN_MODE_L2,
	"l3":  netlink.IPVLAN_MODE_L3,
	"l3s": netlink.IPVLAN_MODE_L3S,
}

func modeName(m netlink.IPVlanMode) string {
	for k, v := range modes {
		if v == m && k != "" {
			return k
		}
	}
	return fmt.Sprintf("mode %d", m)
}

func load(a *skel.CmdArgs) (*Config, error) {
	c := &Config{}
	if err := a.DecodeConf(c); err != nil {
		return nil, err
	}
	m, ok := modes[c.Mode]
	if !ok {
		return nil, ifplugin.Invalid("ipvlan: \"mode\" value %q is invalid: must be l2, l3 or l3s", c.Mode)
	}
	c.mode = m
	return c, nil
}

// kind describes the ipvlan interface of c (nil: for DEL).
func kind(c *Config) *ifplugin.Kind {
	k := &ifplugin.Kind{Type: "ipvlan", Master: ifplugin.MasterOrPrevOrDefaultRoute, Addrs: ifplugin.IPAMOrPrevResult, Notify: true}
	if c == nil {
		return k
	}
	k.New = func(netlink.Link) netlink.Link { return &netlink.IPVlan{Mode: c.mode} }
	k.Verify = func(l netlink.Link) error {
		if m := l.(*netlink.IPVlan).Mode; m != c.mode {
			return fmt.Errorf("mode is %s, config says %s", modeName(m), modeName(c.mode))
		}
		return nil
	}
	return k
}

func add(a *skel.CmdArgs) (*spec.Result, error) {
	c, err := load(a)
	if err != nil {
		return nil, err
	}
	return kind(c).Add(a, c.Conf())
}

func check(a *skel.CmdArgs) error {
	c, err := load(a)
	if err != nil {
		return err
	}
	return kind(c).Check(a, c.Conf())
}

func status(a *skel.CmdArgs) error {
	c, err := load(a)
	if err != nil {
		return err
	}
	return kind(c).Status(a, c.Conf())
}
