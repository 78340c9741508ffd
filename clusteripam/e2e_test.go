package clusteripam

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/patchbay-cni/patchbay/internal/netns"
	"github.com/patchbay-cni/patchbay/internal/testutil"
	"github.com/patchbay-cni/patchbay/spec"
)

// cniHost is a test "host" network namespace where a runtime runs the
// plugins: the apiserver is reached through a relay listening on
// 127.0.0.1 inside it (TLS end to end), with a kubeconfig and a flat file
// (credentials, node name) for cluster-ipam.
type cniHost struct {
	w          *world
	name, path string
	dir        string
	kubeconfig string
	flat       string
	binDir     string
}

func (w *world) cniHost(node string) *cniHost {
	w.t.Helper()
	h := &cniHost{w: w, dir: w.t.TempDir()}
	h.name, h.path = testutil.NewNS(w.t, "cih")
	var ln net.Listener
	if err := netns.Do(h.path, func() (err error) { ln, err = net.Listen("tcp", "127.0.0.1:0"); return }); err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() { ln.Close() })
	w.c.Relay(ln)
	h.kubeconfig = filepath.Join(h.dir, "kubeconfig")
	kc := fmt.Sprintf("apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://%s\n    certificate-authority-data: %s\n"+
		"users:\n- name: u\n  user:\n    token: %s\ncontexts:\n- name: x\n  context:\n    cluster: c\n    user: u\ncurrent-context: x\n",
		ln.Addr(), base64.StdEncoding.EncodeToString(w.c.CAPEM), w.c.Token)
	if err := os.WriteFile(h.kubeconfig, []byte(kc), 0o600); err != nil {
		w.t.Fatal(err)
	}
	h.flat = filepath.Join(h.dir, "cluster-ipam.conf")
	b, _ := json.Marshal(map[string]any{"kubernetes": map[string]any{"kubeconfig": h.kubeconfig}, "node_name": node})
	if err := os.WriteFile(h.flat, b, 0o600); err != nil {
		w.t.Fatal(err)
	}
	h.binDir = filepath.Join(h.dir, "bin")
	os.MkdirAll(h.binDir, 0o755)
	return h
}

// link puts plugin type typ from dir into the host's CNI_PATH.
func (h *cniHost) link(dir, typ string) {
	h.w.t.Helper()
	if err := os.Symlink(filepath.Join(dir, typ), filepath.Join(h.binDir, typ)); err != nil {
		h.w.t.Fatal(err)
	}
}

// ipam is the cluster-ipam dictionary of this host (world's network_name,
// the host's flat file) with extra keys.
func (h *cniHost) ipam(keys map[string]any) map[string]any {
	m := map[string]any{"type": Type, "network_name": h.w.net, "configuration_path": h.flat}
	for k, v := range keys {
		m[k] = v
	}
	return m
}

// addrsIn lists the global addresses of an interface in a namespace.
func addrsIn(t *testing.T, ns, ifname string) []string {
	t.Helper()
	out, err := testutil.InNS(t, ns, "ip", "-o", "addr", "show", "dev", ifname, "scope", "global")
	if err != nil {
		t.Fatalf("ip addr in %s: %v: %s", ns, err, out)
	}
	var as []string
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		for i := range f {
			if (f[i] == "inet" || f[i] == "inet6") && i+1 < len(f) {
				as = append(as, f[i+1])
			}
		}
	}
	return as
}

