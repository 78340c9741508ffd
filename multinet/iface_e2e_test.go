package multinet

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/patchbay-cni/patchbay/internal/kubetest"
	"github.com/patchbay-cni/patchbay/internal/testutil"
	"github.com/patchbay-cni/patchbay/internal/vmtest"
	"github.com/patchbay-cni/patchbay/multinet/api"
)

// masterVeth makes the veth pair name/name+"p" (both up) in the env's
// host netns: the master of macvlan and ipvlan NADs.
func (e *env) masterVeth(name string) {
	e.t.Helper()
	for _, args := range [][]string{{"link", "add", name, "type", "veth", "peer", "name", name + "p"}, {"link", "set", name, "up"}, {"link", "set", name + "p", "up"}} {
		if out, err := testutil.InNS(e.t, e.hostNS, append([]string{"ip"}, args...)...); err != nil {
			e.t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
}

// ifaceNAD is a NAD of an interface plugin on master m0 with host-local
// in 10.79.<n>.0/24 and fd00:79:<n>::/64.
func (e *env) ifaceNAD(typ string, n int, keys map[string]any) map[string]any {
	p := map[string]any{"type": typ, "master": "m0",
		"ipam": map[string]any{"type": "host-local", "dataDir": e.ipamDir,
			"ranges": []any{[]any{map[string]any{"subnet": fmt.Sprintf("10.79.%d.0/24", n)}}, []any{map[string]any{"subnet": fmt.Sprintf("fd00:79:%d::/64", n)}}}}}
	for k, v := range keys {
		p[k] = v
	}
	return map[string]any{"cniVersion": "1.0.0", "plugins": []any{p}}
}

// linkOf returns `ip -d -o link show` of an interface in the pod's netns.
func (e *env) linkOf(p *pod, ifname string) string {
	e.t.Helper()
	out, err := testutil.InNS(e.t, p.nsName, "ip", "-d", "-o", "link", "show", ifname)
	if err != nil {
		e.t.Fatalf("ip link show %s: %v: %s", ifname, err, out)
	}
	return out
}

// secondaryIface attaches two NADs of typ (the second twice, once with a
// MAC asked for in the selection where the plugin takes one) as secondary
// networks of a pod, and checks the interfaces, the network-status
// annotation (names, interfaces, both families' IPs, MACs matching the
// kernel's), CHECK, and that DEL leaves nothing.
func secondaryIface(t *testing.T, e *env, typ string, keys map[string]any, withMAC bool) {
	e.masterVeth("m0")
	e.nad("", typ+"-a", e.ifaceNAD(typ, 1, keys))
	bKeys := map[string]any{}
	for k, v := range keys {
		bKeys[k] = v
	}
	if withMAC {
		bKeys["capabilities"] = map[string]any{"mac": true}
	}
	e.nad("", typ+"-b", e.ifaceNAD(typ, 2, bKeys))
	sel := []map[string]any{{"name": typ + "-a"}, {"name": typ + "-b"}}
	const askedMAC = "02:79:00:00:00:05"
	if withMAC {
		sel = append(sel, map[string]any{"name": typ + "-b", "mac": askedMAC})
	}
	b, _ := json.Marshal(sel)
	p := e.pod("p1", map[string]string{api.NetworksAnnotation: string(b)})
	e.mustAdd(p)
	st := statusOf(t, e, p)
	if len(st) != 1+len(sel) {
		t.Fatalf("status has %d entries, want %d: %+v", len(st), 1+len(sel), st)
	}
	wantNet := []string{"", "10.79.1.", "10.79.2.", "10.79.2."}
	for i, s := range st[1:] {
		ifname := fmt.Sprintf("net%d", i+1)
		link := e.linkOf(p, ifname)
		if !strings.Contains(link, " "+typ+" ") {
			t.Errorf("%s is not a %s: %s", ifname, typ, link)
		}
		if s.Name != e.ns+"/"+sel[i]["name"].(string) || s.Interface != ifname || s.Default {
			t.Errorf("status[%d] = %+v", i+1, s)
		}
		if s.Mac == "" || !strings.Contains(link, "link/ether "+s.Mac+" ") {
			t.Errorf("status[%d] MAC %q is not %s's: %s", i+1, s.Mac, ifname, link)
		}
		var v4, v6 bool
		for _, ip := range s.IPs {
			v4 = v4 || strings.HasPrefix(ip, wantNet[i+1])
			v6 = v6 || strings.HasPrefix(ip, fmt.Sprintf("fd00:79:%d::", []int{0, 1, 2, 2}[i+1]))
		}
		if !v4 || !v6 {
			t.Errorf("status[%d] IPs %v, want one in %s0/24 and one in fd00:79:%d::/64", i+1, s.IPs, wantNet[i+1], []int{0, 1, 2, 2}[i+1])
		}
	}
	if withMAC && st[3].Mac != askedMAC {
		t.Errorf("the selection's mac %s was not applied: %s", askedMAC, st[3].Mac)
	}
	if err := e.check(p); err != nil {
		t.Errorf("CHECK: %v\n%s", err, e.log())
	}
	e.mustDel(p)
	e.nothingLeft(p, "after DEL")
	e.noStatus(p)
}

// A macvlan NAD (twice, once with a MAC from the selection) as secondary
// networks of a pod, on this machine's kernel, with the real apiserver.
func TestMacvlanSecondaryNetworks(t *testing.T) {
	e := newEnv(t)
	secondaryIface(t, e, "macvlan", map[string]any{"mode": "bridge"}, true)
}

// vmMultinetDir names, in a VM test's environment, the directory where
// the host built multinet.
const vmMultinetDir = "PATCHBAY_TEST_MULTINET_DIR"

// An ipvlan NAD (twice) as secondary networks of a pod, on Debian's
// kernel in the test VM (this machine's has no ipvlan). The apiserver and
// etcd run inside the VM too: the VM has no network to the host. Under
// QEMU without KVM they take minutes to start, hence the long deadlines.
func TestIpvlanSecondaryNetworksVM(t *testing.T) {
	if !vmtest.InVM() {
		// Built on the host before the VM boots; a private copy, as other
		// test runs may replace the shared build meanwhile.
		dir := t.TempDir()
		b, err := os.ReadFile(filepath.Join(multinetBin(t), "multinet"))
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, "multinet"), b, 0o755)
		}
		if err != nil {
			t.Fatal(err)
		}
		t.Setenv(vmMultinetDir, dir)
	}
	vmtest.Run(t, func(t *testing.T) {
		kubetest.EtcdReadyTimeout, kubetest.APIServerReadyTimeout = 5*time.Minute, 15*time.Minute
		t0 := time.Now()
		e := newEnv(t)
		t.Logf("etcd + kube-apiserver + CRDs ready in the VM after %v", time.Since(t0).Round(time.Second))
		e.opts["apiTimeoutSeconds"] = 300
		e.opts["readinessTimeoutSeconds"] = 300
		t1 := time.Now()
		secondaryIface(t, e, "ipvlan", map[string]any{"mode": "l2"}, false)
		t.Logf("ADD, CHECK and DEL of the pod took %v", time.Since(t1).Round(time.Millisecond))
	})
}
