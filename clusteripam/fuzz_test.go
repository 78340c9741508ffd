package clusteripam

import (
	"testing"

	"github.com/patchbay-cni/patchbay/spec"
)

// ParseConfig never panics; it fails with a CNI error of code 4, 6 or 7,
// or returns ranges whose candidates are all usable addresses.
func FuzzParseConfig(f *testing.F) {
	for _, s := range []string{
		`{"cniVersion":"1.0.0","name":"n","ipam":{"type":"cluster-ipam","range":"192.168.2.225/28","exclude":["192.168.2.229/30"]}}`,
		`{"cniVersion":"0.2.0","name":"n","ipam":{"range":"10.0.0.10-10.0.0.20/24","gateway":"10.0.0.1","range_end":"10.0.0.15"}}`,
		`{"cniVersion":"1.1.0","name":"n","ipam":{"ipRanges":[{"range":"fd00::/64","exclude":["fd00::1"]},{"range":"10.1.0.0/31"}],"network_name":"x","enable_overlapping_ranges":false},"runtimeConfig":{"ips":["fd00::5"]}}`,
		`{"name":"n","ipam":{"range":"10.0.0.0/24","addresses":[{"address":"10.0.0.5/24","gateway":"10.0.0.1"}],"routes":[{"dst":"0.0.0.0/0"}]},"args":{"cni":{"ipam-claim-reference":"c"}}}`,
		`{"ipam":{"range":"::ffff:10.0.0.0/120"}}`,
	} {
		f.Add(s, "K8S_POD_NAMESPACE=ns;IP=10.0.0.7")
	}
	f.Fuzz(func(t *testing.T, stdin, args string) {
		c, err := ParseConfig([]byte(stdin), args, files{}.read)
		if err != nil {
			ce := spec.AsError(err, 0)
			if ce.Code != spec.ErrInvalidNetworkConfig && ce.Code != spec.ErrDecodingFailure && ce.Code != spec.ErrInvalidEnvironment && ce.Code != spec.ErrUnsupportedField {
				t.Fatalf("error code %d: %v", ce.Code, err)
			}
			return
		}
		if len(c.Ranges) == 0 {
			t.Fatal("no ranges and no error")
		}
		for _, r := range c.Ranges {
			if r.End.Less(r.Start) || r.UsableCount().Sign() <= 0 || !r.Prefix.Contains(r.Start) || !r.Prefix.Contains(r.End) {
				t.Fatalf("bad range %+v", r)
			}
			for _, seed := range [][]byte{{0}, {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, []byte(stdin)} {
				if a := r.Candidate(seed); !r.Usable(a) {
					t.Fatalf("candidate %s of %s not usable", a, r)
				}
			}
			_ = ObjectName(Scope(c.NetworkName, c.Overlapping, r.Prefix), r.Start)
		}
		for _, q := range c.Requested {
			if c.rangeOf(q.Addr) == nil {
				t.Fatalf("requested %s in no range", q.Addr)
			}
		}
	})
}
