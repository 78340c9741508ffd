// Package tuning is the tuning meta plugin: in a chain, it sets sysctls and
// link attributes (mac, mtu, promisc, allmulti, txQLen) of the attachment's
// interface in the container's network namespace, saves the values it
// replaced and restores them on DEL. Keys and defaults follow the reference
// tuning plugin v1.9.1; see the package README for the differences.
package tuning

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"

	"github.com/vishvananda/netlink"

	"github.com/patchbay-cni/patchbay/internal/link"
	"github.com/patchbay-cni/patchbay/internal/netns"
	"github.com/patchbay-cni/patchbay/skel"
	"github.com/patchbay-cni/patchbay/spec"
)

// Plugin returns the tuning plugin.
func Plugin() skel.Plugin {
	return skel.Plugin{
		Type:   "tuning",
		Add:    add,
		Del:    del,
		Check:  check,
		Status: func(*skel.CmdArgs) error { return nil }, // nothing to wait for
		About:  "patchbay tuning plugin: sets sysctls and link attributes of the container interface",
	}
}

func add(a *skel.CmdArgs) (*spec.Result, error) {
	c, err := load(a)
	if err != nil {
		return nil, err
	}
	if a.Conf.PrevResult == nil {
		return nil, spec.Errorf(spec.ErrInvalidNetworkConfig, "\"prevResult\" is required: tuning is a chained plugin and must follow an interface plugin")
	}
	file := backupPath(c.dataDir, a.ContainerID, a.IfName)
	cont, err := link.OpenContainer(a.Netns)
	if err == nil {
		defer cont.Close()
		// Inside: the sysctls are the container namespace's.
		err = cont.Do(func() error { return apply(a, c, cont, file) })
	}
	if err != nil {
		return nil, netns.CNIError(a.Netns, err)
	}
	return updateResult(a.Conf.PrevResult, a.IfName, c), nil
}

// apply saves what it is about to replace, then makes the changes. On a
// failure it puts back what it changed and the saved file as it was.
func apply(a *skel.CmdArgs, c *config, cont *link.NS, file string) (err error) {
	if len(c.sysctls) == 0 && !c.changesLink() {
		return nil
	}
	var l netlink.Link
	if c.changesLink() {
		if l, err = findLink(cont, a.IfName); err != nil {
			return err
		} else if l == nil {
			return spec.Errorf(spec.ErrInternal, "interface %q not found in %s", a.IfName, a.Netns)
		}
	}
	prior, hadPrior, err := readSaved(file)
	if err != nil {
		return err
	}
	// before: this ADD's replaced values (for rollback). keep: the file's
	// content, where values saved by an earlier ADD of this attachment win,
	// since they are the originals.
	before := &saved{SysCtl: map[string]string{}}
	keep := *prior
	keep.SysCtl = map[string]string{}
	for k, v := range prior.SysCtl {
		keep.SysCtl[k] = v
	}
	for _, s := range c.sysctls {
		old, err := readSysctl(s)
		if err != nil {
			return err
		}
		if err := checkWritable(s); err != nil {
			return err
		}
		before.SysCtl[s.rel] = old
		if _, ok := keep.SysCtl[s.rel]; !ok {
			keep.SysCtl[s.rel] = old
		}
	}
	if l != nil {
		st := stateOf(l)
		if c.mac != nil {
			before.Mac = st.mac.String()
		}
		if c.promisc != nil {
			before.Promisc = &st.promisc
		}
		if c.mtu != 0 {
			before.MTU = st.mtu
		}
		if c.allmulti != nil {
			before.Allmulti = &st.allmulti
		}
		if c.txQLen != nil {
			before.TxQLen = &st.txQLen
		}
		fillUnset(&keep, before)
	}
	var undo link.Undo
	defer undo.Unwind(&err)
	if err := writeSaved(file, &keep); err != nil {
		return err
	}
	undo.Push("put back the saved values file", func() error {
		if hadPrior {
			return writeSaved(file, prior)
		}
		return removeSaved(file)
	})
	undo.Push("restore the replaced values", func() error { return errors.Join(restore(cont, a.IfName, before)...) })
	return change(cont.H, l, c)
}

