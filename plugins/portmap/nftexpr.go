package portmap

import (
	"net/netip"
	"strings"

	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

var loopback4 = netip.MustParseAddr("127.0.0.1")

// ipsDstNAT is conntrack's IPS_DST_NAT status bit (not in x/sys/unix).
const ipsDstNAT = 1 << 5

func cmpEq(data []byte) *expr.Cmp {
	return &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: data}
}

// nfproto restricts an inet-table rule to one family ("ip ..." in nft).
func nfproto(v6 bool) []expr.Any {
	p := byte(unix.NFPROTO_IPV4)
	if v6 {
		p = unix.NFPROTO_IPV6
	}
	return []expr.Any{&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1}, cmpEq([]byte{p})}
}

// matchAddr matches the source or destination address against a (or the
// prefix a/bits when bits >= 0); neg inverts it.
func matchAddr(src bool, a netip.Addr, bits int, neg bool) []expr.Any {
	off := uint32(16)
	if a.Is6() {
		off = 24
	}
	if src {
		off = 12
		if a.Is6() {
			off = 8
		}
	}
	n := uint32(a.BitLen() / 8)
	out := []expr.Any{&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: n}}
	data := a.AsSlice()
	if bits >= 0 && bits < a.BitLen() {
		p := netip.PrefixFrom(a, bits).Masked()
		data = p.Addr().AsSlice()
		mask := make([]byte, n)
		for i := 0; i < bits; i++ {
			mask[i/8] |= 0x80 >> (i % 8)
		}
		out = append(out, &expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: n, Mask: mask, Xor: make([]byte, n)})
	}
	op := expr.CmpOpEq
	if neg {
		op = expr.CmpOpNeq
	}
	return append(out, &expr.Cmp{Op: op, Register: 1, Data: data})
}

var protoNum = map[string]byte{"tcp": unix.IPPROTO_TCP, "udp": unix.IPPROTO_UDP, "sctp": unix.IPPROTO_SCTP}

// matchPort is "<proto> dport <port>": tcp, udp and sctp all keep the
// destination port at offset 2 of their header.
func matchPort(proto string, port uint16) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		cmpEq([]byte{protoNum[proto]}),
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		cmpEq(binaryutil.BigEndian.PutUint16(port)),
	}
}

func dnat(to netip.Addr, port uint16) []expr.Any {
	fam := uint32(unix.NFPROTO_IPV4)
	if to.Is6() {
		fam = unix.NFPROTO_IPV6
	}
	return []expr.Any{
		&expr.Immediate{Register: 1, Data: to.AsSlice()},
		&expr.Immediate{Register: 2, Data: binaryutil.BigEndian.PutUint16(port)},
		&expr.NAT{Type: expr.NATTypeDestNAT, Family: fam, RegAddrMin: 1, RegAddrMax: 1, RegProtoMin: 2, RegProtoMax: 2, Specified: true},
	}
}

func masquerade() []expr.Any { return []expr.Any{&expr.Masq{}} }

// ctDNAT is "ct status dnat": the connection was destination-NATed.
func ctDNAT() []expr.Any {
	return []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeySTATUS},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(ipsDstNAT), Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: make([]byte, 4)},
	}
}

// jumpIfLocal is "fib daddr type local jump hostports".
func jumpIfLocal() []expr.Any {
	return []expr.Any{
		&expr.Fib{Register: 1, FlagDADDR: true, ResultADDRTYPE: true},
		cmpEq(binaryutil.NativeEndian.PutUint32(unix.RTN_LOCAL)),
		&expr.Verdict{Kind: expr.VerdictJump, Chain: nftHostports},
	}
}

// parseNftConditions understands the subset of nft match syntax that port
// mapping conditions use, since we program the kernel directly rather than
// through nft:
//
//	ip|ip6 saddr|daddr [==|!=] ADDR[/LEN]
//	[meta] iifname|oifname [==|!=] NAME
//
// Anything else is refused (code 7) naming the condition.
func parseNftConditions(conds []string, v6 bool) ([]expr.Any, error) {
	field := "conditionsV4"
	if v6 {
		field = "conditionsV6"
	}
	toks := strings.Fields(strings.Join(conds, " "))
	var out []expr.Any
	bad := func(why string) error {
		return invalid("%s %q is not supported: %s (supported: \"ip|ip6 saddr|daddr [!=] ADDR[/LEN]\", \"iifname|oifname [!=] NAME\")", field, strings.Join(conds, " "), why)
	}
	for len(toks) > 0 {
		t := toks[0]
		if t == "meta" && len(toks) > 1 {
			toks, t = toks[1:], toks[1]
		}
		neg := false
		val := func(n int) (string, bool) {
			if len(toks) > n && (toks[n] == "!=" || toks[n] == "==") {
				neg = toks[n] == "!="
				n++
			}
			if len(toks) <= n {
				return "", false
			}
			v := toks[n]
			toks = toks[n+1:]
			return v, true
		}
		switch t {
		case "ip", "ip6":
			if (t == "ip6") != v6 {
				return nil, bad("\"" + t + "\" is for the other address family")
			}
			if len(toks) < 2 || (toks[1] != "saddr" && toks[1] != "daddr") {
				return nil, bad("expected saddr or daddr after " + t)
			}
			src := toks[1] == "saddr"
			v, ok := val(2)
			if !ok {
				return nil, bad("missing address")
			}
			a, bits, err := parseAddrOrPrefix(v)
			if err != nil || a.Is6() != v6 {
				return nil, bad("bad address " + v)
			}
			out = append(out, matchAddr(src, a, bits, neg)...)
		case "iifname", "oifname":
			v, ok := val(1)
			if !ok {
				return nil, bad("missing interface name")
			}
			v = strings.Trim(v, "\"")
			if len(v) == 0 || len(v) > 15 || strings.Contains(v, "*") {
				return nil, bad("bad interface name " + v)
			}
			key := expr.MetaKeyIIFNAME
			if t == "oifname" {
				key = expr.MetaKeyOIFNAME
			}
			name := make([]byte, 16)
			copy(name, v)
			op := expr.CmpOpEq
			if neg {
				op = expr.CmpOpNeq
			}
			out = append(out, &expr.Meta{Key: key, Register: 1}, &expr.Cmp{Op: op, Register: 1, Data: name})
		default:
			return nil, bad("unknown match " + t)
		}
	}
	return out, nil
}

func parseAddrOrPrefix(s string) (netip.Addr, int, error) {
	if p, err := netip.ParsePrefix(s); err == nil {
		return p.Addr().Unmap(), p.Bits(), nil
	}
	a, err := netip.ParseAddr(s)
	return a.Unmap(), -1, err
}
