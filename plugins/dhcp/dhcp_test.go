package dhcp

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/patchbay-cni/patchbay/spec"
)

// TestAcquireResultRelease: ADD takes a lease from dnsmasq and returns its
// address, gateway, routes and DNS; DEL releases it at the server before the
// interface goes (dnsmasq logs the RELEASE and drops the lease); a second
// DEL is a no-op.
func TestAcquireResultRelease(t *testing.T) {
	t.Parallel()
	l := newLab(t, serverOpts{})
	l.startDaemon()
	c := l.container("eth0")
	conf := l.ipamConf(spec.Current, nil)
	res := l.add(c, "ctr1", conf, "")

	if len(res.IPs) != 1 {
		t.Fatalf("IPs = %v", res.IPs)
	}
	ip := res.IPs[0]
	if !netip.MustParsePrefix("10.99.0.0/24").Contains(ip.Address.Addr()) || ip.Address.Bits() != 24 {
		t.Errorf("address %v, want one in 10.99.0.0/24 with /24", ip.Address)
	}
	if ip.Gateway != netip.MustParseAddr(labServer) {
		t.Errorf("gateway %v, want %s", ip.Gateway, labServer)
	}
	if len(res.Routes) != 1 || res.Routes[0].Dst != netip.MustParsePrefix("0.0.0.0/0") || res.Routes[0].GW != netip.MustParseAddr(labServer) {
		t.Errorf("routes %v, want only the default route via %s", res.Routes, labServer)
	}
	wantDNS := spec.DNS{Nameservers: []string{labServer}, Domain: "pb.test", Search: []string{"pb.test", "corp.test"}}
	if !slices.Equal(res.DNS.Nameservers, wantDNS.Nameservers) || res.DNS.Domain != wantDNS.Domain || !slices.Equal(res.DNS.Search, wantDNS.Search) {
		t.Errorf("dns %+v, want %+v", res.DNS, wantDNS)
	}
	addr := ip.Address.Addr()
	lease := l.serverLease(addr)
	// dnsmasq files the lease under our client ID: type 0 then
	// "containerID/network/ifname", as the reference sends it.
	if want := hexColon(defaultClientID("ctr1", labNet, "eth0")); !strings.HasSuffix(lease, " "+want) {
		t.Errorf("server lease %q, want client-id %s", lease, want)
	}

	// A repeated ADD returns the same lease without a new exchange.
	before := count(readFile(l.srvLog), `DHCPDISCOVER`)
	if again := l.add(c, "ctr1", conf, ""); again.IPs[0].Address != ip.Address {
		t.Errorf("second ADD gave %v, want %v", again.IPs[0].Address, ip.Address)
	}
	if n := count(readFile(l.srvLog), `DHCPDISCOVER`); n != before {
		t.Errorf("second ADD sent a DISCOVER")
	}

	c.configure(t, ip.Address)
	if _, err := l.run(pluginCall{cmd: "DEL", id: "ctr1", netns: c.path, ifName: c.ifName}, conf); err != nil {
		t.Fatal(err)
	}
	// The interface goes right after DEL returns, as an interface plugin
	// that calls IPAM first removes it.
	c.deleteIface(t)
	l.waitFor("dnsmasq to log the release", 5*time.Second, func() bool {
		return strings.Contains(readFile(l.srvLog), "DHCPRELEASE(pbdhcp0) "+addr.String())
	})
	l.waitFor("dnsmasq to drop the lease", 5*time.Second, func() bool { return l.serverLease(addr) == "" })
	if ents, _ := os.ReadDir(l.state); len(ents) != 0 {
		t.Errorf("state directory still holds %d record(s) after DEL", len(ents))
	}
	if _, err := l.run(pluginCall{cmd: "DEL", id: "ctr1", ifName: c.ifName}, conf); err != nil {
		t.Errorf("second DEL (no netns): %v", err)
	}
}

// hexColon renders bytes as dnsmasq prints a client ID (aa:bb:...).
func hexColon(b []byte) string {
	parts := make([]string, len(b))
	for i, x := range b {
		parts[i] = fmt.Sprintf("%02x", x)
	}
	return strings.Join(parts, ":")
}

// stateRecords reads the daemon's persisted leases.
func stateRecords(t *testing.T, dir string) []record {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []record
	for _, e := range ents {
		var r record
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatalf("%s: %v", e.Name(), err)
		}
		out = append(out, r)
	}
	return out
}
