package bandwidth

import (
	"encoding/json"
	"errors"
	"math"
	"testing"

	"github.com/patchbay-cni/patchbay/internal/link"
	"github.com/patchbay-cni/patchbay/spec"
)

// FuzzConfig: the configuration never panics; it is refused with code 7
// naming a key, or it yields tbfs the kernel takes as they are: a rate of
// at least one byte per second, a non-empty bucket whose buffer fits its
// 32 bits (or goes as bytes), and a queue that holds the bucket within 32
// bits.
func FuzzConfig(f *testing.F) {
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
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var n netConf
		if json.Unmarshal(data, &n) != nil {
			return // the SDK refuses it with code 6 before load runs
		}
		c, err := parse("fuzznet", &n)
		if err != nil {
			var ce *spec.Error
			if !errors.As(err, &ce) || ce.Code != spec.ErrInvalidNetworkConfig {
				t.Fatalf("error without code 7: %v", err)
			}
			return
		}
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
