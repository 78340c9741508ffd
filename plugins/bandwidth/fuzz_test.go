package bandwidth

import (
	"math"
	"testing"

	"github.com/patchbay-cni/patchbay/internal/link"
	"github.com/patchbay-cni/patchbay/internal/testutil"
)

// FuzzConfig: the configuration, through skel as a real invocation
// (testutil.FuzzConfig), never panics; it is refused with a configuration
// error that does not name the plugin, or it yields tbfs the kernel takes
// as they are: a rate of at least one byte per second, a non-empty bucket
// whose buffer fits its 32 bits (or goes as bytes), and a queue that holds
// the bucket within 32 bits.
func FuzzConfig(f *testing.F) {
	var seeds [][2]string
	for _, s := range []string{
		`{}`,
		`{` + bothKeys + `}`,
		`{"ingressRate":1000000,"ingressBurst":2147483647}`,
		`{"egressRate":18446744073709551615,"egressBurst":34359738352}`,
		`{"ingressRate":8,"ingressBurst":8,"egressRate":7,"egressBurst":8}`,
		`{"ingressRate":-1,"ingressBurst":1e3}`,
		`{"ingressRate":null,"runtimeConfig":{"bandwidth":{"egressRate":100000000000,"egressBurst":8}}}`,
		`{"runtimeConfig":{"bandwidth":null},"egressRate":"1","egressBurst":[1]}`,
		`{"runtimeConfig":{"bandwidth":[]}}`,
	} {
		seeds = append(seeds, [2]string{withBase(`{"cniVersion":"1.1.0","name":"fuzznet","type":"bandwidth"}`, s), ""})
	}
	testutil.FuzzConfig(f, Plugin(), seeds, load, func(t *testing.T, c *config) {
		for _, s := range []*shape{c.ingress, c.egress} {
			if s == nil {
				continue
			}
			if s.rate == 0 || s.burst == 0 || s.limit < s.burst || uint64(s.limit) > math.MaxUint32 {
				t.Fatalf("bad tbf: %+v", s)
			}
			if s.rate != s.rateBits/8 || uint64(s.burst) != s.burstBits/8 {
				t.Fatalf("units: %+v", s)
			}
			if !s.wide && s.buffer == 0 {
				t.Fatalf("empty bucket accepted: %+v", s)
			}
			tb := s.tbf(1)
			if s.wide != (tb.Burst != 0) || (s.wide && link.KernelTbfTicks(s.rate, s.burst) != s.reportedBuffer()) {
				t.Fatalf("wide bucket not sent as bytes: %+v", s)
			}
		}
	})
}

// withBase joins the keys of two JSON objects (written as text: seeds).
func withBase(base, keys string) string {
	if keys == "{}" {
		return base
	}
	return base[:len(base)-1] + "," + keys[1:]
}
