// Package ifplugin is the shared core of the plugins that make one
// interface inside the container and address it: macvlan, ipvlan and vlan
// (a link on a "master" link) and dummy (no master). A plugin describes
// its link in a Kind; this package does the rest the same way for all of
// them: finding the master, refusing bad input before anything is
// created, creating the link straight in the container, IPAM, addresses
// and routes, taking everything back when ADD fails, and CHECK, DEL,
// STATUS and GC.
package ifplugin

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/vishvananda/netlink"

	"github.com/patchbay-cni/patchbay/internal/link"
	"github.com/patchbay-cni/patchbay/skel"
	"github.com/patchbay-cni/patchbay/spec"
)

// MasterRule is how a plugin finds its master link.
type MasterRule int

const (
	// NoMaster: the link has no parent (dummy).
	NoMaster MasterRule = iota
	// MasterRequired: "master" must be set (vlan).
	MasterRequired
	// MasterOrDefaultRoute: an empty "master" means the link of the
	// default route (macvlan).
	MasterOrDefaultRoute
	// MasterOrPrevOrDefaultRoute: an empty "master" means the one named
	// interface of prevResult when chained, else the link of the default
	// route (ipvlan).
	MasterOrPrevOrDefaultRoute
)

// AddrRule is where a plugin's addresses come from.
type AddrRule int

const (
	// IPAMRequired: "ipam" must be set (vlan, dummy).
	IPAMRequired AddrRule = iota
	// IPAMOptional: no "ipam" means layer 2 only: the interface is made
	// and set up, the result has no IPs (macvlan).
	IPAMOptional
	// IPAMOrPrevResult: without "ipam", the IPs of prevResult (chained)
	// go on the interface (ipvlan).
	IPAMOrPrevResult
)

// Kind describes one plugin's interface and what it makes of its
// configuration.
type Kind struct {
	// Type is the netlink link type ("macvlan", "ipvlan", "vlan", "dummy"),
	// also the plugin's name in messages.
	Type   string
	Master MasterRule
	Addrs  AddrRule
	// Notify sets arp_notify and ndisc_notify on the interface when it is
	// addressed (the reference macvlan and ipvlan do).
	Notify bool
	// New returns the link to create on master (nil for NoMaster), with
	// the kind's own attributes; the name, namespace and parent index are
	// filled in here.
	New func(master netlink.Link) netlink.Link
	// Verify checks the kind's own attributes of the link in CHECK (mode,
	// VLAN id, ...): an error says what differs.
	Verify func(l netlink.Link) error
	// Explain, when set, may turn the kernel's refusal to create the link
	// into a clearer error (vlan: an id already in use).
	Explain func(err error) error
}

// Conf is the configuration this package acts on; plugins decode their
// own keys and fill it in.
type Conf struct {
	IPAM            string // ipam.type
	DNS             spec.DNS
	Master          string
	MTU             int
	LinkInContainer bool
}

// Base holds the keys macvlan, ipvlan and vlan share, with the
// reference's names.
type Base struct {
	spec.NetConf
	Master          string `json:"master"`
	MTU             int    `json:"mtu"`
	LinkInContainer bool   `json:"linkInContainer,omitempty"`
}

// Conf returns the shared part of b.
func (b *Base) Conf() Conf {
	return Conf{IPAM: b.IPAM.Type, DNS: b.DNS, Master: b.Master, MTU: b.MTU, LinkInContainer: b.LinkInContainer}
}

// Invalid is a code-7 error.
func Invalid(format string, a ...any) error {
	return spec.Errorf(spec.ErrInvalidNetworkConfig, format, a...)
}

// Validate refuses what no ADD can use, without looking at the system:
// the checks every verb but DEL makes.
func (k *Kind) Validate(c Conf) error {
	if c.Master != "" {
		if k.Master == NoMaster {
			return Invalid("\"master\" value %q: a %s interface has no master", c.Master, k.Type)
		}
		if err := spec.ValidateInterfaceName(c.Master); err != nil {
			return Invalid("\"master\" value %q is not a valid interface name", c.Master)
		}
	} else if k.Master == MasterRequired {
		return Invalid("\"master\" is required: the host interface to make the %s interface on", k.Type)
	}
	if err := link.ValidateMTU(c.MTU); err != nil {
		return err
	}
	if c.LinkInContainer && k.Master == NoMaster {
		return Invalid("\"linkInContainer\" needs a master")
	}
	return nil
}

