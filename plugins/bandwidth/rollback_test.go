package bandwidth

import (
	"testing"
)

// A failed ADD takes back everything it did: the host veth's tbf, the ifb
// device (with its tbf), the ingress qdisc and filter. What was there
// before (another device, another qdisc) stays.
func TestFailedAddRollsBack(t *testing.T) {
	for _, tc := range []struct {
		name     string
		setup    func(f *fixture)
		mentions []string
	}{
		{"ifb name taken by a veth", func(f *fixture) {
			f.ip(f.host, "link", "add", f.ifb, "type", "veth", "peer", "name", "other0")
		}, []string{ifbName(netName, "ctr-bw1"), "is a veth"}},
		{"ifb of another interface", func(f *fixture) {
			f.ip(f.host, "link", "add", f.ifb, "type", "ifb")
			f.ip(f.host, "link", "set", f.ifb, "alias", ifbAlias(netName, "eth1"))
		}, []string{ifbName(netName, "ctr-bw1"), `interface "eth1"`}},
		{"ifb of another network", func(f *fixture) {
			f.ip(f.host, "link", "add", f.ifb, "type", "ifb")
			f.ip(f.host, "link", "set", f.ifb, "alias", ifbAlias("othernet", "eth0"))
		}, []string{ifbName(netName, "ctr-bw1"), "another network"}},
		{"clsact on the host veth", func(f *fixture) {
			f.sh(f.host, "tc qdisc add dev "+f.hostIf+" clsact")
		}, []string{"redirecting", ifbName(netName, "ctr-bw1")}},
		{"foreign root qdisc on the host veth", func(f *fixture) {
			f.sh(f.host, "tc qdisc add dev "+f.hostIf+" root handle 5: pfifo")
		}, []string{"hv0", "pfifo 5:"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			tc.setup(f)
			before := f.hostState()
			out, rc := f.run("ADD", conf("1.0.0", bothKeys, f.prevResult("1.0.0")))
			expectError(t, out, rc, 999, tc.mentions...)
			if after := f.hostState(); after != before {
				t.Errorf("host state after the failed ADD differs:\nbefore:\n%s\nafter:\n%s", before, after)
			}
		})
	}
}
