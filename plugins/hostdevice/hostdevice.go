// Package hostdevice is the host-device plugin: it moves an existing
// network device of the host into the container (renamed to CNI_IFNAME),
// addresses it from IPAM, and on DEL puts it back under its original name
// with its original MAC, MTU and up/down state.
package hostdevice

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"

	"github.com/vishvananda/netlink"

	"github.com/patchbay-cni/patchbay/internal/atomicfile"
	"github.com/patchbay-cni/patchbay/internal/ifplugin"
	"github.com/patchbay-cni/patchbay/internal/link"
	"github.com/patchbay-cni/patchbay/skel"
	"github.com/patchbay-cni/patchbay/spec"
)

// Plugin returns the host-device plugin.
func Plugin() skel.Plugin {
	return skel.Plugin{
		Type:   "host-device",
		Add:    add,
		Del:    del,
		Check:  check,
		GC:     gc,
		Status: status,
		About:  "patchbay host-device plugin: moves a host network device into the container and back",
	}
}

func add(a *skel.CmdArgs) (res *spec.Result, err error) {
	c, err := load(a)
	if err != nil {
		return nil, err
	}
	if err := c.resolveDeviceID(); err != nil {
		return nil, err
	}
	host, cont, done, err := link.OpenForAdd(a.Netns, a.IfName)
	if err != nil {
		return nil, err
	}
	defer done()

	// From here on a failure puts back what this ADD changed.
	var undo link.Undo
	defer undo.Unwind(&err)
	iface := &spec.Interface{Name: a.IfName, Sandbox: a.Netns, PciID: c.pciID}
	res = &spec.Result{Interfaces: []*spec.Interface{iface}}
	var l netlink.Link
	if !c.dpdk { // a DPDK device has no kernel interface: only its addresses are reported
		hl, err := find(host, c)
		if err != nil {
			return nil, err
		}
		if l, err = moveIn(host, cont, hl, a, c, &undo); err != nil {
			return nil, err
		}
		iface.Mac = l.Attrs().HardwareAddr.String()
	}

	if c.IPAM.Type == "" {
		if l != nil {
			if err = cont.H.LinkSetUp(l); err != nil {
				return nil, fmt.Errorf("set %q up: %w", a.IfName, err)
			}
		}
		return ifplugin.WithDNS(res, c.DNS), nil
	}
	if err = ifplugin.IPAMAdd(a, c.IPAM.Type, res, 0, &undo); err != nil {
		return nil, err
	}
	if l != nil {
		if err = cont.ConfigureIface(l, res, 0, link.IfaceOpts{}); err != nil {
			return nil, err
		}
	}
	return ifplugin.WithDNS(res, c.DNS), nil
}

// moveIn records the device's state, marks it with its name in the link
// alias and moves it into the container as CNI_IFNAME (down). The undo
// step puts it back as it was.
func moveIn(host, cont *link.NS, hl netlink.Link, a *skel.CmdArgs, c *Config, undo *link.Undo) (netlink.Link, error) {
	at := hl.Attrs()
	st := &saved{ContainerID: a.ContainerID, IfName: a.IfName, Netns: a.Netns,
		Name: at.Name, Alias: at.Alias, MAC: at.HardwareAddr.String(), MTU: at.MTU, Up: at.Flags&net.FlagUp != 0}
	if len(at.PermHWAddr) > 0 && !bytes.Equal(at.PermHWAddr, make([]byte, len(at.PermHWAddr))) {
		st.PermMAC = at.PermHWAddr.String()
	}
	if at.MasterIndex != 0 {
		if m, err := host.LinkByIndex(at.MasterIndex); err == nil {
			st.Master = m.Attrs().Name
		}
	}
	path := statePath(c.DataDir, c.Name, a.ContainerID, a.IfName)
	if err := writeState(path, st); err != nil {
		return nil, err
	}
	undo.Push("remove "+path, func() error { return removeState(path) })
	// One step puts everything back, wherever ADD stopped (putBack finds
	// the device in the container or still in the host).
	undo.Push("put "+st.Name+" back", func() error { return putBack(host, cont, st, a.IfName) })
	if at.Alias != at.Name {
		if err := host.H.LinkSetAlias(hl, at.Name); err != nil {
			return nil, fmt.Errorf("set the alias of %q: %w", at.Name, err)
		}
	}
	return host.MoveLink(hl, cont, a.IfName)
}

