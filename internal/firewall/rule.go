package firewall

import (
	"net"
	"net/netip"
)

// Family restricts a rule to one IP family. In an nftables inet table a
// rule with a family starts with "meta nfproto"; in iptables the family
// picks iptables or ip6tables.
type Family uint8

const (
	AnyFamily Family = iota
	IPv4
	IPv6
)

// FamilyOf is the family of an address.
func FamilyOf(a netip.Addr) Family {
	if a.Unmap().Is4() {
		return IPv4
	}
	return IPv6
}

func (f Family) String() string {
	switch f {
	case IPv4:
		return "IPv4"
	case IPv6:
		return "IPv6"
	}
	return "any"
}

// A Rule is one firewall rule in a backend-neutral form: its matches (all
// must hold), its verdict and its comment. Both backends render it from
// these typed values only, so nothing in a rule can be read as more than
// its field says.
type Rule struct {
	// Chain is the chain the rule goes into (for a Ruleset's Rules; rules
	// listed in a Chain go into that chain).
	Chain   Name
	Family  Family
	Match   []Match
	Verdict Verdict
	Comment Comment
	// First puts the rule at the head of its chain instead of the end.
	First bool
}

// Match is one condition of a rule. Only this package's types implement it.
type Match interface{ isMatch() }

// Addr matches the source (or, with Dst, the destination) address against
// a prefix; a full-length prefix matches one address.
type Addr struct {
	Dst    bool
	Prefix netip.Prefix
	Not    bool
}

// Iface matches the input (or, with Out, the output) interface name.
type Iface struct {
	Out  bool
	Name IfName
	Not  bool
}

// Proto is a layer 4 protocol by number, with the name iptables knows it by.
type Proto struct {
	Num  uint8
	Name string
}

// Protocols iptables and nftables both know by these names.
var (
	TCP    = Proto{6, "tcp"}
	UDP    = Proto{17, "udp"}
	SCTP   = Proto{132, "sctp"}
	ICMP   = Proto{1, "icmp"}
	ICMPv6 = Proto{58, "ipv6-icmp"}
)

// L4 matches the layer 4 protocol.
type L4 struct {
	Proto Proto
	Not   bool
}

// DPort matches one destination port of a protocol with ports.
type DPort struct {
	Proto Proto
	Port  uint16
}

// DPorts matches any of up to 15 destination ports (iptables multiport;
// the nftables backend renders only one port).
type DPorts struct {
	Proto Proto
	Ports []uint16
}

// AddrType matches the kernel's route type of the source (or destination)
// address: "LOCAL", "UNICAST"...
type AddrType struct {
	Dst  bool
	Type string
	Not  bool
}

// AddrRange matches an inclusive address range.
type AddrRange struct {
	Dst      bool
	From, To netip.Addr
	Not      bool
}

// MarkMatch matches the packet mark under a mask.
type MarkMatch struct {
	Mark Mark
	Not  bool
}

// CtState matches conntrack states ("NEW", "ESTABLISHED", "RELATED",
// "INVALID", "UNTRACKED"): any of them.
type CtState struct {
	States []string
	Not    bool
}

// CtDNAT matches connections that were destination-NATed.
type CtDNAT struct{}

// EtherSrc matches the source MAC address (bridge tables).
type EtherSrc struct{ MAC net.HardwareAddr }

func (Addr) isMatch()      {}
func (Iface) isMatch()     {}
func (L4) isMatch()        {}
func (DPort) isMatch()     {}
func (DPorts) isMatch()    {}
func (AddrType) isMatch()  {}
func (AddrRange) isMatch() {}
func (MarkMatch) isMatch() {}
func (CtState) isMatch()   {}
func (CtDNAT) isMatch()    {}
func (EtherSrc) isMatch()  {}

// Verdict is what a matching rule does. Only this package's types implement it.
type Verdict interface{ isVerdict() }

type (
	Accept     struct{}
	Drop       struct{}
	Return     struct{}
	Masquerade struct{}
	// Jump continues in Chain and comes back; Goto does not come back.
	Jump struct{ Chain Name }
	Goto struct{ Chain Name }
	// DNAT rewrites the destination.
	DNAT struct{ To netip.AddrPort }
	// SetMark sets the mark bits of Mark.Mask to Mark.Value.
	SetMark struct{ Mark Mark }
)

func (Accept) isVerdict()     {}
func (Drop) isVerdict()       {}
func (Return) isVerdict()     {}
func (Masquerade) isVerdict() {}
func (Jump) isVerdict()       {}
func (Goto) isVerdict()       {}
func (DNAT) isVerdict()       {}
func (SetMark) isVerdict()    {}
