package bandwidth

import (
	"encoding/json"
	"fmt"
	"math"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/patchbay-cni/patchbay/internal/link"
)

// tbfParams reads a device's root tbf from the kernel (netlink's view:
// rate in bytes/s, limit in bytes, buffer in ticks).
func (f *fixture) tbfParams(dev string) (rate uint64, limit, buffer uint32, ok bool) {
	f.t.Helper()
	h, err := link.Open(f.hostPath)
	if err != nil {
		f.t.Fatal(err)
	}
	defer h.Close()
	l, err := h.LinkByName(dev)
	if err != nil {
		f.t.Fatalf("%s: %v", dev, err)
	}
	qs, err := h.QdiscList(l)
	if err != nil {
		f.t.Fatal(err)
	}
	for _, q := range qs {
		if t, isTbf := q.(*netlink.Tbf); isTbf && q.Attrs().Parent == netlink.HANDLE_ROOT {
			return t.Rate, t.Limit, t.Buffer, true
		}
	}
	return 0, 0, 0, false
}

// Bad input is refused with code 7 naming the key and the value, before
// anything changes in the host namespace.
func TestBadInput(t *testing.T) {
	f := newFixture(t)
	prev := f.prevResult("1.0.0")
	for _, tc := range []struct {
		keys, prev string
		mentions   []string
	}{
		{`"ingressRate":1000`, prev, []string{"ingressRate is 1000", "ingressBurst is not set"}},
		{`"egressBurst":1000`, prev, []string{"egressBurst is 1000", "egressRate is not set"}},
		{`"ingressRate":-1,"ingressBurst":800`, prev, []string{"ingressRate -1"}},
		{`"ingressRate":1.5,"ingressBurst":800`, prev, []string{"ingressRate 1.5"}},
		{`"egressRate":"8000","egressBurst":800`, prev, []string{`egressRate "8000"`}},
		{`"egressRate":8000,"egressBurst":18446744073709551616`, prev, []string{"egressBurst 18446744073709551616"}},
		{`"ingressRate":8000,"ingressBurst":34359738360`, prev, []string{"ingressBurst 34359738360 is too large", "4 GiB"}},
		{`"ingressRate":7,"ingressBurst":800`, prev, []string{"ingressRate 7 is too small"}},
		{`"egressRate":8000,"egressBurst":7`, prev, []string{"egressBurst 7 is too small"}},
		{`"ingressRate":18446744073709551615,"ingressBurst":8000`, prev, []string{"ingressRate 18446744073709551615", "ingressBurst 8000", "32-bit limit"}},
		{`"egressRate":1380000000000,"egressBurst":34359738352`, prev, []string{"egressRate 1380000000000", "32-bit limit"}},
		{`"ingressRate":10000000000,"ingressBurst":8`, prev, []string{"ingressBurst 8 is too small for ingressRate 10000000000"}},
		{`"runtimeConfig":{"bandwidth":"fast"}`, prev, []string{"runtimeConfig.bandwidth"}},
		{`"runtimeConfig":{"bandwidth":{"egressRate":-5,"egressBurst":8000}}`, prev, []string{"runtimeConfig.bandwidth.egressRate -5"}},
		{`"runtimeConfig":{"bandwidth":{"egressRate":8000}}`, prev, []string{"runtimeConfig.bandwidth.egressRate is 8000", "runtimeConfig.bandwidth.egressBurst"}},
		{bothKeys, "", []string{`"prevResult" is required`}},
		{bothKeys, `{"cniVersion":"1.0.0","interfaces":[{"name":"other0"},{"name":"eth0","sandbox":"` + f.contPath + `"}]}`, []string{"prevResult does not list", f.hostIf}},
	} {
		t.Run(tc.keys, func(t *testing.T) {
			before := f.hostState()
			out, rc := f.run("ADD", conf("1.0.0", tc.keys, tc.prev))
			expectError(t, out, rc, 7, tc.mentions...)
			if after := f.hostState(); after != before {
				t.Errorf("host state changed by a refused ADD:\nbefore:\n%s\nafter:\n%s", before, after)
			}
		})
	}
	// An interface that is no veth: the chain is wrong.
	f.ip(f.cont, "link", "add", "br9", "type", "bridge")
	out, rc := f.run("ADD", conf("1.0.0", bothKeys, prev), "CNI_IFNAME=br9")
	expectError(t, out, rc, 7, `"br9"`, "is a bridge", "veth")
	out, rc = f.run("ADD", conf("1.0.0", bothKeys, prev), "CNI_IFNAME=eth7")
	expectError(t, out, rc, 7, `"eth7" not found`)
}

