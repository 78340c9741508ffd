//go:build linux && amd64

package crashtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/patchbay-cni/patchbay/internal/launch"
	"github.com/patchbay-cni/patchbay/internal/seed"
	"github.com/patchbay-cni/patchbay/internal/testutil"
)

// cases: one row per plugin chain. Each runs `patchbay add` once per
// state-changing step, so keep a row's chain as small as what it tests.
var cases = []Case{{
	Name: "bridge+host-local, ipMasq, 1.0.0 (DEL only, no GC)",
	Conflist: `{"cniVersion":"1.0.0","name":"crbr","plugins":[{"type":"bridge","bridge":"crbr0","isGateway":true,"ipMasq":true,
		"ipam":{"type":"host-local","subnet":"10.211.0.0/24","dataDir":"{{DIR}}/ipam"}}]}`,
	MinSteps: 20,
}, {
	Name: "ptp+host-local, ipMasq, 1.1.0 (DEL, then GC)",
	Conflist: `{"cniVersion":"1.1.0","name":"crptp","plugins":[{"type":"ptp","ipMasq":true,
		"ipam":{"type":"host-local","subnet":"10.212.0.0/24","dataDir":"{{DIR}}/ipam"}}]}`,
	MinSteps: 20,
}, {
	Name: "bridge+static, tuning (sysctls, mac, mtu, txQLen), 1.1.0",
	Conflist: `{"cniVersion":"1.1.0","name":"crtun","plugins":[{"type":"bridge","bridge":"crbr1","ipam":{"type":"static","addresses":[{"address":"10.213.0.5/24"}]}},
		{"type":"tuning","capabilities":{"mac":true},"dataDir":"{{DIR}}/tuning","mtu":1400,"txQLen":500,
		 "sysctl":{"net.core.somaxconn":"512","net.ipv4.conf.IFNAME.arp_notify":"1"}}]}`,
	CapArgs:  `{"mac":"0a:58:0a:d5:00:05"}`,
	Sysctls:  []string{"net/core/somaxconn"},
	MinSteps: 20,
}, {
	Name:     "the spec's example chain: bridge+host-local, tuning, portmap, 1.1.0",
	Conflist: seed.Conflist("{{DIR}}/ipam", "{{DIR}}/tuning"),
	CapArgs:  `{"mac":"0a:58:0a:01:00:09","portMappings":[{"hostPort":8080,"containerPort":80,"protocol":"tcp"}]}`,
	Sysctls:  []string{"net/core/somaxconn"},
	MinSteps: 30,
}, {
	Name: "bridge+host-local, firewall (iptables, same-bridge), 1.1.0",
	Conflist: `{"cniVersion":"1.1.0","name":"crfwi","plugins":[{"type":"bridge","bridge":"crbr3","isGateway":true,
		"ipam":{"type":"host-local","subnet":"10.215.0.0/24","dataDir":"{{DIR}}/ipam"}},
		{"type":"firewall","backend":"iptables","ingressPolicy":"same-bridge","dataDir":"{{DIR}}/fw"}]}`,
	MinSteps: 25,
}, {
	Name: "bridge+host-local, firewall (nftables, isolated), 1.1.0",
	Conflist: `{"cniVersion":"1.1.0","name":"crfwn","plugins":[{"type":"bridge","bridge":"crbr4","isGateway":true,
		"ipam":{"type":"host-local","subnet":"10.216.0.0/24","dataDir":"{{DIR}}/ipam"}},
		{"type":"firewall","backend":"nftables","ingressPolicy":"isolated","dataDir":"{{DIR}}/fw"}]}`,
	MinSteps: 25,
}, {
	Name: "ptp+host-local, bandwidth (both directions: ifb), 1.1.0",
	Conflist: `{"cniVersion":"1.1.0","name":"crbw","plugins":[{"type":"ptp",
		"ipam":{"type":"host-local","subnet":"10.217.0.0/24","dataDir":"{{DIR}}/ipam"}},
		{"type":"bandwidth","ingressRate":1000000,"ingressBurst":100000,"egressRate":2000000,"egressBurst":100000}]}`,
	MinSteps: 25,
}, {
	Name: "bridge+dhcp (a daemon and dnsmasq in the host), 1.1.0",
	Conflist: `{"cniVersion":"1.1.0","name":"crdhcp","plugins":[{"type":"bridge","bridge":"crbr5",
		"ipam":{"type":"dhcp","daemonSocketPath":"{{DIR}}/dhcp/dhcp.sock"}}]}`,
	Setup:    dhcpServers("crbr5"),
	MinSteps: 15,
}, {
	Name: "macvlan (bridge mode, a veth master in the host)+host-local, 1.1.0",
	Conflist: `{"cniVersion":"1.1.0","name":"crmv","plugins":[{"type":"macvlan","master":"crmvm0","mode":"bridge",
		"ipam":{"type":"host-local","subnet":"10.219.0.0/24","dataDir":"{{DIR}}/ipam"}}]}`,
	Setup: ipSetup(true, [][]string{{"link", "add", "crmvm0", "type", "veth", "peer", "name", "crmvp0"},
		{"link", "set", "crmvm0", "up"}, {"link", "set", "crmvp0", "up"}}),
	MinSteps: 25,
}, {
	Name: "tap (a port of a bridge in the container)+host-local, 1.1.0",
	Conflist: `{"cniVersion":"1.1.0","name":"crtap","plugins":[{"type":"tap","bridge":"crtbr0",
		"ipam":{"type":"host-local","subnet":"10.220.0.0/24","dataDir":"{{DIR}}/ipam"}}]}`,
	Setup:    ipSetup(false, [][]string{{"link", "add", "crtbr0", "type", "bridge"}, {"link", "set", "crtbr0", "up"}}),
	MinSteps: 20,
}, {
	Name: "ptp+host-local, sbr (routes moved to a table, a rule), 1.1.0",
	Conflist: `{"cniVersion":"1.1.0","name":"crsbr","plugins":[{"type":"ptp",
		"ipam":{"type":"host-local","subnet":"10.221.0.0/24","dataDir":"{{DIR}}/ipam","routes":[{"dst":"0.0.0.0/0"}]}},
		{"type":"sbr"}]}`,
	MinSteps: 40,
}, {
	Name: "host-device (a bridge port with an alias and MTU 1400)+host-local, 1.1.0",
	Conflist: `{"cniVersion":"1.1.0","name":"crhd","plugins":[{"type":"host-device","device":"crhd0","dataDir":"{{DIR}}/hd",
		"ipam":{"type":"host-local","subnet":"10.222.0.0/24","dataDir":"{{DIR}}/ipam"}}]}`,
	Setup: ipSetup(true, [][]string{{"link", "add", "crhbr0", "type", "bridge"}, {"link", "set", "crhbr0", "up"},
		{"link", "add", "crhd0", "mtu", "1400", "type", "veth", "peer", "name", "crhdp0"},
		{"link", "set", "crhd0", "alias", "uplink-a", "master", "crhbr0"}, {"link", "set", "crhd0", "up"}, {"link", "set", "crhdp0", "up"}}),
	HostDevices: []string{"crhd0"},
	MinSteps:    25,
}}

