package main

import (
	"fmt"

	"github.com/patchbay-cni/patchbay/spec"
)

// cniVersion is the newest version all three plugin sets speak (Debian's
// 1.1.1 stops at 1.0.0).
const cniVersion = "1.0.0"

// Network names, one per workload, so cache entries never collide.
const (
	netBHL  = "pbb-bhl"
	netSeed = "pbb-seed"
	netHL   = "pbb-hl"
	netConc = "pbb-conc"
	netLo   = "pbb-lo"
	netMasq = "pbb-masq"
)

// bridgeConf is bridge + host-local; seed adds tuning (mac capability) and
// portmap (portMappings capability), the CNI spec's example chain. Each
// plugin uses its defaults otherwise (portmap's backend included), as a
// user who writes this configuration gets.
func bridgeConf(name, dataDir, subnet string, seed bool) string {
	return bridgeConfOpts(name, dataDir, subnet, seed, "")
}

// masqConf is bridge + host-local with the bridge's firewall features on:
// ipMasq (nftables, the reference layout) and macspoofchk.
func masqConf(dataDir, subnet string) string {
	return bridgeConfOpts(netMasq, dataDir, subnet, false, `"ipMasq":true,"ipMasqBackend":"nftables","macspoofchk":true,`)
}

func bridgeConfOpts(name, dataDir, subnet string, seed bool, bridgeKeys string) string {
	s := fmt.Sprintf(`{"cniVersion":%q,"name":%q,"plugins":[
  {"type":"bridge","bridge":"pbb0","isGateway":true,%s
   "ipam":{"type":"host-local","dataDir":%q,"ranges":[[{"subnet":%q}]],"routes":[{"dst":"0.0.0.0/0"}]}}`,
		cniVersion, name, bridgeKeys, dataDir, subnet)
	if seed {
		s += `,
  {"type":"tuning","capabilities":{"mac":true}},
  {"type":"portmap","capabilities":{"portMappings":true}}`
	}
	return s + "]}"
}

// hostLocalConf runs host-local alone as the network's only plugin, as
// cnitool can: the plugin reads its "ipam" section.
func hostLocalConf(dataDir, subnet string) string {
	return fmt.Sprintf(`{"cniVersion":%q,"name":%q,"plugins":[
  {"type":"host-local","ipam":{"type":"host-local","dataDir":%q,"ranges":[[{"subnet":%q}]]}}]}`,
		cniVersion, netHL, dataDir, subnet)
}

func loopbackConf() string {
	return fmt.Sprintf(`{"cniVersion":%q,"name":%q,"plugins":[{"type":"loopback"}]}`, cniVersion, netLo)
}

func mustList(s string) *spec.ConfList {
	l, err := spec.ParseConfList([]byte(s))
	if err != nil {
		panic(fmt.Sprintf("bench: bad built-in configuration: %v\n%s", err, s))
	}
	return l
}

// seedCapArgs gives each attachment a distinct MAC (tuning) and one port
// mapping (portmap).
func seedCapArgs(i int) map[string]any {
	u := uint(i + 1) // the warm-up is -1
	return map[string]any{
		"mac": fmt.Sprintf("0a:58:0a:c8:%02x:%02x", (u>>8)&0xff, u&0xff),
		"portMappings": []any{
			map[string]any{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"},
		},
	}
}
