package static

import (
	"testing"

	"github.com/patchbay-cni/patchbay/internal/testutil"
)

// FuzzConfig feeds static's configuration handling arbitrary configs and
// CNI_ARGS: refusals are configuration errors naming no plugin; what is
// accepted holds valid addresses and routes the kernel takes as given.
func FuzzConfig(f *testing.F) {
	testutil.FuzzConfig(f, Plugin(), [][2]string{
		{`{"cniVersion":"1.1.0","name":"n","ipam":{"type":"static","addresses":[{"address":"10.10.0.1/24","gateway":"10.10.0.254"},{"address":"3ffe:ffff:0:01ff::1/64"}],
		  "routes":[{"dst":"0.0.0.0/0"},{"dst":"192.168.0.0/16","gw":"10.10.5.1","mtu":1400,"advmss":1360,"priority":5,"table":100,"scope":0}],"dns":{"nameservers":["8.8.8.8"]}}}`, ""},
		{`{"cniVersion":"0.2.0","name":"n","ipam":{"type":"static"}}`, "IP=10.0.0.5/24,10.0.0.6/24;GATEWAY=10.0.0.1"},
		{`{"cniVersion":"1.0.0","name":"n","ipam":{"type":"static"},"runtimeConfig":{"ips":["::ffff:10.0.0.1/120"]},"args":{"cni":{"ips":["10.0.0.7/8"]}}}`, ""},
		{`{"cniVersion":"1.1.0","name":"n","ipam":{"routes":[{"dst":"10.0.0.0/8","table":4294967396,"scope":300}]}}`, ""},
		{`{"cniVersion":"1.1.0","name":"n","ipam":{"addresses":[{"address":"10.0.0.1"}]}}`, "IP=x;GATEWAY=y"},
		{`{}`, ""},
	}, load, func(t *testing.T, l *loaded) {
		for _, ip := range l.addrs {
			if !ip.Address.IsValid() || ip.Address.Addr().Is4In6() || (ip.Gateway.IsValid() && ip.Gateway.Is4() != ip.Address.Addr().Is4()) {
				t.Fatalf("accepted address %+v", ip)
			}
		}
		for _, rt := range l.routes {
			if err := rt.Check(); err != nil || !rt.Dst.IsValid() {
				t.Fatalf("accepted route %+v: %v", rt, err)
			}
		}
	})
}
