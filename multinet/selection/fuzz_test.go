package selection

import (
	"testing"
)

// Parse must never panic, must select nothing when anything is ignored or
// fatal, and must give unique interface names otherwise.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		`net-a,net-b,other-ns/net-c`, `net-a@eth1, ns/b@net1`, `[{"name":"a","ips":["1.2.3.4/24"],"mac":"02:00:00:00:00:01"}]`,
		`[{"name":"a","portMappings":[{"hostPort":1,"containerPort":2,"protocol":"udp"}],"bandwidth":{"ingressRate":1}}]`,
		`[{"name":"a","default-route":[]},{"name":"b","default-route":["10.0.0.1"]}]`, `[{"name":"a","cni-args":{"x":1}}]`,
		`{`, `[`, `,`, `@`, `/`, `[null]`, `[{"name":null}]`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, a string) {
		r := Parse(a, "ns", Options{DefaultInterface: "eth0"})
		if (r.Fatal() || r.Ignored()) && len(r.Selections) > 0 {
			t.Fatalf("selections despite problems: %+v", r.Problems)
		}
		seen := map[string]bool{"eth0": true}
		for _, s := range r.Selections {
			if seen[s.Interface] || ifNameProblem(s.Interface) != "" {
				t.Fatalf("interface %q duplicate or invalid", s.Interface)
			}
			seen[s.Interface] = true
			_, _ = CapabilityArgs(s, nil)
			_, _ = MergeCNIArgs([]byte(`{"type":"x"}`), s.CNIArgs)
		}
	})
}
