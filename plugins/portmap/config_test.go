package portmap

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/patchbay-cni/patchbay/internal/firewall"
	"github.com/patchbay-cni/patchbay/spec"
)

func TestAttachKey(t *testing.T) {
	if got := attachKey("net", "abc", "eth0"); got != "net abc eth0" {
		t.Fatalf("got %q", got)
	}
	long := strings.Repeat("a", 100)
	for _, k := range []string{attachKey(long, long, "eth0"), attachKey("net", long, "eth0")} {
		if len(k) > 127 {
			t.Fatalf("key %q is longer than a comment may be", k)
		}
	}
	if !strings.HasPrefix(attachKey(long, "c", "eth0"), netPrefix(long)) {
		t.Fatal("a hashed network part is not the key's prefix")
	}
	if attachKey("n", "c", "eth0") == attachKey("n", "c", "eth1") {
		t.Fatal("ifname is not part of the key")
	}
	// A 64-hex container ID (the usual) is kept readable.
	id := strings.Repeat("f", 64)
	if got := attachKey("n", id, "eth0"); got != "n "+id+" eth0" {
		t.Fatalf("got %q", got)
	}
}

func TestContainerIPs(t *testing.T) {
	res := &spec.Result{
		Interfaces: []*spec.Interface{{Name: "br0"}, {Name: "eth0", Sandbox: "/run/netns/x"}, {Name: "eth1", Sandbox: "/run/netns/x"}},
		IPs: []*spec.IPConfig{
			{Interface: spec.IntPtr(0), Address: netip.MustParsePrefix("10.0.0.1/24")},
			{Interface: spec.IntPtr(2), Address: netip.MustParsePrefix("10.1.0.2/24")},
			{Interface: spec.IntPtr(1), Address: netip.MustParsePrefix("10.0.0.2/24")},
			{Address: netip.MustParsePrefix("2001:db8::2/64")}, // interface not said
			{Interface: spec.IntPtr(1), Address: netip.MustParsePrefix("2001:db8::3/64")},
		},
	}
	v4, v6 := containerIPs(res, "eth0")
	if v4.String() != "10.0.0.2/24" || v6.String() != "2001:db8::2/64" {
		t.Fatalf("got %v %v", v4, v6)
	}
}

func TestChooseBackend(t *testing.T) {
	s := func(v string) *string { return &v }
	for _, tc := range []struct {
		c    conf
		want firewall.Kind
	}{
		{conf{}, backendNFT},
		{conf{Backend: s("iptables")}, backendIPT},
		{conf{ExternalSetMarkChain: s("KUBE-MARK-MASQ")}, backendIPT},
		{conf{ConditionsV4: &[]string{"-s", "1.2.3.4"}}, backendIPT},
		{conf{ConditionsV4: &[]string{"ip saddr 1.2.3.4"}}, backendNFT},
	} {
		if got, err := chooseBackend(&tc.c); err != nil || got != tc.want {
			t.Errorf("%+v: got %q, %v; want %q", tc.c, got, err, tc.want)
		}
	}
}