// ipSetup runs these ip(8) commands in the host namespace (inHost) or the
// container's.
func ipSetup(inHost bool, cmds [][]string) func(t *testing.T, host, cont, dir string) {
	return func(t *testing.T, host, cont, _ string) {
		ns := cont
		if inHost {
			ns = host
		}
		for _, args := range cmds {
			ip(t, ns, args...)
		}
	}
}

func ip(t *testing.T, ns string, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", append([]string{"-n", ns}, args...)...).CombinedOutput(); err != nil {
		t.Fatalf("ip %v: %v: %s", args, err, out)
	}
}

// dhcpServers makes the bridge with the server's address and starts
// dnsmasq serving DHCP on it and our dhcp daemon (state and socket in
// dir/dhcp), both in the host namespace, both started and stopped through
// internal/launch. The bridge plugin uses the bridge as it finds it.
func dhcpServers(bridge string) func(t *testing.T, host, cont, dir string) {
	return func(t *testing.T, host, _, dir string) {
		for _, args := range [][]string{{"link", "add", bridge, "type", "bridge"}, {"addr", "add", "10.218.0.1/24", "dev", bridge},
			{"link", "set", bridge, "up"}} {
			ip(t, host, args...)
		}
		d := filepath.Join(dir, "dhcp")
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
		start := func(name, log string, argv ...string) {
			f, err := os.Create(filepath.Join(d, log))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			cmd := exec.Command("ip", append([]string{"netns", "exec", host}, argv...)...)
			cmd.Stdout, cmd.Stderr = f, f
			p, err := launch.Start(cmd)
			if err != nil {
				t.Fatalf("start %s: %v", name, err)
			}
			t.Cleanup(func() {
				if err := p.Stop(name, 10*time.Second, nil); err != nil {
					t.Error(err)
				}
			})
		}
		start("dnsmasq", "dnsmasq.log", "dnsmasq", "--keep-in-foreground", "--conf-file=/dev/null", "--user=root", "--group=root",
			"--port=0", "--no-resolv", "--no-hosts", "--interface="+bridge, "--bind-interfaces", "--no-ping",
			"--dhcp-range=10.218.0.10,10.218.0.200,255.255.255.0,2m", "--dhcp-option=option:router,10.218.0.1",
			"--dhcp-leasefile="+filepath.Join(d, "dnsmasq.leases"), "--pid-file=")
		sock := filepath.Join(d, "dhcp.sock")
		start("dhcp daemon", "daemon.log", filepath.Join(testutil.OurBin(t), "dhcp"), "daemon", "-socketpath", sock,
			"-statedir", filepath.Join(d, "state"), "-timeout", "1s", "-resendtimeout", "20s")
		for end := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if _, err := os.Stat(sock); err == nil {
				break
			}
			if time.Now().After(end) {
				t.Fatal("the dhcp daemon made no socket in 10 s")
			}
		}
	}
}

// TestCrashConsistency kills each case's ADD, then its DEL, at every
// state-changing step (see the package doc) and checks what the following
// DEL and GC leave.
func TestCrashConsistency(t *testing.T) {
	for _, c := range cases {
		t.Run("ADD/"+c.Name, func(t *testing.T) {
			t.Parallel()
			Run(t, c)
		})
		t.Run("DEL/"+c.Name, func(t *testing.T) {
			t.Parallel()
			RunDel(t, c)
		})
	}
}
