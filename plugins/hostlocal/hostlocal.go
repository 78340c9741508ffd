// Package hostlocal is the host-local IPAM plugin: it hands out addresses
// from configured ranges and records them under a data directory on the
// host, in the reference plugin's on-disk layout plus an index that keeps
// ADD and DEL cost independent of how many addresses are allocated.
package hostlocal

import (
	"net/netip"
	"slices"

	"github.com/patchbay-cni/patchbay/skel"
	"github.com/patchbay-cni/patchbay/spec"
)

// Plugin returns the host-local IPAM plugin. It keeps no state between
// invocations, so it may run many times in one process (skel.Delegate).
func Plugin() skel.Plugin {
	return skel.Plugin{
		Type:   "host-local",
		Add:    add,
		Del:    del,
		Check:  check,
		GC:     gc,
		Status: status,
		About:  "patchbay host-local IPAM plugin: allocates addresses from ranges, recorded under dataDir",
	}
}

func add(a *skel.CmdArgs) (*spec.Result, error) {
	c, err := loadConfig(a)
	if err != nil {
		return nil, err
	}
	res := &spec.Result{Routes: c.Routes}
	if c.ResolvConf != "" {
		if res.DNS, err = parseResolvConf(c.ResolvConf); err != nil {
			return nil, err
		}
	}
	s, err := openStore(c.Dir, true)
	if err != nil {
		return nil, err
	}
	defer s.close()
	o := owner{ID: a.ContainerID, IfName: a.IfName}
	err = s.withIndex(func() error {
		ips, err := allocate(s, c, o)
		if err != nil {
			return err
		}
		res.IPs = ips
		return nil
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// allocate reserves one address per range set for o, all or nothing.
func allocate(s *store, c *config, o owner) ([]*spec.IPConfig, error) {
	// The reference refuses a second address in a range set for the same
	// attachment, counting files that hold only the container ID too.
	mine, _, err := s.verifiedAtt(o)
	if err != nil {
		return nil, err
	}
	old, _, err := s.verifiedAtt(owner{ID: o.ID})
	if err != nil {
		return nil, err
	}
	existing := slices.Concat(mine, old)

	var reserved []netip.Addr
	var out []*spec.IPConfig
	fail := func(err error) ([]*spec.IPConfig, error) {
		clean := true
		for _, ip := range reserved {
			clean = s.release(ip) == nil && clean
		}
		if clean && len(reserved) > 0 {
			s.seal() // back where we started: the index still matches
		}
		return nil, err
	}
	for idx, set := range c.Sets {
		var ip netip.Addr
		var r *ipRange
		if i := slices.IndexFunc(c.Requested, func(r requestedIP) bool { return r.Set == idx }); i >= 0 {
			req := c.Requested[i]
			ip, r = req.Addr, set.rangeFor(req.Addr)
			if ip == r.Gateway {
				return fail(invalid("%s: requested IP %s is the gateway of subnet %s", req.Source(), ip, r.Subnet))
			}
			ok, err := s.reserve(ip, o)
			if err != nil {
				return fail(err)
			}
			if !ok {
				holder := "another attachment"
				if h, found, _ := s.ownerOf(ip); found {
					holder = h.String()
				}
				return fail(spec.Errorf(spec.ErrInvalidNetworkConfig, "%s: requested IP %s is already allocated to %s in range set %d (%s)", req.Source(), ip, holder, idx, set))
			}
		} else {
			for _, e := range existing {
				if set.rangeFor(e) != nil {
					return fail(spec.Errorf(spec.ErrInvalidNetworkConfig, "%s already has address %s from range set %d (%s) in network %q: duplicate allocation is not allowed", o, e, idx, set, c.Network))
				}
			}
			if ip, r, err = reserveNext(s, set, idx, o); err != nil {
				return fail(err)
			}
			if r == nil {
				return fail(spec.Errorf(spec.ErrTryAgainLater, "no IP addresses available in range set %d (%s) of network %q", idx, set, c.Network))
			}
		}
		reserved = append(reserved, ip)
		if err := s.setLastReserved(idx, ip); err != nil {
			return fail(err)
		}
		out = append(out, &spec.IPConfig{Address: netip.PrefixFrom(ip, r.Subnet.Bits()), Gateway: r.Gateway})
	}
	if err := s.putAtt(o, slices.Concat(mine, reserved)); err != nil {
		return fail(err)
	}
	s.seal()
	return out, nil
}

// reserveNext takes the first free address after the set's last reserved
// one, wrapping around once, skipping gateways (round-robin, as the
// reference does). r is nil when the set is full.
func reserveNext(s *store, set rangeSet, idx int, o owner) (netip.Addr, *ipRange, error) {
	ri, cur := 0, set[0].Start
	resume := false
	if last := s.lastReserved(idx); last.IsValid() {
		for i := range set {
			if set[i].contains(last) {
				ri, cur, resume = i, last, true
				break
			}
		}
	}
	advance := func() {
		if cur == set[ri].End {
			ri = (ri + 1) % len(set)
			cur = set[ri].Start
		} else {
			cur = cur.Next()
		}
	}
	if resume {
		advance()
	}
	firstRi, first := ri, cur
	for {
		if cur != set[ri].Gateway {
			ok, err := s.reserve(cur, o)
			if err != nil {
				return netip.Addr{}, nil, err
			}
			if ok {
				return cur, &set[ri], nil
			}
		}
		advance()
		if ri == firstRi && cur == first {
			return netip.Addr{}, nil, nil
		}
	}
}

func del(a *skel.CmdArgs) error {
	dir, err := dataDirOf(a)
	if err != nil || dir == "" {
		return err
	}
	s, err := openStore(dir, false)
	if err != nil || s == nil {
		return err // no directory: nothing was ever allocated
	}
	defer s.close()
	o := owner{ID: a.ContainerID, IfName: a.IfName}
	return s.withIndex(func() error {
		// As the reference: files holding only the container ID are
		// released when the attachment has no files of the current form.
		target := o
		ips, known, err := s.verifiedAtt(o)
		if err != nil {
			return err
		}
		if len(ips) == 0 {
			target = owner{ID: o.ID}
			var knownOld bool
			if ips, knownOld, err = s.verifiedAtt(target); err != nil {
				return err
			}
			if !knownOld {
				target = o
			}
			known = known || knownOld
		}
		if !known {
			return nil
		}
		for _, ip := range ips {
			if err := s.release(ip); err != nil {
				return err
			}
		}
		if err := s.putAtt(o, nil); err != nil {
			return err
		}
		if err := s.putAtt(target, nil); err != nil {
			return err
		}
		s.seal()
		return nil
	})
}
