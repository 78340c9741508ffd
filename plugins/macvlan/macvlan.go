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
)

// Plugin returns the macvlan plugin.
func Plugin() skel.Plugin { return def.Plugin() }

var def = ifplugin.Def[*Config]{
	Type:     "macvlan",
	About:    "patchbay macvlan plugin: a macvlan interface on a host interface, inside the container",
	Load:     load,
	Describe: describe,
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
var modes = ifplugin.Modes[netlink.MacvlanMode]{
	"":         netlink.MACVLAN_MODE_BRIDGE,
	"bridge":   netlink.MACVLAN_MODE_BRIDGE,
	"private":  netlink.MACVLAN_MODE_PRIVATE,
	"vepa":     netlink.MACVLAN_MODE_VEPA,
	"passthru": netlink.MACVLAN_MODE_PASSTHRU,
	"source":   netlink.MACVLAN_MODE_SOURCE,
}

// load decodes and validates the configuration before anything is made.
func load(a *skel.CmdArgs) (*Config, error) {
	c := &Config{}
	if err := a.DecodeConf(c); err != nil {
		return nil, err
	}
	m, err := modes.Parse("macvlan", c.Mode)
	if err != nil {
		return nil, err
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

// describe is the macvlan interface c makes.
func describe(c *Config) (*ifplugin.Kind, ifplugin.Conf) {
	k := &ifplugin.Kind{Type: "macvlan", Master: ifplugin.MasterOrDefaultRoute, Addrs: ifplugin.IPAMOptional, Notify: true}
	k.New = func(netlink.Link) netlink.Link {
		return &netlink.Macvlan{LinkAttrs: netlink.LinkAttrs{HardwareAddr: c.mac}, Mode: c.mode, BCQueueLen: c.BCQueueLen}
	}
	k.Verify = func(l netlink.Link) error {
		mv := l.(*netlink.Macvlan) // CheckLink checked the type
		if mv.Mode != c.mode {
			return fmt.Errorf("mode is %s, config says %s", modes.Name(mv.Mode), modes.Name(c.mode))
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
	return k, c.Conf()
}
