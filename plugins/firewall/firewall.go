// Package firewall is the firewall plugin: a chained plugin that lets a
// container's traffic through the host's packet filter (the reference
// firewall plugin's rules, which hosts whose FORWARD chain drops by
// default need), optionally isolates bridges from each other
// (ingressPolicy), or hands the addresses to firewalld. Backends: iptables
// (the reference's layout, through the firewall layer's iptables-restore),
// nftables (the same chains in a table of ours, over netlink) and
// firewalld (D-Bus). See README.md.
package firewall

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os/exec"
	"slices"

	fw "github.com/patchbay-cni/patchbay/internal/firewall"
	"github.com/patchbay-cni/patchbay/skel"
	"github.com/patchbay-cni/patchbay/spec"
)

// Plugin returns the firewall plugin.
func Plugin() skel.Plugin {
	return skel.Plugin{
		Type:   "firewall",
		Add:    add,
		Del:    del,
		Check:  check,
		GC:     gc,
		Status: status,
		About:  "patchbay firewall plugin: allows container traffic through the host firewall (iptables, nftables or firewalld)",
	}
}

// lockName serialises the plugin's own read-decide-write cycles: a DEL
// deciding that a bridge is unused and removing its isolation rules, against
// an ADD on that bridge installing them. Taken before the firewall layer's
// backend locks, never after. A file in the run directory (internal/rundir).
const lockName = "firewall.lock"

// state is everything needed to set up, check or remove one attachment's
// rules, from the configuration and prevResult (ADD, CHECK) or from its
// record (DEL, GC). Every string in it is validated.
type state struct {
	att     fw.Attachment
	backend string // iptables, nftables or firewalld: never ""
	admin   fw.Name
	zone    string
	policy  string
	bridge  fw.IfName // zero without an ingress policy
	ips     []netip.Addr
	comment fw.Comment // the nftables per-address rules' comment
	owner   fw.Owner   // and its owner
}

func newState(p *parsed, att fw.Attachment, backend string) (*state, error) {
	st := &state{att: att, backend: backend, admin: p.admin, zone: p.zone, policy: p.policy}
	var err error
	st.comment, st.owner, err = fw.AttachmentComment(att, what)
	return st, err
}

func (st *state) record() *record {
	return &record{ContainerID: st.att.ContainerID, IfName: st.att.IfName, Backend: st.backend, AdminChain: st.admin.String(),
		Zone: st.zone, Policy: st.policy, Bridge: st.bridge.String(), IPs: st.ips}
}

// fromRecord fills in what the record says the ADD did; a field that does
// not validate (the file was edited) keeps the configuration's value.
func (st *state) fromRecord(rec *record) {
	switch rec.Backend {
	case backendIPT, backendNFT, backendFirewalld:
		st.backend = rec.Backend
	}
	if n, err := fw.ParseChain("adminChain", rec.AdminChain); err == nil {
		st.admin = n
	}
	if rec.Zone != "" && validZone(rec.Zone) == nil {
		st.zone = rec.Zone
	}
	if rec.Bridge != "" {
		if b, err := fw.ParseIfName("bridge", rec.Bridge, 0); err == nil {
			st.bridge = b
		}
	}
	if len(st.ips) == 0 {
		for _, a := range rec.IPs {
			if a.IsValid() && !containsAddr(st.ips, a.Unmap()) {
				st.ips = append(st.ips, a.Unmap())
			}
		}
	}
}

func (st *state) want(addrs bool) *want {
	return &want{admin: st.admin, ips: st.ips, bridge: st.bridge, policy: st.policy, addrs: addrs, comment: st.comment, owner: st.owner}
}

// chooseBackend is the configured backend, or, when "backend" is absent,
// firewalld if it runs and iptables otherwise (the reference's rule) —
// nftables on a host without iptables-restore, where the reference fails.
func chooseBackend(ctx context.Context, configured string) string {
	if configured != "" {
		return configured
	}
	if firewalldRunning(ctx) {
		return backendFirewalld
	}
	if _, err := exec.LookPath("iptables-restore"); err != nil {
		return backendNFT
	}
	return backendIPT
}