// fillUnset copies into dst the link values dst has not saved yet.
func fillUnset(dst, src *saved) {
	if dst.Mac == "" {
		dst.Mac = src.Mac
	}
	if dst.Promisc == nil {
		dst.Promisc = src.Promisc
	}
	if dst.MTU == 0 {
		dst.MTU = src.MTU
	}
	if dst.Allmulti == nil {
		dst.Allmulti = src.Allmulti
	}
	if dst.TxQLen == nil {
		dst.TxQLen = src.TxQLen
	}
}

func change(h *netlink.Handle, l netlink.Link, c *config) error {
	for _, s := range c.sysctls {
		if err := writeSysctl(s.rel, s.key, s.value); err != nil {
			return err
		}
	}
	if l == nil {
		return nil
	}
	steps := []struct {
		set bool
		do  func() error
	}{
		{c.mac != nil, func() error { return setMAC(h, l, c.mac) }},
		{c.promisc != nil, func() error { return setPromisc(h, l, *c.promisc) }},
		{c.mtu != 0, func() error { return setMTU(h, l, c.mtu) }},
		{c.allmulti != nil, func() error { return setAllmulti(h, l, *c.allmulti) }},
		{c.txQLen != nil, func() error { return setTxQLen(h, l, *c.txQLen) }},
	}
	for _, st := range steps {
		if st.set {
			if err := st.do(); err != nil {
				return err
			}
		}
	}
	return nil
}

// restore puts saved values back and returns what failed. A missing
// interface skips the link values and its per-interface sysctls. It runs
// inside the container namespace (for the sysctls).
func restore(cont *link.NS, ifName string, s *saved) []error {
	var errs []error
	h := cont.H
	l, err := findLink(cont, ifName)
	if err != nil {
		errs = append(errs, err)
	}
	if l != nil {
		if s.MTU != 0 {
			errs = append(errs, setMTU(h, l, s.MTU))
		}
		if s.Mac != "" {
			if mac, err := net.ParseMAC(s.Mac); err != nil {
				errs = append(errs, fmt.Errorf("saved mac %q: %w", s.Mac, err))
			} else {
				errs = append(errs, setMAC(h, l, mac))
			}
		}
		if s.Promisc != nil {
			errs = append(errs, setPromisc(h, l, *s.Promisc))
		}
		if s.Allmulti != nil {
			errs = append(errs, setAllmulti(h, l, *s.Allmulti))
		}
		if s.TxQLen != nil {
			errs = append(errs, setTxQLen(h, l, *s.TxQLen))
		}
	}
	for rel, old := range s.SysCtl {
		// The file is ours, but check its keys as strictly as the config's.
		sc, err := parseSysctl(rel, old, ifName)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if _, err := os.Stat(sc.path()); err != nil {
			continue // its interface is gone
		}
		errs = append(errs, writeSysctl(sc.rel, sc.key, old))
	}
	return nonNil(errs)
}

func nonNil(errs []error) []error {
	var out []error
	for _, e := range errs {
		if e != nil {
			out = append(out, e)
		}
	}
	return out
}

// updateResult returns prevResult with the container interface's new MAC
// (and MTU, where prevResult states one), as the spec's tuning example shows.
func updateResult(prev *spec.Result, ifName string, c *config) *spec.Result {
	res := prev.Clone()
	for _, in := range containerIfaces(res, ifName) {
		if c.mac != nil {
			in.Mac = c.mac.String()
		}
		if c.mtu != 0 && in.MTU != 0 {
			in.MTU = c.mtu
		}
	}
	return res
}

// containerIfaces picks the result entries for the attachment's interface:
// those named ifName in a sandbox, or, if no entry names a sandbox, those
// named ifName (the reference matches by name only).
func containerIfaces(r *spec.Result, ifName string) []*spec.Interface {
	var inSandbox, byName []*spec.Interface
	for _, in := range r.Interfaces {
		if in.Name != ifName {
			continue
		}
		byName = append(byName, in)
		if in.Sandbox != "" {
			inSandbox = append(inSandbox, in)
		}
	}
	if len(inSandbox) > 0 {
		return inSandbox
	}
	return byName
}