// The reference cnitool drives our bridge and the reference bridge v1.9.1
// with cluster-ipam: dual-stack ADD (exclude, gateway), the addresses are
// in the pods, CHECK, DEL frees them. Two pods per bridge.
func TestCnitool(t *testing.T) {
	for _, impl := range []struct{ name, dir func(testing.TB) string }{
		{func(testing.TB) string { return "ours" }, testutil.OurBin},
		{func(testing.TB) string { return "reference" }, testutil.RefBin},
	} {
		t.Run(impl.name(t), func(t *testing.T) {
			w := newWorld(t)
			h := w.cniHost("node-" + impl.name(t))
			h.link(impl.dir(t), "bridge")
			h.link(testutil.OurBin(t), Type)
			confDir := filepath.Join(h.dir, "net.d")
			os.MkdirAll(confDir, 0o755)
			list := map[string]any{"cniVersion": "1.0.0", "name": "cipnet", "plugins": []any{map[string]any{
				"type": "bridge", "bridge": "cib0", "isGateway": true, "capabilities": map[string]any{"ips": true},
				"ipam": h.ipam(map[string]any{"range": "10.60.0.0/24", "gateway": "10.60.0.1", "exclude": []any{"10.60.0.0/26"},
					"ipRanges": []any{map[string]any{"range": "fd60::/120", "exclude": []any{"fd60::1"}}},
					"routes":   []any{map[string]any{"dst": "10.61.0.0/16"}}}),
			}}}
			small := map[string]any{"cniVersion": "1.0.0", "name": "cipsmall", "plugins": []any{map[string]any{
				"type": "bridge", "bridge": "cib1", "ipam": h.ipam(map[string]any{"range": "10.64.0.0/30"})}}}
			for f, l := range map[string]any{"10-cip.conflist": list, "20-small.conflist": small} {
				b, _ := json.Marshal(l)
				if err := os.WriteFile(filepath.Join(confDir, f), b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			varlib := filepath.Join(h.dir, "varlib")
			os.MkdirAll(varlib, 0o700)
			cnitoolOn := func(network, pod, verb, podNS string, extra ...string) (string, error) {
				env := append([]string{"NETCONFPATH=" + confDir, "CNI_PATH=" + h.binDir,
					"CNI_ARGS=IgnoreUnknown=1;K8S_POD_NAMESPACE=" + w.ns + ";K8S_POD_NAME=" + pod}, extra...)
				return testutil.Cnitool(t, h.name, varlib, env, verb, network, podNS)
			}
			cnitool := func(pod, verb, podNS string) (string, error) { return cnitoolOn("cipnet", pod, verb, podNS) }
			seen := map[netip.Addr]bool{}
			type podNet struct{ name, ns, path string }
			var pods []podNet
			for i := range 2 {
				ns, path := testutil.NewNSLoDown(t, "cip")
				p := podNet{fmt.Sprintf("pod%d", i), ns, path}
				pods = append(pods, p)
				out, err := cnitool(p.name, "add", p.path)
				if err != nil {
					t.Fatalf("cnitool add: %v\n%s", err, out)
				}
				res, err := spec.ParseResult([]byte(out), "1.0.0")
				if err != nil {
					t.Fatalf("result: %v\n%s", err, out)
				}
				var in []string
				for _, ip := range res.IPs {
					a := ip.Address.Addr()
					if seen[a] {
						t.Errorf("%s handed out twice", a)
					}
					seen[a] = true
					in = append(in, ip.Address.String())
					if a.Is4() && (a.Less(netip.MustParseAddr("10.60.0.64")) || ip.Gateway.String() != "10.60.0.1") {
						t.Errorf("IPv4 %s (gateway %s): excluded range or wrong gateway", ip.Address, ip.Gateway)
					}
					if a.Is6() && (a.String() == "fd60::1" || !netip.MustParsePrefix("fd60::/120").Contains(a)) {
						t.Errorf("IPv6 %s excluded or outside", a)
					}
				}
				if len(res.IPs) != 2 {
					t.Fatalf("ADD result has %d addresses: %s", len(res.IPs), out)
				}
				got := addrsIn(t, p.ns, "eth0")
				for _, want := range in {
					if !strings.Contains(strings.Join(got, " "), want) {
						t.Errorf("%s not on eth0 in the pod: %v", want, got)
					}
				}
				if out, err := cnitool(p.name, "check", p.path); err != nil {
					t.Errorf("cnitool check: %v\n%s", err, out)
				}
			}
			allocs := w.wantAllocations(4, "after two dual-stack ADDs")
			for _, a := range allocs {
				if a.Spec.Pod == nil || a.Spec.Pod.Namespace != w.ns || a.Spec.Node != "node-"+impl.name(t) || a.Spec.Network != "cipnet" {
					t.Errorf("allocation %+v", a.Spec)
				}
			}
			// Static addresses through the "ips" capability (CAP_ARGS).
			sns, spath := testutil.NewNSLoDown(t, "cip")
			out, err := cnitoolOn("cipnet", "static", "add", spath, `CAP_ARGS={"ips":["10.60.0.100/24","fd60::64/120"]}`)
			if err != nil {
				t.Fatalf("cnitool add with ips: %v\n%s", err, out)
			}
			if got := strings.Join(addrsIn(t, sns, "eth0"), " "); !strings.Contains(got, "10.60.0.100/24") || !strings.Contains(got, "fd60::64/120") {
				t.Errorf("static addresses not in the pod: %s (result %s)", got, out)
			}
			pods = append(pods, podNet{"static", sns, spath})
			// The same address again: refused, naming the holder.
			_, dpath := testutil.NewNSLoDown(t, "cip")
			if out, err := cnitoolOn("cipnet", "dup", "add", dpath, `CAP_ARGS={"ips":["10.60.0.100/24"]}`); err == nil ||
				!strings.Contains(out, "address 10.60.0.100 of range 10.60.0.0/24 is already allocated to pod "+w.ns+"/static") {
				t.Errorf("a taken static address: %v\n%s", err, out)
			}
			cnitoolOn("cipnet", "dup", "del", dpath)
			// Exhaustion: a /30 has two addresses.
			var smallPods []string
			for i := range 3 {
				_, path := testutil.NewNSLoDown(t, "cip")
				out, err := cnitoolOn("cipsmall", fmt.Sprintf("s%d", i), "add", path)
				if i < 2 && err != nil {
					t.Fatalf("cnitool add %d in a /30: %v\n%s", i, err, out)
				}
				if i == 2 && (err == nil || !strings.Contains(out, "no free address in range 10.64.0.0/30 (10.64.0.1-10.64.0.2)")) {
					t.Errorf("third ADD in a /30: %v\n%q", err, out)
				}
				smallPods = append(smallPods, path)
			}
			for i, path := range smallPods {
				if out, err := cnitoolOn("cipsmall", fmt.Sprintf("s%d", i), "del", path); err != nil {
					t.Errorf("cnitool del in the /30: %v\n%s", err, out)
				}
			}
			for _, p := range pods {
				if out, err := cnitool(p.name, "del", p.path); err != nil {
					t.Fatalf("cnitool del: %v\n%s", err, out)
				}
			}
			w.wantAllocations(0, "after DEL")
		})
	}
}
