package hostlocal

import (
	"math/big"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/patchbay-cni/patchbay/skel"
	"github.com/patchbay-cni/patchbay/spec"
)

// check verifies the attachment holds addresses here and that every address
// of prevResult inside our ranges is one of them.
func check(a *skel.CmdArgs) error {
	c, err := loadConfig(a)
	if err != nil {
		return err
	}
	o := owner{ID: a.ContainerID, IfName: a.IfName}
	notFound := spec.Errorf(spec.ErrUnknownContainer, "no address is allocated to %s in network %q", o, c.Network)
	s, err := openStore(c.Dir, false)
	if err != nil {
		return err
	}
	if s == nil {
		return notFound
	}
	defer s.close()
	return s.withIndex(func() error {
		ips, _, err := s.verifiedAtt(o)
		if err != nil {
			return err
		}
		if len(ips) == 0 {
			if ips, _, err = s.verifiedAtt(owner{ID: o.ID}); err != nil {
				return err
			}
		}
		if len(ips) == 0 {
			return notFound
		}
		if a.Conf.PrevResult == nil {
			return nil
		}
		for _, ipc := range a.Conf.PrevResult.IPs {
			ip := ipc.Address.Addr().Unmap()
			if !inSets(c.Sets, ip) {
				continue
			}
			if !slices.Contains(ips, ip) {
				return spec.Errorf(spec.ErrInternal, "prevResult address %s is not allocated to %s in network %q (allocated: %s)", ip, o, c.Network, addrList(ips))
			}
		}
		return nil
	})
}

// gc releases every address whose attachment is not in the valid list.
// Files holding only a container ID stay while any attachment of that
// container is valid.
func gc(a *skel.CmdArgs) error {
	c, err := loadConfig(a)
	if err != nil {
		return err
	}
	s, err := openStore(c.Dir, false)
	if err != nil || s == nil {
		return err
	}
	defer s.close()
	valid := map[owner]bool{}
	validIDs := map[string]bool{}
	for _, at := range a.Conf.Attachments() {
		valid[owner{ID: at.ContainerID, IfName: at.IfName}] = true
		validIDs[at.ContainerID] = true
	}
	all, err := s.scan(true)
	if err != nil {
		return err
	}
	released := false
	for ip, o := range all {
		if valid[o] || (o.IfName == "" && validIDs[o.ID]) {
			continue
		}
		if err := s.release(ip); err != nil {
			return err
		}
		delete(all, ip)
		released = true
	}
	if released || !s.indexValid() {
		return s.rebuild(all)
	}
	return nil
}

// status reports code 50 when a range set has no free address left, since
// ADD needs one address from every set.
func status(a *skel.CmdArgs) error {
	c, err := loadConfig(a)
	if err != nil {
		return err
	}
	s, err := openStore(c.Dir, false)
	if err != nil || s == nil {
		return err
	}
	defer s.close()
	all, err := s.scan(false)
	if err != nil {
		return err
	}
	var full []string
	for idx, set := range c.Sets {
		capacity := new(big.Int)
		for i := range set {
			capacity.Add(capacity, span(set[i].Start, set[i].End))
			if set[i].contains(set[i].Gateway) {
				capacity.Sub(capacity, big.NewInt(1))
			}
		}
		used := int64(0)
		for ip := range all {
			if r := set.rangeFor(ip); r != nil && ip != r.Gateway {
				used++
			}
		}
		if capacity.Cmp(big.NewInt(used)) <= 0 {
			full = append(full, "range set "+strconv.Itoa(idx)+" ("+set.String()+")")
		}
	}
	if len(full) > 0 {
		return spec.Errorf(spec.ErrPluginNotAvailable, "network %q has no free addresses in %s", c.Network, strings.Join(full, ", "))
	}
	return nil
}

func inSets(sets []rangeSet, ip netip.Addr) bool {
	for _, s := range sets {
		if s.rangeFor(ip) != nil {
			return true
		}
	}
	return false
}

func addrList(list []netip.Addr) string {
	parts := make([]string, len(list))
	for i, a := range list {
		parts[i] = a.String()
	}
	return strings.Join(parts, ", ")
}
