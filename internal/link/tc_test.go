package link

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/patchbay-cni/patchbay/internal/testutil"
)

// rootTbf reads l's root tbf back from the kernel.
func rootTbf(t *testing.T, n *NS, l netlink.Link) *netlink.Tbf {
	t.Helper()
	qs, err := n.QdiscList(l)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range qs {
		if tb, ok := q.(*netlink.Tbf); ok && q.Attrs().Parent == netlink.HANDLE_ROOT && q.Attrs().Handle == netlink.MakeHandle(1, 0) {
			return tb
		}
	}
	t.Fatalf("no root tbf 1: on %s: %v", l.Attrs().Name, qs)
	return nil
}

// ReplaceTbf sets a root tbf in ticks or, with Burst, in bytes (its own
// request carrying TCA_TBF_BURST); the kernel then reports the buffer
// KernelTbfTicks predicts, for rates on both sides of 32 bits and buckets
// beyond 32 bits of ticks.
func TestReplaceTbf(t *testing.T) {
	ns, path := testutil.NewNS(t, "ltbf")
	mustIP(t, ns, "link", "add", "tb0", "type", "veth", "peer", "name", "tb1")
	n, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	l, err := n.LinkByName("tb0")
	if err != nil {
		t.Fatal(err)
	}
	idx := l.Attrs().Index
	if err := n.ReplaceTbf(Tbf{LinkIndex: idx, Rate: 125000, Limit: 103125, Buffer: 12500000}); err != nil {
		t.Fatal(err)
	}
	if tb := rootTbf(t, n, l); tb.Rate != 125000 || tb.Limit != 103125 || tb.Buffer != 12500000 {
		t.Errorf("ticks: got rate %d limit %d buffer %d", tb.Rate, tb.Limit, tb.Buffer)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	cases := [][2]uint64{{125000, 268435455}, {1, 1}, {1, math.MaxUint32 - 1}, {5e9, 1e7}, {math.MaxUint32, 1500}, {1 << 40, math.MaxUint32 - 1}}
	for range 40 {
		cases = append(cases, [2]uint64{1 + rng.Uint64N(1<<rng.UintN(42)), 1 + rng.Uint64N(math.MaxUint32-1)})
	}
	for _, c := range cases {
		rate, burst := c[0], uint32(c[1])
		if err := n.ReplaceTbf(Tbf{LinkIndex: idx, Rate: rate, Limit: burst + 1000, Burst: burst}); err != nil {
			t.Fatalf("rate %d burst %d: %v", rate, burst, err)
		}
		tb := rootTbf(t, n, l)
		if tb.Rate != rate || tb.Limit != burst+1000 || tb.Buffer != KernelTbfTicks(rate, burst) {
			t.Errorf("rate %d burst %d: kernel reports rate %d limit %d buffer %d; KernelTbfTicks says %d",
				rate, burst, tb.Rate, tb.Limit, tb.Buffer, KernelTbfTicks(rate, burst))
		}
	}
}

// The dump helpers list what is there.
func TestDumps(t *testing.T) {
	ns, path := testutil.NewNS(t, "ldmp")
	mustIP(t, ns, "link", "add", "dm0", "type", "veth", "peer", "name", "dm1")
	mustIP(t, ns, "rule", "add", "from", "10.9.9.9", "table", "123")
	n, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	ls, err := n.LinkList()
	if err != nil || len(ls) != 3 {
		t.Errorf("LinkList: %d links, %v", len(ls), err)
	}
	rs, err := n.RuleList(netlink.FAMILY_V4)
	found := false
	for _, r := range rs {
		found = found || r.Table == 123 && r.Src != nil && r.Src.String() == "10.9.9.9/32"
	}
	if err != nil || !found {
		t.Errorf("RuleList: %v %v", rs, err)
	}
	l, _ := n.LinkByName("dm0")
	if err := n.H.QdiscAdd(&netlink.Ingress{QdiscAttrs: netlink.QdiscAttrs{LinkIndex: l.Attrs().Index, Handle: netlink.MakeHandle(0xffff, 0), Parent: netlink.HANDLE_INGRESS}}); err != nil {
		t.Fatal(err)
	}
	if err := n.H.FilterAdd(&netlink.U32{FilterAttrs: netlink.FilterAttrs{LinkIndex: l.Attrs().Index, Parent: netlink.MakeHandle(0xffff, 0), Priority: 1, Protocol: 3}}); err != nil {
		t.Fatal(err)
	}
	qs, err := n.QdiscList(l)
	ingress := false
	for _, q := range qs {
		_, ok := q.(*netlink.Ingress)
		ingress = ingress || ok
	}
	if err != nil || !ingress {
		t.Errorf("QdiscList: %v %v", qs, err)
	}
	fs, err := n.FilterList(l, netlink.MakeHandle(0xffff, 0))
	if err != nil || len(fs) == 0 {
		t.Errorf("FilterList: %v %v", fs, err)
	}
}
