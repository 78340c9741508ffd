package firewall

import (
	"fmt"
	"net"
	"slices"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
	"golang.org/x/sys/unix"
)

// The nftables renderer turns a Rule into the expressions nft itself would
// generate for the same rule text, so that rules read back from the kernel
// (ours or the reference's) compare equal to rendered ones.

// ipsDstNAT is conntrack's IPS_DST_NAT status bit (not in x/sys/unix).
const ipsDstNAT = 1 << 5

// ctStateBit is nftables' conntrack state bit of a state name.
func ctStateBit(s string) uint32 {
	switch s {
	case "INVALID":
		return 1
	case "ESTABLISHED":
		return 2
	case "RELATED":
		return 4
	case "NEW":
		return 8
	case "UNTRACKED":
		return 64
	}
	return 0
}

func cmp(op expr.CmpOp, data []byte) *expr.Cmp { return &expr.Cmp{Op: op, Register: 1, Data: data} }

func eqOp(not bool) expr.CmpOp {
	if not {
		return expr.CmpOpNeq
	}
	return expr.CmpOpEq
}

// nftExprs renders r for a table of family tf.
func nftExprs(tf nftables.TableFamily, r *Rule) ([]expr.Any, error) {
	var out []expr.Any
	if r.Family != AnyFamily && tf == nftables.TableFamilyINet {
		p := byte(unix.NFPROTO_IPV4)
		if r.Family == IPv6 {
			p = unix.NFPROTO_IPV6
		}
		out = append(out, &expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1}, cmp(expr.CmpOpEq, []byte{p}))
	}
	for _, m := range r.Match {
		ex, err := nftMatch(r.Family, m)
		if err != nil {
			return nil, err
		}
		out = append(out, ex...)
	}
	v, err := nftVerdict(r.Verdict)
	if err != nil {
		return nil, err
	}
	return append(out, v...), nil
}

// addrLoad loads the source or destination address of family f.
func addrLoad(f Family, dst bool) (*expr.Payload, uint32) {
	off, n := uint32(12), uint32(4)
	if f == IPv6 {
		off, n = 8, 16
	}
	if dst {
		off += n
	}
	return &expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: n}, n
}

func nftMatch(fam Family, m Match) ([]expr.Any, error) {
	switch m := m.(type) {
	case Addr:
		if fam == AnyFamily || FamilyOf(m.Prefix.Addr()) != fam {
			return nil, fmt.Errorf("address match %s in a rule of family %s", m.Prefix, fam)
		}
		ld, n := addrLoad(fam, m.Dst)
		out := []expr.Any{ld}
		if m.Prefix.Bits() < m.Prefix.Addr().BitLen() {
			mask := net.CIDRMask(m.Prefix.Bits(), m.Prefix.Addr().BitLen())
			out = append(out, &expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: n, Mask: mask, Xor: make([]byte, n)})
		}
		return append(out, cmp(eqOp(m.Not), m.Prefix.Masked().Addr().AsSlice())), nil
	case AddrRange:
		if fam == AnyFamily || FamilyOf(m.From) != fam {
			return nil, fmt.Errorf("address range in a rule of family %s", fam)
		}
		ld, _ := addrLoad(fam, m.Dst)
		return []expr.Any{ld, &expr.Range{Op: eqOp(m.Not), Register: 1, FromData: m.From.AsSlice(), ToData: m.To.AsSlice()}}, nil
	case Iface:
		key := expr.MetaKeyIIFNAME
		if m.Out {
			key = expr.MetaKeyOIFNAME
		}
		data := []byte(m.Name.s)
		if !m.Name.prefix {
			data = make([]byte, unix.IFNAMSIZ)
			copy(data, m.Name.s)
		}
		return []expr.Any{&expr.Meta{Key: key, Register: 1}, cmp(eqOp(m.Not), data)}, nil
	case L4:
		return []expr.Any{&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1}, cmp(eqOp(m.Not), []byte{m.Proto.Num})}, nil
	case DPort:
		// tcp, udp and sctp all keep the destination port at offset 2.
		return []expr.Any{
			&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1}, cmp(expr.CmpOpEq, []byte{m.Proto.Num}),
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
			cmp(expr.CmpOpEq, binaryutil.BigEndian.PutUint16(m.Port)),
		}, nil
	case DPorts:
		if len(m.Ports) != 1 {
			return nil, fmt.Errorf("the nftables backend renders one port per rule, not %d", len(m.Ports))
		}
		return nftMatch(fam, DPort{Proto: m.Proto, Port: m.Ports[0]})
	case AddrType:
		// addrTypes lists the route types in the kernel's RTN_* order.
		t := slices.Index(addrTypes, m.Type)
		if t < 0 {
			return nil, fmt.Errorf("unknown address type %q", m.Type)
		}
		return []expr.Any{
			&expr.Fib{Register: 1, FlagSADDR: !m.Dst, FlagDADDR: m.Dst, ResultADDRTYPE: true},
			cmp(eqOp(m.Not), binaryutil.NativeEndian.PutUint32(uint32(t))),
		}, nil
	case MarkMatch:
		out := []expr.Any{&expr.Meta{Key: expr.MetaKeyMARK, Register: 1}}
		if m.Mark.Mask != 0xffffffff {
			out = append(out, &expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
				Mask: binaryutil.NativeEndian.PutUint32(m.Mark.Mask), Xor: make([]byte, 4)})
		}
		return append(out, cmp(eqOp(m.Not), binaryutil.NativeEndian.PutUint32(m.Mark.Value&m.Mark.Mask))), nil
	case CtState:
		var bits uint32
		for _, s := range m.States {
			bits |= ctStateBit(s)
		}
		op := expr.CmpOpNeq // any of the states
		if m.Not {
			op = expr.CmpOpEq
		}
		return []expr.Any{
			&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
			&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: binaryutil.NativeEndian.PutUint32(bits), Xor: make([]byte, 4)},
			cmp(op, make([]byte, 4)),
		}, nil
	case CtDNAT:
		return []expr.Any{
			&expr.Ct{Register: 1, Key: expr.CtKeySTATUS},
			&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: binaryutil.NativeEndian.PutUint32(ipsDstNAT), Xor: make([]byte, 4)},
			cmp(expr.CmpOpNeq, make([]byte, 4)),
		}, nil
	case EtherSrc:
		if len(m.MAC) != 6 {
			return nil, fmt.Errorf("MAC address %s is not 6 bytes", m.MAC)
		}
		return []expr.Any{
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseLLHeader, Offset: 6, Len: 6},
			cmp(expr.CmpOpEq, []byte(m.MAC)),
		}, nil
	}
	return nil, fmt.Errorf("match %T is not supported by the nftables backend", m)
}

