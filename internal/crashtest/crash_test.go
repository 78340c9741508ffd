//go:build linux && amd64

package crashtest

import (
	"testing"

	"github.com/patchbay-cni/patchbay/internal/seed"
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
}}

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