// needsIPAM refuses an ADD that would have no address configuration where
// the kind needs one.
func (k *Kind) needsIPAM(a *skel.CmdArgs, c Conf) (prevIPs bool, err error) {
	if c.IPAM != "" {
		return false, nil
	}
	switch k.Addrs {
	case IPAMOptional:
		return false, nil
	case IPAMOrPrevResult:
		if p := a.Conf.PrevResult; p != nil && len(p.IPs) > 0 {
			return true, nil
		}
		return false, Invalid("\"ipam\" is required unless the plugin is chained after one whose result has IPs")
	}
	return false, Invalid("\"ipam\" is required")
}

// master finds the master link and the namespace it is in (host, or the
// container with linkInContainer). An unusable master is code 7 naming
// the key and value.
func (k *Kind) master(a *skel.CmdArgs, c Conf, host, cont *link.NS) (*link.NS, netlink.Link, error) {
	if k.Master == NoMaster {
		return nil, nil, nil
	}
	ns := host
	if c.LinkInContainer {
		ns = cont
	}
	name := c.Master
	if name == "" && k.Master == MasterOrPrevOrDefaultRoute && a.Command == spec.CmdAdd && a.Conf.PrevResult != nil {
		p := a.Conf.PrevResult
		if len(p.Interfaces) != 1 || p.Interfaces[0].Name == "" {
			return nil, nil, Invalid("\"master\" is not set and prevResult has not exactly one named interface to take it from")
		}
		name = p.Interfaces[0].Name
	}
	if name == "" {
		l, err := ns.DefaultRouteLink()
		if err != nil {
			return nil, nil, Invalid("\"master\" is not set and %v to take it from", err)
		}
		return ns, l, nil
	}
	l, err := ns.FindLink(name)
	if err != nil {
		return nil, nil, fmt.Errorf("look up master %q in %s: %w", name, ns, err)
	}
	if l == nil {
		return nil, nil, Invalid("\"master\" value %q: no such interface in %s", name, ns)
	}
	return ns, l, nil
}

// Add is the whole ADD. Nothing is created before the input is checked;
// a failure takes back everything this ADD made.
func (k *Kind) Add(a *skel.CmdArgs, c Conf) (res *spec.Result, err error) {
	if err := k.Validate(c); err != nil {
		return nil, err
	}
	prevIPs, err := k.needsIPAM(a, c)
	if err != nil {
		return nil, err
	}
	host, cont, done, err := link.OpenForAdd(a.Netns, a.IfName)
	if err != nil {
		return nil, err
	}
	defer done()
	mns, master, err := k.master(a, c, host, cont)
	if err != nil {
		return nil, err
	}
	creator := cont
	if master != nil {
		creator = mns
		if m := master.Attrs().MTU; c.MTU > m {
			return nil, Invalid("\"mtu\" value %d is invalid: larger than the MTU %d of master %q", c.MTU, m, master.Attrs().Name)
		}
	}

	var undo link.Undo
	defer undo.Unwind(&err)
	nl := k.New(master)
	at := nl.Attrs()
	at.MTU = c.MTU
	if at.TxQLen == 0 {
		// Unset: the kernel's default (a 0 would be sent as a queue
		// length of 0).
		at.TxQLen = -1
	}
	if master != nil {
		at.ParentIndex = master.Attrs().Index
	}
	l, err := creator.AddLinkIn(cont, nl, a.IfName)
	if err != nil {
		if k.Explain != nil {
			return nil, k.Explain(err)
		}
		return nil, err
	}
	undo.Push("delete "+a.IfName, func() error { return cont.H.LinkDel(l) })
	res = &spec.Result{Interfaces: []*spec.Interface{{Name: a.IfName, Mac: l.Attrs().HardwareAddr.String(), Sandbox: a.Netns}}}

	switch {
	case c.IPAM != "":
		if err := IPAMAdd(a, c.IPAM, res, 0, &undo); err != nil {
			return nil, err
		}
	case prevIPs:
		p := a.Conf.PrevResult
		res.IPs, res.Routes, res.DNS = p.IPs, p.Routes, p.DNS
		for _, ipc := range res.IPs {
			ipc.Interface = spec.IntPtr(0)
		}
	default:
		// Layer 2 only: the interface, up, and no addresses.
		if err := cont.H.LinkSetUp(l); err != nil {
			return nil, fmt.Errorf("set %q up: %w", a.IfName, err)
		}
		return WithDNS(res, c.DNS), nil
	}
	if err := cont.ConfigureIface(l, res, 0, link.IfaceOpts{ARPNotify: k.Notify, NDiscNotify: k.Notify}); err != nil {
		return nil, err
	}
	return WithDNS(res, c.DNS), nil
}

