package hostlocal

import (
	"math/big"
	"net/netip"
)

// lastAddr is the highest address of p (the broadcast address for IPv4).
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	bits := p.Bits()
	for i := range b {
		for j := 0; j < 8; j++ {
			if i*8+j >= bits {
				b[i] |= 0x80 >> j
			}
		}
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// addrInt turns an address into an integer for range sizes.
func addrInt(a netip.Addr) *big.Int { return new(big.Int).SetBytes(a.AsSlice()) }

// span is the number of addresses from a to b inclusive (b >= a).
func span(a, b netip.Addr) *big.Int {
	n := new(big.Int).Sub(addrInt(b), addrInt(a))
	return n.Add(n, big.NewInt(1))
}
