package portmap

import (
	"strings"
	"testing"

	"github.com/patchbay-cni/patchbay/spec"
)

// TestIptables: the iptables backend (iptables-restore run inside the host
// test netns, inherited from the plugin's thread) with ADD, traffic from a
// client, the host and localhost, hairpin, CHECK, DEL of one of two
// containers, DEL twice and GC.
func TestIptables(t *testing.T) {
	tp := newTopo(t, 2)
	c0, c1 := tp.c[0], tp.c[1]
	serve(t, c0.path, "tcp", ":80", "c0")
	serve(t, c1.path, "tcp", ":80", "c1")
	ipt := map[string]any{"backend": "iptables"}
	conf0 := netConf(t, c0.prevResult(), []spec.PortMapping{{HostPort: 8080, ContainerPort: 80}}, ipt)
	conf1 := netConf(t, c1.prevResult(), []spec.PortMapping{{HostPort: 8081, ContainerPort: 80}}, ipt)
	mustRun(t, tp.hostPath, "ADD", "ctr0", "eth0", c0.path, conf0)
	mustRun(t, tp.hostPath, "ADD", "ctr1", "eth0", c1.path, conf1)
	mustRun(t, tp.hostPath, "ADD", "ctr0", "eth0", c0.path, conf0) // replaces, not doubles

	v4, v6 := natRules(t, tp.host, false), natRules(t, tp.host, true)
	ch0, ch1 := iptChain(attachKey("pmtest", "ctr0", "eth0")).String(), iptChain(attachKey("pmtest", "ctr1", "eth0")).String()
	for _, want := range []string{
		"-A PREROUTING -m addrtype --dst-type LOCAL -j PB-HOSTPORT-DNAT",
		"-A OUTPUT -m addrtype --dst-type LOCAL -j PB-HOSTPORT-DNAT",
		"-A POSTROUTING -m comment --comment \"patchbay portmap requiring masquerade\" -j PB-HOSTPORT-MASQ",
		"-A PB-HOSTPORT-MASQ -m mark --mark 0x2000/0x2000 -j MASQUERADE",
		"--comment \"pmtest ctr0 eth0\" -m multiport --dports 8080 -j " + ch0,
		"-A " + ch0 + " -s 127.0.0.1/32 -p tcp -m tcp --dport 8080 -j PB-HOSTPORT-SETMARK",
		"-A " + ch0 + " -p tcp -m tcp --dport 8080 -j DNAT --to-destination " + c0.ip4 + ":80",
		"-A " + ch1 + " -p tcp -m tcp --dport 8081 -j DNAT --to-destination " + c1.ip4 + ":80",
	} {
		if !strings.Contains(v4, want) {
			t.Errorf("iptables nat lacks %q:\n%s", want, v4)
		}
	}
	if !strings.Contains(v6, "-j DNAT --to-destination ["+c0.ip6+"]:80") {
		t.Errorf("ip6tables nat lacks the DNAT to %s:\n%s", c0.ip6, v6)
	}
	if n := strings.Count(v4, "-j "+ch0); n != 1 {
		t.Errorf("want one entry rule for %s after a repeated ADD, got %d:\n%s", ch0, n, v4)
	}

	expectDial(t, "client v4", tp.clientPath, hp(hostClientIP4, "8080"), "c0 "+clientIP4)
	expectDial(t, "client v6", tp.clientPath, hp(hostClientIP6, "8080"), "c0 "+clientIP6)
	expectDial(t, "client second container", tp.clientPath, hp(hostClientIP4, "8081"), "c1 "+clientIP4)
	expectDial(t, "host to own address", tp.hostPath, hp(hostClientIP4, "8080"), "c0 "+hostClientIP4)
	expectDial(t, "host to 127.0.0.1", tp.hostPath, hp("127.0.0.1", "8080"), "c0 "+c0.gw4)
	expectDial(t, "hairpin", c0.path, hp(hostClientIP4, "8080"), "c0 "+c0.gw4)
	mustRun(t, tp.hostPath, "CHECK", "ctr0", "eth0", c0.path, conf0)

	mustRun(t, tp.hostPath, "DEL", "ctr0", "eth0", c0.path, conf0)
	v4 = natRules(t, tp.host, false)
	if strings.Contains(v4, ch0) || strings.Contains(natRules(t, tp.host, true), ch0) {
		t.Fatalf("ctr0 chain left after DEL:\n%s", v4)
	}
	if !strings.Contains(v4, "-A "+ch1+" -p tcp -m tcp --dport 8081 -j DNAT") {
		t.Fatalf("ctr1 rules gone after DEL of ctr0:\n%s", v4)
	}
	expectNoDial(t, "client after DEL", tp.clientPath, hp(hostClientIP4, "8080"))
	expectDial(t, "second container after DEL", tp.clientPath, hp(hostClientIP4, "8081"), "c1 "+clientIP4)
	mustRun(t, tp.hostPath, "DEL", "ctr0", "eth0", c0.path, conf0)
	if _, code := runIn(t, tp.hostPath, "CHECK", "ctr0", "eth0", c0.path, conf0); code == 0 {
		t.Fatal("CHECK succeeded for a deleted attachment")
	}

	// GC with no valid attachment removes ctr1 too.
	gcConf := netConf(t, nil, nil, map[string]any{"cniVersion": "1.1.0", "backend": "iptables", spec.KeyValidAttachments: []spec.Attachment{}})
	mustRun(t, tp.hostPath, "GC", "", "", "", gcConf)
	if v4 = natRules(t, tp.host, false); strings.Contains(v4, ch1) {
		t.Fatalf("GC left ctr1's chain:\n%s", v4)
	}
}

// TestIptablesDelWithoutTables: DEL in a netns where nothing was ever set up.
func TestDelWithoutTables(t *testing.T) {
	tp := newTopo(t, 1)
	c0 := tp.c[0]
	for _, b := range []string{"nftables", "iptables"} {
		conf := netConf(t, nil, []spec.PortMapping{{HostPort: 8080, ContainerPort: 80}}, map[string]any{"backend": b})
		mustRun(t, tp.hostPath, "DEL", "ctr0", "eth0", c0.path, conf)
		mustRun(t, tp.hostPath, "DEL", "ctr0", "eth0", "", conf)
	}
}
