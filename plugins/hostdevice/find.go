package hostdevice

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"

	"github.com/vishvananda/netlink"

	"github.com/patchbay-cni/patchbay/internal/link"
)

// busDev names a device the kernel knows: its bus ("pci", "virtio",
// "auxiliary", ...) and its name on that bus ("0000:00:03.0", "virtio1").
type busDev struct{ bus, name string }

// find returns the host link the configuration names, looked up in host
// (the plugin's own namespace). A device that is not there is code 7,
// naming the key and value.
func find(host *link.NS, c *Config) (netlink.Link, error) {
	switch {
	case c.Device != "":
		l, err := host.FindLink(c.Device)
		if err == nil && l == nil {
			err = invalid("\"device\" value %q: no such interface in %s", c.Device, host)
		}
		return l, err
	case c.HWAddr != "":
		return byMAC(host, c.HWAddr)
	case c.KernelPath != "":
		return bySysfs(host, "kernelpath", c.KernelPath, c.KernelPath)
	case c.PCIAddr != "":
		return bySysfs(host, "pciBusID", c.PCIAddr, filepath.Join(sysBusPCI, c.PCIAddr))
	case c.auxDevice != "":
		return bySysfs(host, "deviceID", c.auxDevice, filepath.Join(sysBusAux, c.auxDevice))
	}
	return nil, invalid("no device named in the configuration")
}

// byMAC returns the link with MAC hwaddr. Links can share a MAC (a vlan
// and its parent, a bridge and a port): the one whose permanent address
// it is (the NIC) wins, else the lowest index, as in the reference.
func byMAC(host *link.NS, hwaddr string) (netlink.Link, error) {
	mac, _ := net.ParseMAC(hwaddr) // validated by load
	links, err := host.LinkList()
	if err != nil {
		return nil, err
	}
	var found netlink.Link
	for _, l := range links {
		at := l.Attrs()
		if !bytes.Equal(at.HardwareAddr, mac) {
			continue
		}
		if bytes.Equal(at.PermHWAddr, mac) {
			return l, nil
		}
		if found == nil || at.Index < found.Attrs().Index {
			found = l
		}
	}
	if found == nil {
		return nil, invalid("\"hwaddr\" value %q: no interface with this MAC address in %s", hwaddr, host)
	}
	return found, nil
}

// bySysfs returns the network device of the sysfs device at dir (a
// kernelpath, or a PCI or auxiliary device's directory).
//
// The reference lists dir/net and looks the first name up. But sysfs shows
// the network devices of the namespace it was mounted in, which need not
// be the plugin's (a runtime calling the plugin from inside another
// namespace, as every test here does), so a name read there can belong to
// a different link. Instead the links of the plugin's namespace are
// matched by the parent device the kernel reports for each
// (IFLA_PARENT_DEV_NAME and _BUS_NAME, Linux 5.14+): the device at dir, or
// a device directly under it (a virtio NIC's "virtioN" under its PCI
// function). Kernels that report no parents get the reference's lookup.
func bySysfs(host *link.NS, key, value, dir string) (netlink.Link, error) {
	want, err := sysfsDevices(dir)
	if err != nil {
		return nil, invalid("%q value %q: %v", key, value, err)
	}
	links, err := host.LinkList()
	if err != nil {
		return nil, err
	}
	var matches []netlink.Link
	parents := false
	for _, l := range links {
		at := l.Attrs()
		if at.ParentDev != "" {
			parents = true
		}
		if want[busDev{at.ParentDevBus, at.ParentDev}] {
			matches = append(matches, l)
		}
	}
	if !parents {
		return byNetDir(host, key, value, dir)
	}
	if len(matches) == 0 {
		return nil, invalid("%q value %q: the device has no network interface in %s", key, value, host)
	}
	// A device with several ports: the first by name, as the reference
	// takes the first entry of the net directory.
	sort.Slice(matches, func(i, j int) bool { return matches[i].Attrs().Name < matches[j].Attrs().Name })
	return matches[0], nil
}

// sysfsDevices returns the device at dir and the devices directly under
// it, by bus and name.
func sysfsDevices(dir string) (map[busDev]bool, error) {
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return nil, fmt.Errorf("no such device in sysfs")
	}
	out := map[busDev]bool{}
	if bus, ok := busOf(real); ok {
		out[busDev{bus, filepath.Base(real)}] = true
	}
	entries, err := os.ReadDir(real)
	if err != nil {
		return nil, fmt.Errorf("read %s: %v", real, err)
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		if bus, ok := busOf(filepath.Join(real, e.Name())); ok {
			out[busDev{bus, e.Name()}] = true
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s is not a device directory", dir)
	}
	return out, nil
}

// busOf reads a sysfs device directory's bus from its subsystem link.
func busOf(dir string) (string, bool) {
	target, err := os.Readlink(filepath.Join(dir, "subsystem"))
	if err != nil {
		return "", false
	}
	return filepath.Base(target), true
}

// byNetDir is the reference's lookup: the first name in dir/net (or, for
// a virtio device under a PCI function, dir/virtio*/net).
func byNetDir(host *link.NS, key, value, dir string) (netlink.Link, error) {
	netDirs := []string{filepath.Join(dir, "net")}
	if more, _ := filepath.Glob(filepath.Join(dir, "virtio*", "net")); len(more) > 0 {
		netDirs = append(netDirs, more...)
	}
	for _, nd := range netDirs {
		entries, err := os.ReadDir(nd)
		if err != nil || len(entries) == 0 {
			continue
		}
		l, err := host.FindLink(entries[0].Name())
		if err != nil || l != nil {
			return l, err
		}
	}
	return nil, invalid("%q value %q: the device has no network interface in %s", key, value, host)
}