// del restores the saved values. It succeeds when there is nothing saved,
// when the namespace or interface is gone, and (like the reference) when a
// value cannot be put back, which it logs: a DEL that cannot finish would
// leave the attachment stuck.
func del(a *skel.CmdArgs) error {
	var n struct {
		DataDir string `json:"dataDir"`
	}
	if err := a.DecodeConf(&n); err != nil {
		return err
	}
	if n.DataDir == "" {
		n.DataDir = defaultDataDir
	}
	file := backupPath(n.DataDir, a.ContainerID, a.IfName)
	s, found, err := readSaved(file)
	if !found {
		return removeSaved(file) // a killed ADD's temporary
	}
	if err != nil {
		a.Log.Warn("dropping unreadable saved values", "error", err)
		return removeSaved(file)
	}
	cont, err := link.OpenIfExists(a.Netns)
	if err != nil {
		return netns.CNIError(a.Netns, err)
	}
	if cont == nil {
		return removeSaved(file) // nothing left to restore into
	}
	defer cont.Close()
	err = cont.Do(func() error {
		for _, rerr := range restore(cont, a.IfName, s) {
			a.Log.Warn("could not restore a value", "error", rerr)
		}
		return nil
	})
	if err != nil && !netns.Gone(a.Netns) {
		return netns.CNIError(a.Netns, err)
	}
	return removeSaved(file)
}

// check verifies that every configured value is in place, and that
// prevResult reports the configured MAC.
func check(a *skel.CmdArgs) error {
	c, err := load(a)
	if err != nil {
		return err
	}
	if c.mac != nil {
		for _, in := range containerIfaces(a.Conf.PrevResult, a.IfName) {
			if m, err := net.ParseMAC(in.Mac); in.Mac != "" && (err != nil || !bytes.Equal(m, c.mac)) {
				return spec.Errorf(spec.ErrInternal, "prevResult reports mac %s for %q, configured %s %s", in.Mac, a.IfName, c.macFrom, c.mac)
			}
		}
	}
	cont, err := link.OpenContainer(a.Netns)
	if err != nil {
		return netns.CNIError(a.Netns, err)
	}
	defer cont.Close()
	return netns.CNIError(a.Netns, cont.Do(func() error {
		for _, s := range c.sysctls {
			cur, err := readSysctl(s)
			if err != nil {
				return err
			}
			if !sameValue(cur, s.value) {
				return spec.Errorf(spec.ErrInternal, "sysctl %q is %q, configured %q", s.key, cur, s.value)
			}
		}
		l, err := findLink(cont, a.IfName)
		if err != nil {
			return err
		}
		if l == nil {
			return spec.Errorf(spec.ErrInternal, "interface %q not found in %s", a.IfName, a.Netns)
		}
		return compare(a.IfName, c, stateOf(l))
	}))
}

func compare(ifName string, c *config, st linkState) error {
	mismatch := func(key string, want, got any) error {
		return spec.Errorf(spec.ErrInternal, "%s of %q is %v, configured %v", key, ifName, got, want)
	}
	switch {
	case c.mac != nil && !bytes.Equal(c.mac, st.mac):
		return mismatch("mac", c.mac, st.mac)
	case c.promisc != nil && *c.promisc != st.promisc:
		return mismatch("promisc", *c.promisc, st.promisc)
	case c.mtu != 0 && c.mtu != st.mtu:
		return mismatch("mtu", c.mtu, st.mtu)
	case c.allmulti != nil && *c.allmulti != st.allmulti:
		return mismatch("allmulti", *c.allmulti, st.allmulti)
	case c.txQLen != nil && *c.txQLen != st.txQLen:
		return mismatch("txQLen", *c.txQLen, st.txQLen)
	}
	return nil
}
