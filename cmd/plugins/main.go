// Command patchbay-plugins is the multi-call binary holding every Patchbay
// plugin. It is installed once and linked under each plugin's type name
// (bin/loopback, bin/bridge, ...); the name it is run as picks the plugin.
// One binary keeps the footprint small and lets a plugin run its IPAM
// delegate in-process (see skel.Delegate).
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/patchbay-cni/patchbay/plugins/bandwidth"
	"github.com/patchbay-cni/patchbay/plugins/bridge"
	"github.com/patchbay-cni/patchbay/plugins/dhcp"
	"github.com/patchbay-cni/patchbay/plugins/dummy"
	"github.com/patchbay-cni/patchbay/plugins/firewall"
	"github.com/patchbay-cni/patchbay/plugins/hostdevice"
	"github.com/patchbay-cni/patchbay/plugins/hostlocal"
	"github.com/patchbay-cni/patchbay/plugins/ipvlan"
	"github.com/patchbay-cni/patchbay/plugins/loopback"
	"github.com/patchbay-cni/patchbay/plugins/macvlan"
	"github.com/patchbay-cni/patchbay/plugins/portmap"
	"github.com/patchbay-cni/patchbay/plugins/ptp"
	"github.com/patchbay-cni/patchbay/plugins/sbr"
	"github.com/patchbay-cni/patchbay/plugins/static"
	"github.com/patchbay-cni/patchbay/plugins/tap"
	"github.com/patchbay-cni/patchbay/plugins/tuning"
	"github.com/patchbay-cni/patchbay/plugins/vlan"
	"github.com/patchbay-cni/patchbay/plugins/vrf"
	"github.com/patchbay-cni/patchbay/skel"
)

// plugins lists every plugin linked into this binary. Keep it sorted by type.
var plugins = []skel.Plugin{
	bandwidth.Plugin(),
	bridge.Plugin(),
	dhcp.Plugin(),
	dummy.Plugin(),
	firewall.Plugin(),
	hostdevice.Plugin(),
	hostlocal.Plugin(),
	ipvlan.Plugin(),
	loopback.Plugin(),
	macvlan.Plugin(),
	portmap.Plugin(),
	ptp.Plugin(),
	sbr.Plugin(),
	static.Plugin(),
	tap.Plugin(),
	tuning.Plugin(),
	vlan.Plugin(),
	vrf.Plugin(),
}

func main() {
	byType := map[string]skel.Plugin{}
	for _, p := range plugins {
		byType[p.Type] = p
		skel.Register(p)
	}
	name := filepath.Base(os.Args[0])
	if name == "dhcp" && len(os.Args) > 1 && os.Args[1] == "daemon" {
		os.Exit(dhcp.Daemon(os.Args[2:], os.Stderr))
	}
	if p, ok := byType[name]; ok {
		skel.Main(p)
	}
	// Run as itself: `patchbay-plugins types` lists the link names to create.
	if len(os.Args) == 2 && os.Args[1] == "types" {
		var types []string
		for t := range byType {
			types = append(types, t)
		}
		sort.Strings(types)
		for _, t := range types {
			fmt.Println(t)
		}
		return
	}
	fmt.Fprintf(os.Stderr, "patchbay-plugins: run me through a link named after a plugin type, or as `%s types`\n", name)
	os.Exit(2)
}