func add(a *skel.CmdArgs) (*spec.Result, error) {
	p, err := parse(a.StdinData)
	if err != nil {
		return nil, err
	}
	prev := a.Conf.PrevResult
	if prev == nil {
		return nil, invalid("\"prevResult\" is missing: chain this plugin after an interface plugin (bridge, ptp, ...)")
	}
	r, err := newRequest(a, p, prev)
	if err != nil {
		return nil, err
	}
	st, err := newState(p, r.att, chooseBackend(a.Ctx, p.backend))
	if err != nil {
		return nil, err
	}
	st.ips = r.ips
	if r.bridge != "" {
		if st.bridge, err = fw.ParseIfName("prevResult.interfaces[0].name", r.bridge, 0); err != nil {
			return nil, err
		}
	}
	path := recordPath(p.dataDir, a.Conf.Name, a.ContainerID, a.IfName)
	err = fw.WithLock(a.Ctx, lockName, func() error {
		if err := writeRecord(path, st.record()); err != nil {
			return err
		}
		s := fw.NewSessionContext(a.Ctx)
		defer s.Close()
		if err := setup(a.Ctx, s, st); err != nil {
			// A refused ADD leaves nothing of itself.
			live, cerr := liveClaims(p.dataDir, map[string]bool{path: true})
			if cerr != nil {
				a.Log.Warn("ADD failed; its record stays for DEL", "err", cerr)
				return err
			}
			shared(st, live)
			if uerr := teardown(a.Ctx, s, st, dropBridge(st, live), a.Log); uerr != nil {
				a.Log.Warn("ADD failed and its cleanup too", "err", uerr)
			} else if rerr := removeRecord(path, st.record()); rerr != nil {
				a.Log.Warn("ADD failed; its record stays", "err", rerr)
			}
			return err
		}
		return nil
	})
	if err != nil {
		return nil, internal(err)
	}
	return prev, nil
}

// setup installs an attachment's rules.
func setup(ctx context.Context, s *fw.Session, st *state) error {
	switch st.backend {
	case backendNFT:
		return s.Backend(fw.NFTables).Apply(nftLayout().rulesets(st.want(true))...)
	case backendIPT:
		return s.Backend(fw.IPTables).Apply(iptLayout().rulesets(st.want(true))...)
	}
	f, err := connectFirewalld(ctx)
	if err != nil {
		return err
	}
	defer f.Close()
	for _, ip := range st.ips {
		if err := f.addSource(ctx, st.zone, source(ip)); err != nil {
			return err
		}
	}
	// The reference isolates bridges with iptables whatever the backend.
	if st.bridge.String() != "" {
		return s.Backend(fw.IPTables).Apply(iptLayout().rulesets(st.want(false))...)
	}
	return nil
}

func check(a *skel.CmdArgs) error {
	p, err := parse(a.StdinData)
	if err != nil {
		return err
	}
	prev := a.Conf.PrevResult
	if prev == nil {
		return invalid("\"prevResult\" is missing: CHECK needs it")
	}
	r, err := newRequest(a, p, prev)
	if err != nil {
		return err
	}
	st, err := newState(p, r.att, p.backend)
	if err != nil {
		return err
	}
	// The backend the ADD used, if it left a record; else as ADD chooses.
	if rec, err := readRecord(recordPath(p.dataDir, a.Conf.Name, a.ContainerID, a.IfName)); err == nil && rec != nil {
		st.fromRecord(rec)
	}
	if st.backend == "" {
		st.backend = chooseBackend(a.Ctx, "")
	}
	st.ips = r.ips
	st.bridge = fw.IfName{}
	if r.bridge != "" {
		if st.bridge, err = fw.ParseIfName("prevResult.interfaces[0].name", r.bridge, 0); err != nil {
			return err
		}
	}
	s := fw.NewSessionContext(a.Ctx)
	defer s.Close()
	if err := verify(a.Ctx, s, st); err != nil {
		return spec.Errorf(spec.ErrInternal, "%v", err)
	}
	return nil
}

