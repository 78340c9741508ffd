// Package macvlan is the macvlan plugin: it makes a macvlan interface on a
// host ("master") interface straight inside the container, with its own
// MAC address, and addresses it from IPAM (or leaves it layer 2 only).
package macvlan

import (
	"fmt"
	"net"

	"github.com/vishvananda/netlink"

	"github.com/patchbay-cni/patchbay/internal/ifplugin"
	"github.com/patchbay-cni/patchbay/skel"
	"github.com/patchbay-cni/patchbay/spec"
)

// Plugin returns the macvlan plugin.
func Plugin() skel.Plugin {
	return skel.Plugin{
		Type:   "macvlan",
		Add:    add,
		Del:    kind(nil).Del,
		Check:  check,
		GC:     ifplugin.GC,
		Status: status,
		About:  "patchbay macvlan plugin: a macvlan interface on a host interface, inside the container",
	}
}

// Config is the macvlan plugin's configuration; keys and defaults follow
// the reference macvlan plugin v1.9.1.
type Config struct {
	ifplugin.Base
	Mode       string `json:"mode"`
	Mac        string `json:"mac,omitempty"`
	BCQueueLen uint32 `json:"bcqueuelen,omitempty"`

	mode netlink.MacvlanMode
	mac  net.HardwareAddr // from "mac", CNI_ARGS MAC or runtimeConfig.mac (capability "mac")
}

// modes maps the "mode" key to the kernel's macvlan modes; "" is bridge.
var modes = map[string]netlink.MacvlanMode{
	"":         netlink.MACVLAN_MODE_BRIDGE,
	"bridge":   netlink.MACVLAN_MODE_BRIDGE,
	"private":  netlink.MACVLAN_MODE_PRIVATE,
	"vepa":     netlink.MACVLAN_MODE_VEPA,
	"passthru": netlink.MACVLAN_MODE_PASSTHRU,
	"source":   netlink.MACVLAN_MODE_SOURCE,
}

func modeName(m netlink.MacvlanMode) string {
	for k, v := range modes {
		if v == m && k != "" {
			return k
		}
	}
	return fmt.Sprintf("mode %d", m)
}

// load decodes and validates the configuration before anything is made.
func load(a *skel.CmdArgs) (*Config, error) {
	c := &Config{}
	if err := a.DecodeConf(c); err != nil {
		return nil, err
	}
	m, ok := modes[c.Mode]
	if !ok {
		return nil, ifplugin.Invalid("macvlan: \"mode\" value %q is invalid: must be bridge, private, vepa, passthru or source", c.Mode)
	}
	c.mode = m
	// The reference's order, lowest precedence first.
	mac, _, err := a.RequestedMAC(skel.MACKey, skel.MACCNIArgs, skel.MACRuntimeConfig)
	if err != nil {
		return nil, err
	}
	c.mac = mac
	return c, nil
}

// kind describes the macvlan interface of c (nil: for DEL, which needs no
// configuration).
func kind(c *Config) *ifplugin.Kind {
	k := &ifplugin.Kind{Type: "macvlan", Master: ifplugin.MasterOrDefaultRoute, Addrs: ifplugin.IPAMOptional, Notify: true}
	if c == nil {
		return k
	}
	k.New = func(netlink.Link) netlink.Link {
		return &netlink.Macvlan{LinkAttrs: netlink.LinkAttrs{HardwareAddr: c.mac}, Mode: c.mode, BCQueueLen: c.BCQueueLen}
	}
	k.Verify = func(l netlink.Link) error {
		mv := l.(*netlink.Macvlan) // CheckLink checked the type
		if mv.Mode != c.mode {
			return fmt.Errorf("mode is %s, config says %s", modeName(mv.Mode), modeName(c.mode))
		}
		// In passthru mode the kernel gives the interface its master's MAC.
		if c.mac != nil && c.mode != netlink.MACVLAN_MODE_PASSTHRU && mv.HardwareAddr.String() != c.mac.String() {
			return fmt.Errorf("MAC is %s, the requested MAC is %s", mv.HardwareAddr, c.mac)
		}
		if c.BCQueueLen != 0 && mv.BCQueueLen != c.BCQueueLen {
			return fmt.Errorf("bcqueuelen is %d, config says %d", mv.BCQueueLen, c.BCQueueLen)
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
