package interop

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/patchbay-cni/patchbay/internal/probe"
	"github.com/patchbay-cni/patchbay/internal/seed"
	"github.com/patchbay-cni/patchbay/internal/testutil"
	"github.com/patchbay-cni/patchbay/spec"
)

// TestCnitoolSeedChain: the reference cnitool drives our bridge + host-local
// + tuning + portmap through the spec's example with CAP_ARGS (mac +
// portMappings): the ADD result has the spec example's shape with the new
// mac, the port mapping carries traffic, CHECK passes, and DEL leaves no
// link, address, allocation or rule behind.
func TestCnitoolSeedChain(t *testing.T) {
	hostNS, hostPath := testutil.NewNS(t, "seedhost")
	ctrNS, ctrPath := testutil.NewNS(t, "seedctr")
	work := t.TempDir()
	confDir := filepath.Join(work, "net.d")
	ipamDir := filepath.Join(work, "ipam")
	os.MkdirAll(confDir, 0o755)
	conf := seed.Conflist(ipamDir, filepath.Join(work, "tuning"))
	if err := os.WriteFile(filepath.Join(confDir, "10-dbnet.conflist"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	const mac = "00:11:22:33:44:66" // the spec example's new mac
	capArgs := []string{"CAP_ARGS=" + `{"mac":"` + mac + `","portMappings":[{"hostPort":8080,"containerPort":80,"protocol":"tcp"}]}`}

	out, err := cnitoolEnv(t, hostNS, confDir, capArgs, "add", seed.NetworkName, ctrPath)
	if err != nil {
		t.Fatalf("cnitool add: %v\n%s", err, out)
	}
	r, err := spec.ParseResult([]byte(out), "")
	if err != nil {
		t.Fatalf("cnitool add printed no result: %v\n%s", err, out)
	}
	// The spec example's shape: [bridge, host veth, container eth0], one IP on
	// interface 2 with the gateway, the ipam route, the dns.
	if r.CNIVersion != "1.1.0" || len(r.Interfaces) != 3 || len(r.IPs) != 1 || len(r.Routes) != 1 {
		t.Fatalf("result shape differs from the spec example:\n%s", out)
	}
	if r.Interfaces[0].Name != "cni0" || r.Interfaces[0].Sandbox != "" || !strings.HasPrefix(r.Interfaces[1].Name, "veth") || r.Interfaces[1].Sandbox != "" {
		t.Errorf("host interfaces = %+v %+v, want cni0 and a veth on the host", r.Interfaces[0], r.Interfaces[1])
	}
	if r.Interfaces[2].Name != "eth0" || r.Interfaces[2].Sandbox != ctrPath || r.Interfaces[2].Mac != mac {
		t.Errorf("container interface = %+v, want eth0 in %s with mac %s (tuning)", r.Interfaces[2], ctrPath, mac)
	}
	ip := r.IPs[0]
	if ip.Interface == nil || *ip.Interface != 2 || ip.Gateway.String() != "10.1.0.1" || ip.Address.Bits() != 16 || !strings.HasPrefix(ip.Address.String(), "10.1.") {
		t.Errorf("ips[0] = %+v, want 10.1.x.y/16 gw 10.1.0.1 on interface 2", ip)
	}
	if r.Routes[0].Dst.String() != "0.0.0.0/0" || strings.Join(r.DNS.Nameservers, ",") != "10.1.0.1" {
		t.Errorf("routes %v / dns %v differ from the spec example", r.Routes, r.DNS)
	}
	if got, _ := testutil.InNS(t, ctrNS, "cat", "/sys/class/net/eth0/address"); got != mac {
		t.Errorf("eth0 mac in the container = %q, want %q", got, mac)
	}
	if got, _ := testutil.InNS(t, ctrNS, "cat", "/proc/sys/net/core/somaxconn"); got != "500" {
		t.Errorf("container somaxconn = %q, want 500 (tuning sysctl)", got)
	}

	// Traffic through the port mapping: host netns -> gateway:8080 -> container:80.
	stop, err := probe.Serve(ctrPath, ":80", "hello from the container")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := probe.Greeting(hostPath, "10.1.0.1:8080"); err != nil || got != "hello from the container" {
		t.Errorf("through the port mapping: got %q, %v", got, err)
	}
	stop()

	if out, err := cnitoolEnv(t, hostNS, confDir, capArgs, "check", seed.NetworkName, ctrPath); err != nil {
		t.Fatalf("cnitool check: %v\n%s", err, out)
	}
	if out, err := cnitoolEnv(t, hostNS, confDir, capArgs, "del", seed.NetworkName, ctrPath); err != nil {
		t.Fatalf("cnitool del: %v\n%s", err, out)
	}

	// Nothing left behind: only lo and the bridge on the host, no eth0 in
	// the container, no allocation, no rule naming the container's address.
	// Listing errors fail the test: an empty listing would pass vacuously.
	links, err := testutil.InNS(t, hostNS, "ip", "-o", "link", "show")
	if err != nil {
		t.Fatalf("host links: %v: %s", err, links)
	}
	for _, l := range strings.Split(links, "\n") {
		if strings.Contains(l, "veth") {
			t.Errorf("veth left on the host: %s", l)
		}
	}
	if out, err := testutil.InNS(t, ctrNS, "ip", "-o", "link", "show", "eth0"); err == nil {
		t.Errorf("eth0 left in the container: %s", out)
	}
	entries, _ := os.ReadDir(filepath.Join(ipamDir, seed.NetworkName))
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "10.1.") {
			t.Errorf("host-local allocation left: %s", e.Name())
		}
	}
	rules, err := testutil.InNS(t, hostNS, "nft", "list", "ruleset")
	if err != nil {
		t.Fatalf("host ruleset: %v: %s", err, rules)
	}
	if strings.Contains(rules, ip.Address.Addr().String()) || strings.Contains(rules, "dnat") {
		t.Errorf("nftables rules left after DEL:\n%s", rules)
	}
	if out, err := cnitoolEnv(t, hostNS, confDir, capArgs, "del", seed.NetworkName, ctrPath); err != nil {
		t.Fatalf("second cnitool del: %v\n%s", err, out)
	}
}
