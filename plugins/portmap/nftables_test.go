package portmap

import (
	"net"
	"strings"
	"testing"

	"github.com/patchbay-cni/patchbay/internal/testutil"
	"github.com/patchbay-cni/patchbay/spec"
)

func hp(addr string, port string) string { return net.JoinHostPort(addr, port) }

// TestNftables covers the default backend end to end: rules after ADD, real
// TCP through the mapping from a client netns, from the host itself (its
// own address and 127.0.0.1), hairpin, IPv6, CHECK, DEL of one container
// leaving the other's rules, DEL twice, and GC.
func TestNftables(t *testing.T) {
	tp := newTopo(t, 2)
	c0, c1 := tp.c[0], tp.c[1]
	serve(t, c0.path, "tcp", ":80", "c0")
	serve(t, c1.path, "tcp", ":80", "c1")

	conf0 := netConf(t, c0.prevResult(), []spec.PortMapping{{HostPort: 8080, ContainerPort: 80, Protocol: "tcp"}}, nil)
	conf1 := netConf(t, c1.prevResult(), []spec.PortMapping{{HostPort: 8081, ContainerPort: 80}}, nil)
	out := mustRun(t, tp.hostPath, "ADD", "ctr0", "eth0", c0.path, conf0)
	if !strings.Contains(out, c0.ip4) {
		t.Fatalf("ADD did not pass prevResult through: %s", out)
	}
	entry := func() string {
		out, err := testutil.InNS(t, tp.host, "nft", "-a", "list", "chain", "inet", "patchbay_portmap", "prerouting")
		if err != nil {
			t.Fatalf("list the entry chain: %v: %s", err, out)
		}
		return out
	}
	before := entry()
	mustRun(t, tp.hostPath, "ADD", "ctr1", "eth0", c1.path, conf1)
	// A further attachment only adds rules: the entry rule keeps its handle
	// (rewriting it would make every ADD wait an RCU grace period).
	if after := entry(); after != before {
		t.Errorf("the second ADD rewrote the entry chain:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	// A repeated ADD replaces the attachment's rules rather than doubling them.
	mustRun(t, tp.hostPath, "ADD", "ctr0", "eth0", c0.path, conf0)

	rs := ruleset(t, tp.host)
	for _, want := range []string{
		"table inet patchbay_portmap",
		"fib daddr type local jump hostports",
		"tcp dport 8080 dnat ip to " + c0.ip4 + ":80 comment \"pmtest ctr0 eth0\"",
		"tcp dport 8080 dnat ip6 to [" + c0.ip6 + "]:80 comment \"pmtest ctr0 eth0\"",
		"tcp dport 8081 dnat ip to " + c1.ip4 + ":80 comment \"pmtest ctr1 eth0\"",
		"ip saddr 127.0.0.1 ip daddr " + c0.ip4 + " masquerade comment \"pmtest ctr0 eth0\"",
	} {
		if !strings.Contains(rs, want) {
			t.Errorf("ruleset lacks %q:\n%s", want, rs)
		}
	}
	if n := strings.Count(rs, "dport 8080"); n != 2 {
		t.Errorf("want 2 rules for port 8080 (v4, v6) after a repeated ADD, got %d:\n%s", n, rs)
	}

	// From another host, v4 and v6: no SNAT, the client's address is seen.
	expectDial(t, "client v4", tp.clientPath, hp(hostClientIP4, "8080"), "c0 "+clientIP4)
	expectDial(t, "client v6", tp.clientPath, hp(hostClientIP6, "8080"), "c0 "+clientIP6)
	expectDial(t, "client v4 second container", tp.clientPath, hp(hostClientIP4, "8081"), "c1 "+clientIP4)
	expectDial(t, "client to the other container's gateway", tp.clientPath, hp(c1.gw4, "8080"), "c0 "+clientIP4)
	// From the host itself, to its own address and to localhost.
	expectDial(t, "host to own address", tp.hostPath, hp(hostClientIP4, "8080"), "c0 "+hostClientIP4)
	expectDial(t, "host to 127.0.0.1", tp.hostPath, hp("127.0.0.1", "8080"), "c0 "+c0.gw4)
	// Hairpin: the container through its own host port, masqueraded.
	expectDial(t, "hairpin v4", c0.path, hp(hostClientIP4, "8080"), "c0 "+c0.gw4)
	expectDial(t, "hairpin v6", c0.path, hp(hostClientIP6, "8080"), "c0 "+c0.gw6)
	// One container reaching another's host port.
	expectDial(t, "c1 to c0 via host port", c1.path, hp(hostClientIP4, "8080"), "c0 "+c1.ip4)

	mustRun(t, tp.hostPath, "CHECK", "ctr0", "eth0", c0.path, conf0)
	mustRun(t, tp.hostPath, "CHECK", "ctr1", "eth0", c1.path, conf1)

	// DEL ctr0: its rules go, ctr1's stay and keep working.
	mustRun(t, tp.hostPath, "DEL", "ctr0", "eth0", c0.path, conf0)
	rs = ruleset(t, tp.host)
	if strings.Contains(rs, "ctr0") || strings.Contains(rs, "dport 8080") {
		t.Fatalf("ctr0 rules left after DEL:\n%s", rs)
	}
	if !strings.Contains(rs, "tcp dport 8081 dnat ip to "+c1.ip4+":80") {
		t.Fatalf("ctr1 rules gone after DEL of ctr0:\n%s", rs)
	}
	expectNoDial(t, "client after DEL", tp.clientPath, hp(hostClientIP4, "8080"))
	expectDial(t, "second container after DEL of first", tp.clientPath, hp(hostClientIP4, "8081"), "c1 "+clientIP4)
	mustRun(t, tp.hostPath, "DEL", "ctr0", "eth0", c0.path, conf0) // DEL twice
	if _, code := runIn(t, tp.hostPath, "CHECK", "ctr0", "eth0", c0.path, conf0); code == 0 {
		t.Fatal("CHECK succeeded for a deleted attachment")
	}
	mustRun(t, tp.hostPath, "CHECK", "ctr1", "eth0", c1.path, conf1)

	// GC: ctr0 comes back, then only ctr1 is valid.
	mustRun(t, tp.hostPath, "ADD", "ctr0", "eth0", c0.path, conf0)
	gcConf := netConf(t, nil, nil, map[string]any{
		"cniVersion":             "1.1.0",
		spec.KeyValidAttachments: []spec.Attachment{{ContainerID: "ctr1", IfName: "eth0"}},
	})
	mustRun(t, tp.hostPath, "GC", "", "", "", gcConf)
	rs = ruleset(t, tp.host)
	if strings.Contains(rs, "ctr0") || !strings.Contains(rs, "ctr1") {
		t.Fatalf("GC kept the wrong rules:\n%s", rs)
	}
	mustRun(t, tp.hostPath, "DEL", "ctr1", "eth0", c1.path, conf1)
	if rs = ruleset(t, tp.host); strings.Contains(rs, "comment") {
		t.Fatalf("rules left after the last DEL:\n%s", rs)
	}
}

// TestNftablesHostIPAndOptions: a hostIP limits the mapping to that address
// and family; snat=false leaves out the masquerade rules; conditions apply.
func TestNftablesHostIPAndOptions(t *testing.T) {
	tp := newTopo(t, 1)
	c0 := tp.c[0]
	serve(t, c0.path, "tcp", ":80", "c0")
	conf := netConf(t, c0.prevResult(), []spec.PortMapping{
		{HostPort: 9090, ContainerPort: 80, HostIP: hostClientIP4},
		{HostPort: 9091, ContainerPort: 80, Protocol: "UDP"},
	}, map[string]any{"snat": false, "conditionsV4": []string{"ip saddr != 192.0.2.0/24"}})
	mustRun(t, tp.hostPath, "ADD", "ctr0", "eth0", c0.path, conf)
	rs := ruleset(t, tp.host)
	for _, want := range []string{
		"ip saddr != 192.0.2.0/24 ip daddr " + hostClientIP4 + " tcp dport 9090 dnat ip to " + c0.ip4 + ":80",
		"udp dport 9091 dnat ip6 to [" + c0.ip6 + "]:80",
	} {
		if !strings.Contains(rs, want) {
			t.Errorf("ruleset lacks %q:\n%s", want, rs)
		}
	}
	if strings.Contains(rs, "masquerade comment") {
		t.Errorf("snat=false still masquerades:\n%s", rs)
	}
	if strings.Contains(rs, "9090 dnat ip6") {
		t.Errorf("an IPv4 hostIP produced an IPv6 rule:\n%s", rs)
	}
	expectDial(t, "to hostIP", tp.clientPath, hp(hostClientIP4, "9090"), "c0 "+clientIP4)
	expectNoDial(t, "to another host address", tp.clientPath, hp(c0.gw4, "9090"))
	mustRun(t, tp.hostPath, "CHECK", "ctr0", "eth0", c0.path, conf)
	mustRun(t, tp.hostPath, "DEL", "ctr0", "eth0", c0.path, conf)

	// masqAll, sctp and an IPv6 hostIP; CHECK compares the kernel's rules
	// with the expected ones expression by expression.
	conf = netConf(t, c0.prevResult(), []spec.PortMapping{
		{HostPort: 9092, ContainerPort: 80, Protocol: "sctp"},
		{HostPort: 9093, ContainerPort: 80, HostIP: hostClientIP6},
	}, map[string]any{"masqAll": true})
	mustRun(t, tp.hostPath, "ADD", "ctr0", "eth0", c0.path, conf)
	rs = ruleset(t, tp.host)
	for _, want := range []string{
		"ip daddr " + c0.ip4 + " ct status dnat masquerade",
		"sctp dport 9092 dnat ip to " + c0.ip4 + ":80",
		"ip6 daddr " + hostClientIP6 + " tcp dport 9093 dnat ip6 to [" + c0.ip6 + "]:80",
	} {
		if !strings.Contains(rs, want) {
			t.Errorf("ruleset lacks %q:\n%s", want, rs)
		}
	}
	expectDial(t, "to IPv6 hostIP with masqAll", tp.clientPath, hp(hostClientIP6, "9093"), "c0 "+c0.gw6)
	mustRun(t, tp.hostPath, "CHECK", "ctr0", "eth0", c0.path, conf)
	mustRun(t, tp.hostPath, "DEL", "ctr0", "eth0", c0.path, conf)
}