// putBack returns the device st describes to host under its original
// name and restores its MAC, MTU, alias, master and up state. It finds the device
//   - in the container as ifName, carrying its name in the alias (ours);
//   - in the container under the name it travelled with (ADD stopped
//     before the rename there);
//   - in the host under its name (ADD stopped before moving it);
//   - in the host under another name with its name in the alias (the
//     kernel brings a physical device back to the initial namespace, named
//     as it was in the container or "devN", when the container's namespace
//     is destroyed);
//
// and a device found nowhere was unplugged or destroyed with its namespace
// (virtual links are): nothing to do. cont may be nil (no namespace).
func putBack(host, cont *link.NS, st *saved, ifName string) error {
	if cont != nil {
		l, err := cont.FindLink(ifName)
		if err != nil {
			return err
		}
		// CNI_IFNAME in the container is the device unless its permanent
		// MAC says otherwise: ADD refused a taken name before writing the
		// record, and a record without the move (a crash) left the name free.
		if l != nil && (st.PermMAC == "" || l.Attrs().PermHWAddr.String() == st.PermMAC) {
			ml, err := cont.MoveLink(l, host, st.Name)
			if err != nil {
				return fmt.Errorf("move %q back to the host as %q: %w", ifName, st.Name, err)
			}
			return restore(host, ml, st)
		}
		// An ADD killed between the move and the rename left it in the
		// container under the name it travelled with: its own, or a
		// temporary one when that was taken there. Our alias (or its MAC)
		// tells it.
		if l == nil {
			links, err := cont.LinkList()
			if err != nil {
				return err
			}
			for _, l := range links {
				if st.isDevice(l) {
					ml, err := cont.MoveLink(l, host, st.Name)
					if err != nil {
						return fmt.Errorf("move %q back to the host as %q: %w", l.Attrs().Name, st.Name, err)
					}
					return restore(host, ml, st)
				}
			}
		}
	}
	l, err := host.FindLink(st.Name)
	if err != nil {
		return err
	}
	if l != nil && st.isDevice(l) {
		return restore(host, l, st)
	}
	links, err := host.LinkList()
	if err != nil {
		return err
	}
	for _, l := range links {
		if l.Attrs().Alias == st.Name && st.isDevice(l) {
			return restore(host, l, st)
		}
	}
	return nil
}

// isDevice tells whether l is the recorded device: its permanent MAC when
// it has one, else our alias mark or its recorded MAC.
func (st *saved) isDevice(l netlink.Link) bool {
	at := l.Attrs()
	if st.PermMAC != "" {
		return at.PermHWAddr.String() == st.PermMAC
	}
	return at.Alias == st.Name || (st.MAC != "" && at.HardwareAddr.String() == st.MAC)
}

// restore gives l (in host) the recorded name, MAC, MTU, alias and master,
// and sets it up if it was up. Only what differs is written. Without a record
// of its state (a device the reference moved: only the alias says its
// name) it stays down, as the reference leaves it.
func restore(host *link.NS, l netlink.Link, st *saved) error {
	if l.Attrs().Name != st.Name {
		if _, err := host.MoveLink(l, host, st.Name); err != nil { // a rename, down
			return err
		}
		var err error
		if l, err = host.LinkByIndex(l.Attrs().Index); err != nil {
			return fmt.Errorf("find %q after renaming it: %w", st.Name, err)
		}
	}
	at := l.Attrs()
	if st.MAC != "" && at.HardwareAddr.String() != st.MAC {
		mac, err := net.ParseMAC(st.MAC)
		if err == nil {
			err = host.H.LinkSetHardwareAddr(l, mac)
		}
		if err != nil {
			return fmt.Errorf("restore the MAC of %q to %s: %w", st.Name, st.MAC, err)
		}
	}
	if st.MTU != 0 && at.MTU != st.MTU {
		if err := host.H.LinkSetMTU(l, st.MTU); err != nil {
			return fmt.Errorf("restore the MTU of %q to %d: %w", st.Name, st.MTU, err)
		}
	}
	if at.Alias != st.Alias {
		if err := host.H.LinkSetAlias(l, st.Alias); err != nil {
			return fmt.Errorf("restore the alias of %q: %w", st.Name, err)
		}
	}
	if st.Master != "" && at.MasterIndex == 0 {
		// Back into its bridge (or bond), if that is still there.
		if m, err := host.FindLink(st.Master); err == nil && m != nil {
			if err := host.H.LinkSetMasterByIndex(l, m.Attrs().Index); err != nil {
				return fmt.Errorf("put %q back into %q: %w", st.Name, st.Master, err)
			}
		}
	}
	if st.Up && at.Flags&net.FlagUp == 0 {
		if err := host.H.LinkSetUp(l); err != nil {
			return fmt.Errorf("set %q up: %w", st.Name, err)
		}
	}
	return nil
}