// verify reports the first way the host differs from what st needs.
func verify(ctx context.Context, s *fw.Session, st *state) error {
	var l layout
	var rss []*fw.Ruleset
	switch st.backend {
	case backendNFT:
		l = nftLayout()
		rss = l.rulesets(st.want(true))
	case backendIPT:
		l = iptLayout()
		rss = l.rulesets(st.want(true))
	default:
		f, err := connectFirewalld(ctx)
		if err != nil {
			return err
		}
		defer f.Close()
		for _, ip := range st.ips {
			ok, err := f.querySource(ctx, st.zone, source(ip))
			if err != nil {
				return err
			}
			if !ok {
				return fmt.Errorf("firewalld: %s is not in zone %s", source(ip), st.zone)
			}
		}
		if st.bridge.String() == "" {
			return nil
		}
		l = iptLayout()
		rss = l.rulesets(st.want(false))
	}
	for _, rs := range rss {
		if err := s.Backend(l.kind).Check(rs); err != nil {
			return err
		}
	}
	return nil
}

func del(a *skel.CmdArgs) error {
	p, perr := parse(a.StdinData)
	if perr != nil {
		// A configuration that does not validate must not block the
		// attachment's teardown (the runtime repeats DEL until it
		// succeeds): its record says what to remove.
		a.Log.Warn("DEL: invalid configuration; removing this attachment's rules by its record", "err", perr)
		p = lenient(a.StdinData)
	}
	att := fw.Attachment{Network: a.Conf.Name, IfName: a.IfName, ContainerID: a.ContainerID}
	st, err := newState(p, att, p.backend)
	if err != nil {
		return err
	}
	path := recordPath(p.dataDir, a.Conf.Name, a.ContainerID, a.IfName)
	return fw.WithLock(a.Ctx, lockName, func() error {
		rec, err := readRecord(path)
		if err != nil {
			return err
		}
		if prev := a.Conf.PrevResult; prev != nil {
			// The addresses even when the rest does not validate.
			for _, ip := range prev.IPs {
				if ip != nil && ip.Address.IsValid() && !containsAddr(st.ips, ip.Address.Addr().Unmap()) {
					st.ips = append(st.ips, ip.Address.Addr().Unmap())
				}
			}
			if r, err := newRequest(a, p, prev); err == nil && r.bridge != "" {
				st.bridge, _ = fw.ParseIfName("bridge", r.bridge, 0)
			}
		}
		if rec != nil {
			st.fromRecord(rec)
		}
		if st.backend == "" {
			st.backend = chooseBackend(a.Ctx, "")
		}
		live, err := liveClaims(p.dataDir, map[string]bool{path: true})
		if err != nil {
			return err
		}
		shared(st, live)
		s := fw.NewSessionContext(a.Ctx)
		defer s.Close()
		if err := teardown(a.Ctx, s, st, dropBridge(st, live), a.Log); err != nil {
			return internal(err)
		}
		return removeRecord(path, rec)
	})
}

// shared leaves out of st.ips the addresses another live attachment (of
// any network) still has: the reference layout's per-address rules and
// firewalld's sources carry no owner, one serves both. (The nftables
// backend removes by owner and does not look at them.)
func shared(st *state, live *claims) {
	st.ips = slices.DeleteFunc(st.ips, func(a netip.Addr) bool { return live.addrs[a] })
}

// dropBridge reports whether the attachment's bridge isolation rules go
// with it: no other live attachment's record names the bridge.
func dropBridge(st *state, live *claims) bool {
	return st.bridge.String() != "" && !live.bridges[st.bridge.String()]
}

// teardown removes what st's ADD made; missing pieces are fine. With
// dropBridge, the bridge's isolation rules go too.
func teardown(ctx context.Context, s *fw.Session, st *state, dropBridge bool, log *slog.Logger) error {
	var bridge fw.IfName
	if dropBridge {
		bridge = st.bridge
	}
	switch st.backend {
	case backendNFT:
		return s.Backend(fw.NFTables).Remove(nftLayout().removal(fw.AnyFamily, st.admin, st.ips, st.owner, bridge))
	case backendFirewalld:
		if f, err := connectFirewalld(ctx); err != nil {
			// Without firewalld its runtime sources are gone with it.
			log.Info("firewalld is not reachable; nothing to remove there", "err", err)
		} else {
			defer f.Close()
			for _, ip := range st.ips {
				if err := f.removeSource(ctx, st.zone, source(ip)); err != nil {
					log.Warn("DEL: firewalld", "err", err)
				}
			}
		}
		if st.bridge.String() == "" {
			return nil
		}
		return iptRemove(s, st, nil, bridge)
	}
	return iptRemove(s, st, st.ips, bridge)
}

