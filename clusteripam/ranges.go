package clusteripam

import (
	"fmt"
	"math/big"
	"net/netip"
	"slices"
)

// Range is one address range of the configuration (the legacy "range" or
// one "ipRanges" entry), validated: addresses Start..End (inclusive) of
// Prefix are handed out, except those in Exclude and the gateway.
type Range struct {
	// Field names the range in messages ("ipam.range", "ipam.ipRanges[1]").
	Field string
	// Prefix is the masked CIDR ("10.1.2.0/24"); results carry its length.
	Prefix     netip.Prefix
	Start, End netip.Addr
	Exclude    []netip.Prefix // masked
	// Gateway is returned with the range's addresses and never handed out;
	// invalid when the configuration's gateway is not in Prefix.
	Gateway netip.Addr

	size   *big.Int // End - Start + 1
	usable *big.Int // size minus the excluded addresses and the gateway
}

// usableBounds are the first and last addresses whereabouts hands out in a
// prefix: not the network address, not the last one (IPv4 broadcast; IPv6
// likewise). A /31 or /32 (/127, /128) has no such addresses to skip and
// uses all of them (RFC 3021 point-to-point links).
func usableBounds(p netip.Prefix) (netip.Addr, netip.Addr) {
	first := p.Masked().Addr()
	last := lastAddr(p)
	if p.Addr().BitLen()-p.Bits() >= 2 {
		first, last = first.Next(), last.Prev()
	}
	return first, last
}

// lastAddr is the highest address of p.
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

func addrInt(a netip.Addr) *big.Int { return new(big.Int).SetBytes(a.AsSlice()) }

func intAddr(i *big.Int, v4 bool) netip.Addr {
	n := 16
	if v4 {
		n = 4
	}
	b := make([]byte, n)
	i.FillBytes(b)
	a, _ := netip.AddrFromSlice(b)
	return a
}

// finish validates the range and computes its sizes. Exclusions and the
// gateway outside Start..End are allowed (they exclude nothing); a range
// with no usable address is refused.
func (r *Range) finish() error {
	if r.End.Less(r.Start) {
		return fmt.Errorf("%s: range_end %s is before range_start %s", r.Field, r.End, r.Start)
	}
	r.size = new(big.Int).Sub(addrInt(r.End), addrInt(r.Start))
	r.size.Add(r.size, big.NewInt(1))
	excluded := new(big.Int)
	for _, iv := range r.excludedIntervals() {
		excluded.Add(excluded, new(big.Int).Sub(addrInt(iv[1]), addrInt(iv[0])))
		excluded.Add(excluded, big.NewInt(1))
	}
	r.usable = new(big.Int).Sub(r.size, excluded)
	if r.usable.Sign() <= 0 {
		return fmt.Errorf("%s: no address left to hand out in %s (%s-%s) after exclude and gateway", r.Field, r.Prefix, r.Start, r.End)
	}
	return nil
}

// excludedIntervals are the exclusions and the gateway clipped to
// Start..End, sorted and merged.
func (r *Range) excludedIntervals() [][2]netip.Addr {
	var ivs [][2]netip.Addr
	add := func(lo, hi netip.Addr) {
		if lo.Less(r.Start) {
			lo = r.Start
		}
		if r.End.Less(hi) {
			hi = r.End
		}
		if !hi.Less(lo) {
			ivs = append(ivs, [2]netip.Addr{lo, hi})
		}
	}
	for _, e := range r.Exclude {
		if e.Addr().Is4() == r.Start.Is4() {
			add(e.Masked().Addr(), lastAddr(e))
		}
	}
	if r.Gateway.IsValid() {
		add(r.Gateway, r.Gateway)
	}
	slices.SortFunc(ivs, func(a, b [2]netip.Addr) int { return a[0].Compare(b[0]) })
	var merged [][2]netip.Addr
	for _, iv := range ivs {
		if n := len(merged); n > 0 && !merged[n-1][1].Next().Less(iv[0]) {
			if merged[n-1][1].Less(iv[1]) {
				merged[n-1][1] = iv[1]
			}
			continue
		}
		merged = append(merged, iv)
	}
	return merged
}

// Contains reports whether a is in Start..End (excluded or not).
func (r *Range) Contains(a netip.Addr) bool {
	return a.Is4() == r.Start.Is4() && !a.Less(r.Start) && !r.End.Less(a)
}

// Excluded reports whether a is in an exclusion or is the gateway.
func (r *Range) Excluded(a netip.Addr) bool {
	if a == r.Gateway {
		return true
	}
	for _, e := range r.Exclude {
		if e.Contains(a) {
			return true
		}
	}
	return false
}

// Usable reports whether the allocator may hand a out dynamically.
func (r *Range) Usable(a netip.Addr) bool { return r.Contains(a) && !r.Excluded(a) }

// Requestable reports whether a may be requested explicitly (a static
// address): anywhere in the prefix except its network address, its last
// address (unless the prefix is a /31, /32, /127 or /128) and the gateway.
// Excluded addresses and addresses outside range_start..range_end may be
// requested: exclusions keep addresses out of the automatic assignment.
func (r *Range) Requestable(a netip.Addr) bool {
	first, last := usableBounds(r.Prefix)
	return a.Is4() == r.Start.Is4() && r.Prefix.Contains(a) && !a.Less(first) && !last.Less(a) && a != r.Gateway
}

// UsableCount is how many addresses the range can hand out.
func (r *Range) UsableCount() *big.Int { return new(big.Int).Set(r.usable) }

// String is "10.1.2.0/24 (10.1.2.1-10.1.2.254)", for messages.
func (r *Range) String() string {
	return fmt.Sprintf("%s (%s-%s)", r.Prefix, r.Start, r.End)
}

// Candidate maps a 128-bit seed to an address of the range uniformly, then
// moves forward past exclusions (wrapping to Start). Different seeds spread
// concurrent allocations over the range, so they rarely race for one
// address.
func (r *Range) Candidate(seed []byte) netip.Addr {
	off := new(big.Int).SetBytes(seed)
	off.Mod(off, r.size)
	a := intAddr(off.Add(off, addrInt(r.Start)), r.Start.Is4())
	return r.skipExcluded(a)
}

// skipExcluded returns a if usable, else the next usable address after it,
// wrapping around (finish guarantees there is one).
func (r *Range) skipExcluded(a netip.Addr) netip.Addr {
	ivs := r.excludedIntervals()
	for range len(ivs) + 2 {
		moved := false
		for _, iv := range ivs {
			if !a.Less(iv[0]) && !iv[1].Less(a) {
				a, moved = iv[1].Next(), true
				if !a.IsValid() || r.End.Less(a) {
					a = r.Start
				}
			}
		}
		if !moved {
			return a
		}
	}
	return a
}

// Next returns the usable address after a, wrapping around.
func (r *Range) Next(a netip.Addr) netip.Addr {
	n := a.Next()
	if !n.IsValid() || r.End.Less(n) {
		n = r.Start
	}
	return r.skipExcluded(n)
}
