package clusteripam

import (
	"encoding/json"
	"reflect"
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
		checkParsed(t, c, err, stdin)
	})
}

// checkParsed: a CNI error of code 4, 6 or 7, or ranges whose candidates
// are all usable addresses, and requested addresses inside them.
func checkParsed(t *testing.T, c *Config, err error, stdin string) {
	t.Helper()
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
}

// FuzzFlatFile: the network's ipam merged with a flat file (whereabouts'
// rule): what the ipam sets (not empty) is kept, whatever the case of the
// keys on either side; enable_overlapping_ranges never comes from the
// file; the result passes checkParsed.
func FuzzFlatFile(f *testing.F) {
	for _, s := range [][2]string{
		{`{"type":"cluster-ipam","range":"10.0.0.0/24"}`, `{"range":"10.9.0.0/16","kubernetes":{"kubeconfig":"/etc/k"},"enable_overlapping_ranges":false}`},
		{`{"type":"cluster-ipam","configuration_path":"` + FlatFiles[0] + `"}`, `{"ipRanges":[{"range":"fd00::/120"}],"gateway":"fd00::1","log_level":"debug"}`},
		{`{"Range":"10.0.0.0/24","exclude":[]}`, `{"range":"10.9.0.0/16","exclude":["10.9.0.0/30"],"ENABLE_OVERLAPPING_RANGES":false}`},
		{`{"range":"","dns":{}}`, `{"RANGE":"10.1.0.0/24","dns":{"nameservers":["10.0.0.53"]}}`},
		{`{"range":"10.0.0.0/24"}`, `[]`},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, ipam, flat string) {
		read := files{FlatFiles[0]: flat}.read
		merged, err := mergedIPAM(json.RawMessage(ipam), read)
		if err == nil {
			var own ipamConf
			if json.Unmarshal([]byte(ipam), &own) != nil {
				t.Fatal("merged an ipam that does not decode")
			}
			if (own.Overlapping == nil) != (merged.Overlapping == nil) || own.Overlapping != nil && *own.Overlapping != *merged.Overlapping {
				t.Fatalf("enable_overlapping_ranges %v taken from the flat file (the ipam's: %v)", ptr(merged.Overlapping), ptr(own.Overlapping))
			}
			keptSet(t, reflect.ValueOf(own), reflect.ValueOf(*merged), "ipam")
		}
		stdin := `{"cniVersion":"1.0.0","name":"n","ipam":` + ipam + `}`
		c, err := ParseConfig([]byte(stdin), "", read)
		checkParsed(t, c, err, stdin)
	})
}

func ptr(b *bool) any {
	if b == nil {
		return nil
	}
	return *b
}

// keptSet fails when a field set in own (not empty) differs in merged.
func keptSet(t *testing.T, own, merged reflect.Value, path string) {
	t.Helper()
	for i := 0; i < own.NumField(); i++ {
		f := own.Type().Field(i)
		o, m := own.Field(i), merged.Field(i)
		if f.Anonymous {
			keptSet(t, o, m, path)
			continue
		}
		if !f.IsExported() || empty(o) {
			continue
		}
		if !reflect.DeepEqual(o.Interface(), m.Interface()) {
			t.Fatalf("%s.%s %v set in the ipam became %v", path, f.Name, o.Interface(), m.Interface())
		}
	}
}

// empty is emptyJSON for a decoded value: zero, or of length 0, or
// pointing to a zero value.
func empty(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Slice, reflect.Map, reflect.String:
		return v.Len() == 0
	case reflect.Pointer:
		return v.IsNil() || v.Elem().IsZero()
	}
	return v.IsZero()
}