// iptRemove removes per-address rules of ips and the bridge's isolation
// rules from the families ips have (both when none are known), and prunes
// the scaffolding. A host without iptables has none of these rules.
func iptRemove(s *fw.Session, st *state, ips []netip.Addr, bridge fw.IfName) error {
	if _, err := exec.LookPath("iptables-save"); err != nil {
		return nil
	}
	fam := fw.AnyFamily
	if fams := families(st.ips); len(fams) == 1 {
		fam = fams[0]
	}
	return s.Backend(fw.IPTables).Remove(iptLayout().removal(fam, st.admin, ips, fw.Owner{}, bridge))
}

func gc(a *skel.CmdArgs) error {
	p, err := parse(a.StdinData)
	if err != nil {
		return err
	}
	valid := a.Conf.Attachments()
	keep := map[string]bool{}
	var keepAtt []fw.Attachment
	for _, v := range valid {
		keep[recordPath(p.dataDir, a.Conf.Name, v.ContainerID, v.IfName)] = true
		keepAtt = append(keepAtt, fw.Attachment{ContainerID: v.ContainerID, IfName: v.IfName})
	}
	return fw.WithLock(a.Ctx, lockName, func() error {
		recs, temps, err := networkRecords(p.dataDir, a.Conf.Name)
		if err != nil {
			return err
		}
		stale := map[string]bool{}
		for path := range recs {
			if !keep[path] {
				stale[path] = true
			}
		}
		live, err := liveClaims(p.dataDir, stale)
		if err != nil {
			return err
		}
		s := fw.NewSessionContext(a.Ctx)
		defer s.Close()
		var errs []error
		// A write a crash interrupted before its record existed: the
		// rules come after the record, so there are none.
		for _, path := range temps {
			if !keep[path] && recs[path] == nil {
				if err := removeRecord(path, nil); err != nil {
					errs = append(errs, err)
				}
			}
		}
		for path := range stale {
			rec := recs[path]
			st, err := newState(p, fw.Attachment{Network: a.Conf.Name, IfName: rec.IfName, ContainerID: rec.ContainerID}, p.backend)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			st.fromRecord(rec)
			shared(st, live)
			if st.backend == "" {
				st.backend = chooseBackend(a.Ctx, "")
			}
			if err := teardown(a.Ctx, s, st, dropBridge(st, live), a.Log); err != nil {
				errs = append(errs, err)
				continue
			}
			if err := removeRecord(path, rec); err != nil {
				errs = append(errs, err)
			}
		}
		// nftables rules carry their owner: those of attachments that
		// left no record go too.
		sel := nftLayout().removal(fw.AnyFamily, p.admin, nil, fw.NetworkOwner(a.Conf.Name, keepAtt), fw.IfName{})
		if err := s.Backend(fw.NFTables).Remove(sel); err != nil {
			errs = append(errs, err)
		}
		if err := errors.Join(errs...); err != nil {
			return internal(err)
		}
		return nil
	})
}

// status reports whether the backend ADD would use can work here.
func status(a *skel.CmdArgs) error {
	p, err := parse(a.StdinData)
	if err != nil {
		return err
	}
	switch b := chooseBackend(a.Ctx, p.backend); b {
	case backendIPT:
		for _, t := range []string{"iptables-save", "iptables-restore"} {
			if _, err := exec.LookPath(t); err != nil {
				return spec.Errorf(spec.ErrPluginNotAvailable, "backend iptables needs %s: %v", t, err)
			}
		}
	case backendFirewalld:
		if !firewalldRunning(a.Ctx) {
			return spec.Errorf(spec.ErrPluginNotAvailable, "backend firewalld: firewalld is not running on the D-Bus system bus")
		}
	}
	return nil
}

// internal keeps a *spec.Error's code, else reports code 999 (the runtime
// names the plugin and the verb).
func internal(err error) error {
	var ce *spec.Error
	if errors.As(err, &ce) {
		return err
	}
	return spec.Errorf(spec.ErrInternal, "%v", err)
}