// del releases the IPAM allocation while the device is still in the
// container (a DHCP lease is released over it), then puts the device
// back. It needs no namespace and tolerates every missing piece: a
// device that was unplugged, or destroyed with its namespace, is done.
func del(a *skel.CmdArgs) error {
	c, err := decode(a)
	if err != nil {
		return err
	}
	if err := skel.DelegateIPAM(a, spec.CmdDel, c.IPAM.Type); err != nil {
		return err
	}
	path := statePath(c.DataDir, c.Name, a.ContainerID, a.IfName)
	st, err := readState(path)
	if err != nil {
		return err
	}
	host, cont, done, err := link.OpenPairIfExists(a.Netns)
	if err != nil {
		return err
	}
	defer done()
	if st == nil {
		// No record: nothing of ours (but the temporary of a record whose
		// ADD was killed before the rename, before anything else), or a
		// device the reference moved, whose alias is its original name.
		if err := removeState(path); err != nil {
			return err
		}
		if cont == nil {
			return nil
		}
		l, err := cont.FindLink(a.IfName)
		if err != nil || l == nil || l.Attrs().Alias == "" {
			return err
		}
		st = &saved{Name: l.Attrs().Alias}
	}
	if err := putBack(host, cont, st, a.IfName); err != nil {
		return err
	}
	return removeState(path)
}

func check(a *skel.CmdArgs) error {
	c, err := load(a)
	if err != nil {
		return err
	}
	if err := c.resolveDeviceID(); err != nil {
		return err
	}
	prev, idx, err := ifplugin.CheckStart(a, c.IPAM.Type)
	if err != nil {
		return err
	}
	if c.dpdk {
		return nil // no kernel interface to look at; resolveDeviceID saw the userspace driver
	}
	cont, err := link.OpenContainer(a.Netns)
	if err != nil {
		return err
	}
	defer cont.Close()
	l, err := cont.CheckLink(a.IfName, link.LinkWant{MAC: prev.Interfaces[idx].Mac, Up: true})
	if err != nil {
		return skel.CheckErr("%v", err)
	}
	orig := l.Attrs().Alias
	if orig == "" {
		return skel.CheckErr("interface %q carries no original name in its alias: not a device host-device moved", a.IfName)
	}
	st, err := readState(statePath(c.DataDir, c.Name, a.ContainerID, a.IfName))
	if err != nil {
		return err
	}
	switch {
	case st != nil && st.Name != orig:
		return skel.CheckErr("interface %q is host device %q, ADD moved %q", a.IfName, orig, st.Name)
	case c.Device != "" && orig != c.Device:
		return skel.CheckErr("interface %q is host device %q, config says \"device\" %q", a.IfName, orig, c.Device)
	case c.HWAddr != "" && st != nil && !strings.EqualFold(st.MAC, c.HWAddr) && !strings.EqualFold(st.PermMAC, c.HWAddr):
		return skel.CheckErr("interface %q had MAC %s in the host, config says \"hwaddr\" %s", a.IfName, st.MAC, c.HWAddr)
	}
	if err := cont.CheckResult(l, prev, idx); err != nil {
		return skel.CheckErr("%v", err)
	}
	return nil
}

func status(a *skel.CmdArgs) error {
	c, err := load(a)
	if err != nil {
		return err
	}
	return skel.DelegateIPAM(a, spec.CmdStatus, c.IPAM.Type)
}

// gc passes GC on to IPAM and puts back every device this network moved
// for an attachment not in the valid list (its DEL never came).
func gc(a *skel.CmdArgs) error {
	c, err := decode(a)
	if err != nil {
		return err
	}
	if err := skel.DelegateIPAM(a, spec.CmdGC, c.IPAM.Type); err != nil {
		return err
	}
	// Temporaries of record writes killed before their rename (nothing
	// else had happened yet); DEL removes its own, this catches those no
	// DEL will come for.
	if err := atomicfile.RemoveTemps(filepath.Join(c.DataDir, c.Name)); err != nil {
		return spec.Errorf(spec.ErrIOFailure, "GC: %v", err)
	}
	files, err := listStates(c.DataDir, c.Name)
	if err != nil || len(files) == 0 {
		return err
	}
	valid := map[spec.Attachment]bool{}
	for _, at := range c.Attachments() {
		valid[at] = true
	}
	host, err := link.Current()
	if err != nil {
		return err
	}
	defer host.Close()
	var errs []error
	for _, f := range files {
		st, err := readState(f)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if st != nil && valid[spec.Attachment{ContainerID: st.ContainerID, IfName: st.IfName}] {
			continue
		}
		if st != nil {
			cont, err := link.OpenIfExists(st.Netns)
			if err == nil {
				err = putBack(host, cont, st, st.IfName)
				cont.Close()
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("put back %q of %s/%s: %w", st.Name, st.ContainerID, st.IfName, err))
				continue
			}
		}
		if err := removeState(f); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
