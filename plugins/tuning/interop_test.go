package tuning

import (
	"testing"
)

// TestInteropSameResult runs the reference tuning and ours on the same
// namespace and input, one after the other, and expects the same result.
func TestInteropSameResult(t *testing.T) {
	f := newFixture(t)
	keys := `"sysctl":{"net.core.somaxconn":"500","net.ipv4.conf.IFNAME.arp_notify":"1"},"runtimeConfig":{"mac":"c2:11:22:33:44:66"},
		"mtu":1400,"promisc":true,"allmulti":true,"txQLen":500`
	for _, v := range []string{"1.1.0", "1.0.0", "0.4.0", "0.3.1", "0.2.0"} {
		t.Run(v, func(t *testing.T) {
			conf := f.conf(v, keys, f.prevResult(v))
			ref, code := f.runRef(t, "ADD", conf)
			if code != 0 {
				t.Fatalf("reference ADD: %s", ref)
			}
			refLink := f.link(t, "eth0")
			if out, code := f.runRef(t, "DEL", conf); code != 0 {
				t.Fatalf("reference DEL: %s", out)
			}
			if got := f.link(t, "eth0"); got.Address != f.mac || got.MTU != 1500 {
				t.Fatalf("reference DEL did not restore eth0: %+v", got)
			}
			ours, code := f.run(t, "ADD", conf)
			if code != 0 {
				t.Fatalf("our ADD: %s", ours)
			}
			jsonEqual(t, ours, ref)
			if l := f.link(t, "eth0"); l.Address != refLink.Address || l.MTU != refLink.MTU || l.TxQLen != refLink.TxQLen ||
				l.promisc() != refLink.promisc() || l.allmulti() != refLink.allmulti() {
				t.Errorf("interface differs: reference %+v, ours %+v", refLink, l)
			}
			f.mustSucceed(t, "DEL", conf)
		})
	}
}

// TestInteropSavedValues: each plugin's DEL restores what the other's ADD
// saved, since both use <dataDir>/<containerID>_<ifname>.json. (Only link
// values: the reference neither saves nor restores sysctls.)
func TestInteropSavedValues(t *testing.T) {
	f := newFixture(t)
	conf := f.conf("1.1.0", `"mac":"c2:11:22:33:44:77","mtu":1300,"promisc":true,"allmulti":true,"txQLen":99,"sysctl":{"net.core.somaxconn":"501"}`, f.prevResult("1.1.0"))
	before := f.link(t, "eth0")
	restored := func(who string) {
		t.Helper()
		l := f.link(t, "eth0")
		if l.Address != before.Address || l.MTU != before.MTU || l.TxQLen != before.TxQLen || l.promisc() != before.promisc() || l.allmulti() != before.allmulti() {
			t.Errorf("%s: eth0 not restored: before %+v, after %+v", who, before, l)
		}
		if f.hasSaved() {
			t.Errorf("%s: saved values left", who)
		}
	}

	keys := `"mac":"c2:11:22:33:44:77","mtu":1300,"promisc":true,"allmulti":true,"txQLen":99,"sysctl":{"net.core.somaxconn":"501"}`
	res, code := f.runRef(t, "ADD", conf)
	if code != 0 {
		t.Fatalf("reference ADD: %s", res)
	}
	f.mustSucceed(t, "CHECK", f.conf("1.1.0", keys, res)) // our CHECK accepts the reference's work
	f.mustSucceed(t, "DEL", conf)
	restored("our DEL after reference ADD")

	res2 := f.mustAdd(t, conf)
	if out, code := f.runRef(t, "CHECK", f.conf("1.1.0", keys, mustJSON(t, res2))); code != 0 {
		t.Errorf("reference CHECK after our ADD: %s", out)
	}
	if out, code := f.runRef(t, "DEL", conf); code != 0 {
		t.Fatalf("reference DEL: %s", out)
	}
	restored("reference DEL after our ADD")
}