// Check verifies what ADD made against prevResult and the configuration:
// the interface's type, MAC, MTU and state, its master (the configured
// one, in the expected namespace), the kind's own attributes, and the
// result's addresses and routes. IPAM's CHECK runs first, as in the
// reference.
func (k *Kind) Check(a *skel.CmdArgs, c Conf) error {
	if err := k.Validate(c); err != nil {
		return err
	}
	prev, idx, err := CheckStart(a, c.IPAM)
	if err != nil {
		return err
	}
	host, cont, done, err := link.OpenPair(a.Netns)
	if err != nil {
		return err
	}
	defer done()
	l, err := cont.CheckLink(a.IfName, link.LinkWant{Type: k.Type, MAC: prev.Interfaces[idx].Mac, MTU: c.MTU, Up: true})
	if err != nil {
		return skel.CheckErr("%v", err)
	}
	if k.Master != NoMaster {
		if err := k.checkMaster(a, c, host, cont, l); err != nil {
			return err
		}
	}
	if k.Verify != nil {
		if err := k.Verify(l); err != nil {
			return skel.CheckErr("interface %q: %v", a.IfName, err)
		}
	}
	if err := cont.CheckResult(l, prev, idx); err != nil {
		return skel.CheckErr("%v", err)
	}
	return nil
}

// checkMaster verifies l's parent: the configured master in the expected
// namespace. Without "master" (the default route's link, or a chained
// plugin's interface, both of which may have changed since ADD) the
// parent must exist in that namespace. Without "mtu" the interface cannot
// have a larger MTU than its master.
func (k *Kind) checkMaster(a *skel.CmdArgs, c Conf, host, cont *link.NS, l netlink.Link) error {
	mns := host
	if c.LinkInContainer {
		mns = cont
	}
	parent, err := cont.Parent(l, mns)
	if err != nil {
		return skel.CheckErr("%v", err)
	}
	if c.Master != "" && parent.Attrs().Name != c.Master {
		return skel.CheckErr("interface %q sits on %q, not on master %q", a.IfName, parent.Attrs().Name, c.Master)
	}
	if c.MTU == 0 && l.Attrs().MTU > parent.Attrs().MTU {
		return skel.CheckErr("interface %q MTU %d is larger than its master %q's %d", a.IfName, l.Attrs().MTU, parent.Attrs().Name, parent.Attrs().MTU)
	}
	return nil
}

// Del releases IPAM's allocation first, while the interface still exists
// (the dhcp IPAM sends its DHCPRELEASE over it), then deletes the
// interface. It needs neither a valid configuration nor the namespace: a
// namespace or interface that is gone is nothing to do. An interface of
// another type under CNI_IFNAME is not ours and stays.
func (k *Kind) Del(a *skel.CmdArgs) error {
	if err := skel.DelegateIPAM(a, spec.CmdDel, a.Conf.IPAM.Type); err != nil {
		return err
	}
	cont, err := link.OpenIfExists(a.Netns)
	if cont == nil {
		return err
	}
	defer cont.Close()
	// An ADD killed between creating the interface and renaming it left it
	// under its temporary name.
	if err := cont.DelAddLeftover(a.IfName); err != nil {
		return err
	}
	l, err := cont.FindLink(a.IfName)
	if l == nil {
		return err
	}
	if l.Type() != k.Type {
		if a.Log != nil {
			a.Log.Warn("DEL: not deleting an interface of another type", "ifname", a.IfName, "type", l.Type(), "want", k.Type)
		}
		return nil
	}
	if err := cont.H.LinkDel(l); err != nil && !link.IsNotFound(err) {
		return fmt.Errorf("delete %q: %w", a.IfName, err)
	}
	return nil
}

