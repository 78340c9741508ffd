package bridge

import (
	"strings"
	"testing"
)

func TestIPMasqRulesPerContainer(t *testing.T) {
	h := newHarness(t)
	_, aPath := h.container()
	_, bPath := h.container()
	conf := h.conf("1.1.0", map[string]any{"ipMasq": true, "isGateway": true}, "10.29.0.0/24", "fd00:29::/64")
	h.mustAdd(conf, "ma", aPath, "eth0")
	post := func() string {
		return in(t, h.host, "nft", "-a", "list", "chain", "inet", "cni_plugins_masquerade", "postrouting")
	}
	before := post()
	h.mustAdd(conf, "mb", bPath, "eth0")
	// A further container only adds rules: postrouting keeps its handles
	// (rebuilding it would make every ADD wait an RCU grace period).
	if after := post(); after != before {
		t.Errorf("the second ADD rebuilt postrouting:\nbefore:\n%s\nafter:\n%s", before, after)
	}

	rules := masqRules(t, h.host)
	if len(rules) != 4 || count(rules, "id: ma") != 2 || count(rules, "id: mb") != 2 {
		t.Fatalf("want 2 rules (v4, v6) per container, got %q", rules)
	}
	listing := in(t, h.host, "nft", "list", "table", "inet", "cni_plugins_masquerade")
	for _, want := range []string{
		"ip saddr 10.29.0.2 ip daddr != 10.29.0.0/24 masquerade",
		"ip6 saddr fd00:29::2 ip6 daddr != fd00:29::/64 masquerade",
		"ip daddr 224.0.0.0/4 return",
		"ip6 daddr ff00::/8 return",
		"goto masq_checks",
		"type nat hook postrouting priority srcnat",
	} {
		if !strings.Contains(listing, want) {
			t.Errorf("ruleset lacks %q:\n%s", want, listing)
		}
	}

	h.mustDel(conf, "ma", aPath, "eth0")
	rules = masqRules(t, h.host)
	if len(rules) != 2 || count(rules, "id: mb") != 2 {
		t.Fatalf("after DEL of ma: %q", rules)
	}
	h.mustDel(conf, "mb", bPath, "eth0")
	if rules := masqRules(t, h.host); len(rules) != 0 {
		t.Fatalf("after DEL of mb: %q", rules)
	}
}

func TestMacSpoofCheck(t *testing.T) {
	h := newHarness(t)
	_, contPath := h.container()
	conf := h.conf("1.1.0", map[string]any{"macspoofchk": true}, "10.30.0.0/24")
	r, _ := h.mustAdd(conf, "sp", contPath, "eth0")
	listing := in(t, h.host, "nft", "list", "table", "bridge", "nat")
	for _, want := range []string{
		`iifname "` + r.Interfaces[1].Name + `" jump cni-br-iface-sp-eth0`,
		"ether saddr " + r.Interfaces[2].Mac + " return",
		"drop",
		`comment "macspoofchk-sp-eth0"`,
	} {
		if !strings.Contains(listing, want) {
			t.Errorf("bridge nat lacks %q:\n%s", want, listing)
		}
	}
	h.mustDel(conf, "sp", contPath, "eth0")
	if listing := in(t, h.host, "nft", "list", "table", "bridge", "nat"); strings.Contains(listing, "sp-eth0") {
		t.Errorf("spoof check left behind:\n%s", listing)
	}
}

func count(list []string, sub string) int {
	n := 0
	for _, s := range list {
		if strings.Contains(s, sub) {
			n++
		}
	}
	return n
}
