package tuning

import (
	"bytes"
	"strings"
	"testing"

	"github.com/patchbay-cni/patchbay/internal/confcheck"
	"github.com/patchbay-cni/patchbay/internal/testutil"
)

// FuzzConfig feeds tuning's configuration handling arbitrary configs and
// CNI_ARGS: refusals are configuration errors naming no plugin; what is
// accepted stays in the kernel's ranges and below /proc/sys/net.
func FuzzConfig(f *testing.F) {
	testutil.FuzzConfig(f, Plugin(), [][2]string{
		{`{"cniVersion":"1.1.0","name":"n","type":"tuning","sysctl":{"net.ipv4.conf.IFNAME.arp_notify":"1","net/ipv4/ip_local_port_range":"20000 30000"},
		  "mac":"c2:11:22:33:44:55","mtu":1400,"promisc":true,"allmulti":false,"txQLen":333,"dataDir":"/run/x"}`, ""},
		{`{"cniVersion":"1.0.0","name":"n","runtimeConfig":{"mac":"02:00:00:00:00:01"},"args":{"cni":{"mtu":9000,"txQLen":4294967295,"sysctl":{"net.core.somaxconn":"5"}}}}`, "MAC=0a:58:0a:01:00:05"},
		{`{"cniVersion":"1.1.0","name":"n","txQLen":4294967301,"mtu":-1,"mac":"ff:ff:ff:ff:ff:ff"}`, ""},
		{`{"cniVersion":"1.1.0","name":"n","sysctl":{"net.core.somaxconn":"1\n2","../x":"1","net.ipv4.conf.eth1.forwarding":"1"}}`, ""},
		{`{"cniVersion":"1.1.0","name":"n","sysctl":{"a":"1","a":"2"}}`, ""},
		{`{}`, ""},
	}, load, func(t *testing.T, c *config) {
		if c.mtu < 0 || c.mtu > confcheck.MaxMTU || (c.txQLen != nil && (*c.txQLen < 0 || *c.txQLen > confcheck.MaxU32)) {
			t.Fatalf("accepted mtu %d txQLen %v", c.mtu, c.txQLen)
		}
		if c.mac != nil && (len(c.mac) != 6 || c.mac[0]&1 != 0 || bytes.Equal(c.mac, make([]byte, 6))) {
			t.Fatalf("accepted mac %s", c.mac)
		}
		for _, s := range c.sysctls {
			if !strings.HasPrefix(s.path(), "/proc/sys/net/") || s.value == "" || strings.ContainsAny(s.value, "\n\r\x00") {
				t.Fatalf("accepted sysctl %+v", s)
			}
			// No traversal: "..0" (from "net.//0", an interface may be
			// called so) is a name, ".." is not.
			for _, c := range strings.Split(s.rel, "/") {
				if c == "" || c == "." || c == ".." {
					t.Fatalf("accepted sysctl %+v: path component %q", s, c)
				}
			}
		}
	})
}