// Status reports whether ADD can work: IPAM's STATUS, and the master,
// when it is in the host namespace, must exist (code 50 otherwise).
func (k *Kind) Status(a *skel.CmdArgs, c Conf) error {
	if err := k.Validate(c); err != nil {
		return err
	}
	if err := skel.DelegateIPAM(a, spec.CmdStatus, c.IPAM); err != nil {
		return err
	}
	// A chained ipvlan's master comes from prevResult, and a master in the
	// container namespace is not known before ADD.
	if k.Master == NoMaster || c.LinkInContainer || (c.Master == "" && k.Master == MasterOrPrevOrDefaultRoute) {
		return nil
	}
	host, err := link.Current()
	if err != nil {
		return err
	}
	defer host.Close()
	if _, _, err := k.master(a, c, host, nil); err != nil {
		var ce *spec.Error
		if errors.As(err, &ce) && ce.Code == spec.ErrInvalidNetworkConfig {
			return spec.Errorf(spec.ErrPluginNotAvailable, "%s", ce.Msg)
		}
		return err
	}
	return nil
}

// GC passes the list of valid attachments on to IPAM, which holds the
// only state these plugins have.
func GC(a *skel.CmdArgs) error {
	return skel.DelegateIPAM(a, spec.CmdGC, a.Conf.IPAM.Type)
}

// Def defines a plugin on this core: its configuration type C, how it is
// decoded and validated (before anything is made), and what it makes.
type Def[C any] struct {
	Type, About string
	// Load decodes and validates the configuration of an ADD, CHECK or
	// STATUS (DEL and GC only decode the common keys).
	Load func(*skel.CmdArgs) (C, error)
	// Describe gives the kind of interface c makes, and the shared keys.
	Describe func(c C) (*Kind, Conf)
}

// Plugin returns the plugin d defines.
func (d Def[C]) Plugin() skel.Plugin {
	verb := func(f func(*Kind, *skel.CmdArgs, Conf) error) func(*skel.CmdArgs) error {
		return func(a *skel.CmdArgs) error {
			c, err := d.Load(a)
			if err != nil {
				return err
			}
			k, conf := d.Describe(c)
			return f(k, a, conf)
		}
	}
	return skel.Plugin{
		Type: d.Type,
		Add: func(a *skel.CmdArgs) (*spec.Result, error) {
			c, err := d.Load(a)
			if err != nil {
				return nil, err
			}
			k, conf := d.Describe(c)
			return k.Add(a, conf)
		},
		Del:    (&Kind{Type: d.Type}).Del,
		Check:  verb((*Kind).Check),
		GC:     GC,
		Status: verb((*Kind).Status),
		About:  d.About,
	}
}

// Modes maps the values of a "mode" key to the kernel's modes; the value
// "" is the default.
type Modes[M comparable] map[string]M

// Parse returns the mode named v, or a code-7 error naming the key, the
// value and the choices.
func (ms Modes[M]) Parse(typ, v string) (M, error) {
	m, ok := ms[v]
	if !ok {
		var names []string
		for k := range ms {
			if k != "" {
				names = append(names, k)
			}
		}
		sort.Strings(names)
		return m, Invalid("\"mode\" value %q is invalid: must be one of %s", v, strings.Join(names, ", "))
	}
	return m, nil
}

// Name is the name of mode m, for messages.
func (ms Modes[M]) Name(m M) string {
	for k, v := range ms {
		if v == m && k != "" {
			return k
		}
	}
	return fmt.Sprintf("mode %v", m)
}