// The tbf arithmetic: rates and bursts in bits become bytes, the bucket
// becomes whole microseconds and then ticks, the queue holds 25 ms at the
// rate plus the bucket — with the reference's numbers where they fit the
// kernel's fields.
func TestShapeArithmetic(t *testing.T) {
	tick := netlink.TickInUsec() // 15.625 on every kernel since 2.6.32's hrtimers
	for _, tc := range []struct {
		rate, burst uint64
		limit       uint32
		buffer      uint32
		wide        bool
	}{
		{1_000_000, 800_000, 3125 + 100_000, uint32(800_000 * tick), false},
		{8, 8, 0 + 1, uint32(1_000_000 * tick), false},
		{10_000_000, math.MaxInt32, 31250 + 268_435_455, uint32(math.Floor(214_748_364 * tick)), false}, // kubelet's "no limit" at 10 Mbit/s
		{1_000_000, math.MaxInt32, 3125 + 268_435_455, 0, true},                                         // the same at 1 Mbit/s: 2147 s, beyond 32-bit ticks
		{100_000_000_000, 8_000_000, 312_500_000 + 1_000_000, uint32(80 * tick), false},
		{1_000_000_007, 80_000, 3_125_000 + 10_000, uint32(80 * tick), false}, // rate/8 truncates: 125000000 bytes/s
	} {
		t.Run(fmt.Sprintf("%d-%d", tc.rate, tc.burst), func(t *testing.T) {
			s, err := parseShape("ingressRate", json.RawMessage(fmt.Sprint(tc.rate)), "ingressBurst", json.RawMessage(fmt.Sprint(tc.burst)))
			if err != nil {
				t.Fatal(err)
			}
			if s.rate != tc.rate/8 || s.burst != uint32(tc.burst/8) || s.limit != tc.limit || s.wide != tc.wide || (!tc.wide && s.buffer != tc.buffer) {
				t.Errorf("got rate %d burst %d limit %d buffer %d wide %v; want rate %d burst %d limit %d buffer %d wide %v",
					s.rate, s.burst, s.limit, s.buffer, s.wide, tc.rate/8, tc.burst/8, tc.limit, tc.buffer, tc.wide)
			}
		})
	}
}

// Where the reference's numbers fit the kernel's fields, the kernel ends up
// with exactly the tbf the reference makes. A bucket longer than 32 bits
// of ticks (kubelet's default burst below 7.8 Mbit/s) is wrapped by the
// reference; here the kernel gets it in bytes and CHECK expects what the
// kernel then reports.
func TestSameTbfAsReference(t *testing.T) {
	for _, tc := range []struct {
		rate, burst uint64
		wide        bool
	}{
		{1_000_000, 800_000, false},
		{10_000_000, math.MaxInt32, false},
		{123_456_789, 987_654, false},
		{40_000_000_000, 80_000_000, false}, // rate beyond 32 bits of bytes/s (TCA_TBF_RATE64)
		{1_000_000, math.MaxInt32, true},
	} {
		t.Run(fmt.Sprintf("%d-%d", tc.rate, tc.burst), func(t *testing.T) {
			t.Parallel()
			keys := fmt.Sprintf(`"ingressRate":%d,"ingressBurst":%d`, tc.rate, tc.burst)
			ours, ref := newFixture(t), newFixture(t)
			out := ours.mustRun("ADD", conf("1.0.0", keys, ours.prevResult("1.0.0")))
			if o, rc := ref.runRef("ADD", conf("1.0.0", keys, ref.prevResult("1.0.0"))); rc != 0 {
				t.Fatalf("reference ADD: %s", o)
			}
			or, ol, ob, _ := ours.tbfParams(ours.hostIf)
			rr, rl, rb, _ := ref.tbfParams(ref.hostIf)
			t.Logf("ours: rate %d limit %d buffer %d; reference: rate %d limit %d buffer %d", or, ol, ob, rr, rl, rb)
			if or != rr || ol != rl {
				t.Errorf("rate/limit differ from the reference's")
			}
			if !tc.wide && ob != rb {
				t.Errorf("buffer differs from the reference's")
			}
			if tc.wide {
				s, _ := parseShape("r", json.RawMessage(fmt.Sprint(tc.rate)), "b", json.RawMessage(fmt.Sprint(tc.burst)))
				if ob != link.KernelTbfTicks(s.rate, s.burst) {
					t.Errorf("buffer %d, want the kernel's %d for %d bytes", ob, link.KernelTbfTicks(s.rate, s.burst), s.burst)
				}
				// The report is cut to 32 bits, so it equals the reference's
				// wrapped value; the buckets differ (TestWideBurstIsWhole).
			}
			ours.mustRun("CHECK", conf("1.0.0", keys, out))
		})
	}
}