func nftVerdict(v Verdict) ([]expr.Any, error) {
	switch v := v.(type) {
	case Accept:
		return []expr.Any{&expr.Verdict{Kind: expr.VerdictAccept}}, nil
	case Drop:
		return []expr.Any{&expr.Verdict{Kind: expr.VerdictDrop}}, nil
	case Return:
		return []expr.Any{&expr.Verdict{Kind: expr.VerdictReturn}}, nil
	case Jump:
		return []expr.Any{&expr.Verdict{Kind: expr.VerdictJump, Chain: v.Chain.s}}, nil
	case Goto:
		return []expr.Any{&expr.Verdict{Kind: expr.VerdictGoto, Chain: v.Chain.s}}, nil
	case Masquerade:
		return []expr.Any{&expr.Masq{}}, nil
	case DNAT:
		a := v.To.Addr()
		fam := uint32(unix.NFPROTO_IPV4)
		if a.Is6() {
			fam = unix.NFPROTO_IPV6
		}
		return []expr.Any{
			&expr.Immediate{Register: 1, Data: a.AsSlice()},
			&expr.Immediate{Register: 2, Data: binaryutil.BigEndian.PutUint16(v.To.Port())},
			&expr.NAT{Type: expr.NATTypeDestNAT, Family: fam, RegAddrMin: 1, RegAddrMax: 1, RegProtoMin: 2, RegProtoMax: 2, Specified: true},
		}, nil
	case SetMark:
		// meta mark set meta mark & ~mask | value
		return []expr.Any{
			&expr.Meta{Key: expr.MetaKeyMARK, Register: 1},
			&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
				Mask: binaryutil.NativeEndian.PutUint32(^v.Mark.Mask), Xor: binaryutil.NativeEndian.PutUint32(v.Mark.Value & v.Mark.Mask)},
			&expr.Meta{Key: expr.MetaKeyMARK, SourceRegister: true, Register: 1},
		}, nil
	case nil:
		return nil, nil
	}
	return nil, fmt.Errorf("verdict %T is not supported by the nftables backend", v)
}

// commentData is a comment as nftables rule user data (nil for none).
func commentData(c Comment) []byte {
	if c.IsZero() {
		return nil
	}
	return userdata.AppendString(nil, userdata.TypeComment, c.s)
}

// ruleComment reads a rule's comment back.
func ruleComment(r *nftables.Rule) string {
	s, _ := userdata.GetString(r.UserData, userdata.TypeComment)
	return s
}
