// Package node deploys multinet on a real single-node cluster
// (internal/nodetest: kubelet v1.32, containerd 1.6) the way a user does —
// the product image imported, deploy/crds and deploy/multinet applied — and
// drives it through kubelet: pods with the networks annotation, deletions,
// restarts, an upgrade, a burst of pods, the RBAC, an uninstall, and the
// shipped example conflist under containerd 1.6. See README.md.
package node

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"sigs.k8s.io/yaml"

	"github.com/patchbay-cni/patchbay/internal/link"
	"github.com/patchbay-cni/patchbay/internal/nodetest"
	"github.com/patchbay-cni/patchbay/internal/ociimage"
)

// repo is the repository's root, from this package's directory.
const repo = "../.."

// Extra host directories the manifests mount (besides nodetest.HostPaths):
// each is a test directory inside the node, never the machine's.
var extraHostDirs = []string{"/etc/cni/multus/net.d", "/run/multinet"}

// nodeBin is the node's /opt/cni/bin before multinet is installed: our
// plugins' multi-call binary and the three types the default network and
// containerd need. The installer must bring multinet, the shim and the
// other plugin types.
var nodeBin string

func TestMain(m *testing.M) {
	opts := nodetest.DefaultOptions()
	opts.HostDirs = extraHostDirs
	dir, err := os.MkdirTemp("", "patchbay-nodebin-")
	if err == nil {
		nodeBin = dir
		err = makeNodeBin(dir)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "node bin dir:", err)
		os.Exit(1)
	}
	opts.CNIBinDir = dir
	nodetest.Main(m, opts) // exits
}

// sharedNode is the package's node (nodetest.Shared). The node copies
// nodeBin when it starts, and nodetest.Main exits without returning: the
// first test to end removes the directory.
func sharedNode(t *testing.T) *nodetest.Node {
	t.Cleanup(func() { removeNodeBin.Do(func() { os.RemoveAll(nodeBin) }) })
	return nodetest.Shared(t)
}

var removeNodeBin sync.Once

func makeNodeBin(dir string) error {
	bin := os.Getenv("PATCHBAY_BIN")
	if bin == "" {
		return fmt.Errorf("PATCHBAY_BIN is not set: `make test` sets it to bin/ (after make build)")
	}
	b, err := os.ReadFile(filepath.Join(bin, "patchbay-plugins"))
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "patchbay-plugins"), b, 0o755); err != nil {
		return err
	}
	for _, t := range []string{"bridge", "host-local", "loopback"} {
		if err := os.Symlink("patchbay-plugins", filepath.Join(dir, t)); err != nil {
			return err
		}
	}
	return nil
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	c, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return c
}

func binDir(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("PATCHBAY_BIN")
	if bin == "" {
		t.Fatal("PATCHBAY_BIN is not set: `make test` sets it to bin/")
	}
	for _, f := range []string{"multinet", "patchbay-plugins"} {
		if _, err := os.Stat(filepath.Join(bin, f)); err != nil {
			t.Fatalf("%v: run `make build`", err)
		}
	}
	return bin
}

// productImage writes the product image of binDir (what `make image`
// writes) under ref and imports it into the node.
func productImage(t *testing.T, n *nodetest.Node, bin, ref string) {
	t.Helper()
	archive := filepath.Join(t.TempDir(), ociimage.ProductArchive)
	if _, _, err := ociimage.WriteProduct(bin, archive, ref); err != nil {
		t.Fatal(err)
	}
	if err := n.ImportImage(ctxT(t, 2*time.Minute), archive); err != nil {
		t.Fatal(err)
	}
}

// changedBin is a copy of bin whose multinet, shim and plugins differ from
// bin's (a marker appended: the programs still run), for an upgrade.
func changedBin(t *testing.T, bin, marker string) string {
	t.Helper()
	out := t.TempDir()
	des, err := os.ReadDir(bin)
	if err != nil {
		t.Fatal(err)
	}
	for _, de := range des {
		from, to := filepath.Join(bin, de.Name()), filepath.Join(out, de.Name())
		if de.Type()&os.ModeSymlink != 0 {
			target, _ := os.Readlink(from)
			if err := os.Symlink(target, to); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if !de.Type().IsRegular() || strings.HasSuffix(de.Name(), ".tar") {
			continue
		}
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		switch de.Name() {
		case "multinet", "multinet-shim", "patchbay-plugins":
			b = append(b, marker...)
		}
		if err := os.WriteFile(to, b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// kustomize renders a kustomization directory the way `kubectl apply -k`
// does, for the subset deploy/ uses — resources (files, or directories with
// a Kustomization) and patches (strategic merge patches of a DaemonSet,
// with kustomize's library underneath: apimachinery's strategicpatch) —
// and refuses any other field, so that a kustomization this cannot render
// fails here rather than being misread.
func kustomize(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "Kustomization"))
	if err != nil {
		t.Fatal(err)
	}
	var k map[string]any
	if err := yaml.Unmarshal(b, &k); err != nil {
		t.Fatalf("%s/Kustomization: %v", dir, err)
	}
	var objs []*unstructured.Unstructured
	for key, v := range k {
		switch key {
		case "apiVersion", "kind":
		case "resources":
			for _, r := range v.([]any) {
				p := filepath.Join(dir, r.(string))
				if st, err := os.Stat(p); err == nil && st.IsDir() {
					objs = append(objs, kustomize(t, p)...)
					continue
				}
				data, err := os.ReadFile(p)
				if err != nil {
					t.Fatal(err)
				}
				o, err := nodetest.DecodeManifests(data)
				if err != nil {
					t.Fatalf("%s: %v", p, err)
				}
				objs = append(objs, o...)
			}
		case "patches":
		default:
			t.Fatalf("%s/Kustomization: field %q not understood by this test's renderer", dir, key)
		}
	}
	patches, _ := k["patches"].([]any)
	for _, p := range patches {
		pm := p.(map[string]any)
		if len(pm) != 1 || pm["path"] == nil {
			t.Fatalf("%s/Kustomization: patch %v: only {path: FILE} is understood", dir, pm)
		}
		data, err := os.ReadFile(filepath.Join(dir, pm["path"].(string)))
		if err != nil {
			t.Fatal(err)
		}
		patchJSON, err := yaml.YAMLToJSON(data)
		if err != nil {
			t.Fatal(err)
		}
		var target unstructured.Unstructured
		if err := json.Unmarshal(patchJSON, &target.Object); err != nil {
			t.Fatal(err)
		}
		if target.GetKind() != "DaemonSet" {
			t.Fatalf("patch %s: only DaemonSet patches are understood", pm["path"])
		}
		found := false
		for i, o := range objs {
			if o.GetKind() != target.GetKind() || o.GetName() != target.GetName() || o.GetNamespace() != target.GetNamespace() {
				continue
			}
			orig, err := o.MarshalJSON()
			if err != nil {
				t.Fatal(err)
			}
			merged, err := strategicpatch.StrategicMergePatch(orig, patchJSON, appsv1.DaemonSet{})
			if err != nil {
				t.Fatalf("patch %s: %v", pm["path"], err)
			}
			var out unstructured.Unstructured
			if err := out.UnmarshalJSON(merged); err != nil {
				t.Fatal(err)
			}
			objs[i], found = &out, true
		}
		if !found {
			t.Fatalf("patch %s: no %s %s/%s in the resources", pm["path"], target.GetKind(), target.GetNamespace(), target.GetName())
		}
	}
	return objs
}

// manifests is what a user applies for a mode, as YAML documents:
// thick `kubectl apply -f deploy/crds/ -f deploy/multinet/`, thin
// `kubectl apply -f deploy/crds/ && kubectl apply -k deploy/multinet-thin/`.
func manifests(t *testing.T, mode string) []byte {
	t.Helper()
	var objs []*unstructured.Unstructured
	files := []string{filepath.Join(repo, "deploy", "crds"), filepath.Join(repo, "deploy", "multinet")}
	if mode == "thin" {
		files = files[:1]
	}
	for _, f := range files {
		paths, err := nodetest.ManifestFiles(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range paths {
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			o, err := nodetest.DecodeManifests(b)
			if err != nil {
				t.Fatalf("%s: %v", p, err)
			}
			objs = append(objs, o...)
		}
	}
	if mode == "thin" {
		objs = append(objs, kustomize(t, filepath.Join(repo, "deploy", "multinet-thin"))...)
	}
	return toYAML(t, objs)
}

// toYAML writes objects as YAML documents (JSON documents cannot be
// separated by "---").
func toYAML(t *testing.T, objs []*unstructured.Unstructured) []byte {
	t.Helper()
	var out []byte
	for _, o := range objs {
		b, err := yaml.Marshal(o.Object)
		if err != nil {
			t.Fatal(err)
		}
		out = append(append(out, b...), "---\n"...)
	}
	return out
}

// networkStatus is one entry of k8s.v1.cni.cncf.io/network-status.
type networkStatus struct {
	Name      string   `json:"name"`
	Interface string   `json:"interface"`
	IPs       []string `json:"ips"`
	MAC       string   `json:"mac"`
	Default   bool     `json:"default"`
}

func statusOf(t *testing.T, pod *corev1.Pod) []networkStatus {
	t.Helper()
	v, ok := pod.Annotations["k8s.v1.cni.cncf.io/network-status"]
	if !ok {
		t.Fatalf("pod %s/%s has no network-status", pod.Namespace, pod.Name)
	}
	var st []networkStatus
	if err := json.Unmarshal([]byte(v), &st); err != nil {
		t.Fatalf("pod %s/%s network-status %q: %v", pod.Namespace, pod.Name, v, err)
	}
	return st
}

// checkPodNetworks checks that the pod has exactly the interfaces its
// network-status names (besides lo), each with those addresses and MAC, in
// the subnets expected by interface name, and returns the status.
func checkPodNetworks(t *testing.T, n *nodetest.Node, pod *corev1.Pod, want map[string]string) []networkStatus {
	t.Helper()
	st := statusOf(t, pod)
	ifs, err := n.PodInterfaces(pod)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]nodetest.Interface{}
	for _, i := range ifs {
		if i.Name != "lo" {
			byName[i.Name] = i
		}
	}
	var names []string
	for _, s := range st {
		names = append(names, s.Name)
		i, ok := byName[s.Interface]
		if !ok {
			t.Errorf("pod %s: status names %s, which the pod does not have (%v)", pod.Name, s.Interface, ifs)
			continue
		}
		var addrs []string
		for _, a := range i.Addrs {
			if a.Addr().Is4() {
				addrs = append(addrs, a.Addr().String())
			}
		}
		var statusIPs []string
		for _, ip := range s.IPs {
			ip, _, _ = strings.Cut(ip, "/") // multinet writes CIDR notation
			statusIPs = append(statusIPs, ip)
		}
		if !slices.Equal(addrs, statusIPs) || !strings.EqualFold(i.MAC, s.MAC) {
			t.Errorf("pod %s %s: status ips %v mac %s, interface has %v %s", pod.Name, s.Interface, s.IPs, s.MAC, addrs, i.MAC)
		}
		if subnet, ok := want[s.Interface]; ok {
			p := netip.MustParsePrefix(subnet)
			if len(statusIPs) != 1 || !p.Contains(netip.MustParseAddr(statusIPs[0])) {
				t.Errorf("pod %s %s: ips %v, want one in %s", pod.Name, s.Interface, s.IPs, subnet)
			}
		}
	}
	var wantNames []string
	for k := range want {
		wantNames = append(wantNames, k)
	}
	sort.Strings(names)
	sort.Strings(wantNames)
	if !slices.Equal(names, wantNames) || len(byName) != len(st) {
		t.Errorf("pod %s: status interfaces %v, pod interfaces %d, want %v", pod.Name, names, len(byName), wantNames)
	}
	if len(st) > 0 && (!st[0].Default || st[0].Interface != "eth0") {
		t.Errorf("pod %s: first status entry %+v is not the default eth0", pod.Name, st[0])
	}
	return st
}

// waitMultinetConfig waits until pods get their network through
// multinet: the runtime reloads /etc/cni/net.d on its own schedule after
// a file there changes. It creates probe pods (no annotation) until one
// has a network-status, deleting each.
func waitMultinetConfig(t *testing.T, n *nodetest.Node, ns string) {
	t.Helper()
	c := ctxT(t, 2*time.Minute)
	for i := 0; ; i++ {
		name := fmt.Sprintf("probe-%d", i)
		if _, err := n.Apply(c, []byte(podYAML(ns, name, ""))); err != nil {
			t.Fatal(err)
		}
		pod, err := n.WaitPodRunning(c, ns, name)
		if err != nil {
			t.Fatal(err)
		}
		_, ok := pod.Annotations["k8s.v1.cni.cncf.io/network-status"]
		if err := n.Client.CoreV1().Pods(ns).Delete(c, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := n.WaitPodGone(c, ns, name); err != nil {
			t.Fatal(err)
		}
		if ok {
			if i > 0 {
				t.Logf("the runtime used multinet's configuration from probe pod %d on", i)
			}
			return
		}
		if i == 20 {
			t.Fatal("pods still do not get multinet's network-status: the runtime did not load multinet's configuration")
		}
		time.Sleep(time.Second)
	}
}

// leftovers lists what attachments left on the node: host-local
// reservations, multinet's cache files, libcni result cache entries, and
// veths on the node (each pod attachment has one), besides those of pods
// still running (live: the number of attachments they hold).
func leftovers(t *testing.T, n *nodetest.Node, live int) []string {
	t.Helper()
	var out []string
	nets, _ := os.ReadDir(n.HostPath("/var/lib/cni/networks"))
	for _, d := range nets {
		files, _ := os.ReadDir(filepath.Join(n.HostPath("/var/lib/cni/networks"), d.Name()))
		for _, f := range files {
			if _, err := netip.ParseAddr(f.Name()); err == nil {
				out = append(out, "host-local "+d.Name()+"/"+f.Name())
			}
		}
	}
	if live > 0 {
		return out // reservations are checked by the caller against live pods
	}
	files, _ := os.ReadDir(n.HostPath("/var/lib/cni/multus"))
	for _, f := range files {
		if f.Name() != "results" {
			out = append(out, "multinet cache "+f.Name())
		}
	}
	for _, d := range []string{"/var/lib/cni/multus/results", "/var/lib/cni/results"} {
		files, _ := os.ReadDir(n.HostPath(d))
		for _, f := range files {
			out = append(out, "result cache "+d+"/"+f.Name())
		}
	}
	return out
}

// nodeVeths counts the veths in the node's network namespace (the host
// ends of pod attachments).
func nodeVeths(t *testing.T, n *nodetest.Node) int {
	t.Helper()
	ifs, err := nodetest.Interfaces(n.NetnsPath())
	if err != nil {
		t.Fatal(err)
	}
	c := 0
	for _, i := range ifs {
		if i.Kind == "veth" && !strings.HasPrefix(i.Name, macvlanMaster) {
			c++
		}
	}
	return c
}

// macvlanMaster is the node's interface under the red NAD's macvlans:
// one end of a veth pair (macvlanMaster+"a", peer macvlanMaster+"b"), as
// this kernel has no dummy and a macvlan needs a lower device with carrier.
const macvlanMaster = "mvup"

// addMacvlanMaster creates the veth pair under the macvlan NAD in the
// node's namespace (once per node) and removes it when the test ends.
func addMacvlanMaster(t *testing.T, n *nodetest.Node) {
	t.Helper()
	ns, err := link.Open(n.NetnsPath())
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: macvlanMaster + "a"}, PeerName: macvlanMaster + "b"}
	if err := ns.H.LinkAdd(veth); err != nil {
		t.Fatalf("create the macvlan master in the node: %v", err)
	}
	t.Cleanup(func() {
		ns, err := link.Open(n.NetnsPath())
		if err != nil {
			t.Error(err)
			return
		}
		defer ns.Close()
		if _, err := ns.DelLink(macvlanMaster + "a"); err != nil {
			t.Errorf("remove the macvlan master: %v", err)
		}
	})
	for _, name := range []string{macvlanMaster + "a", macvlanMaster + "b"} {
		l, err := ns.H.LinkByName(name)
		if err == nil {
			err = ns.H.LinkSetUp(l)
		}
		if err != nil {
			t.Fatalf("set %s up: %v", name, err)
		}
	}
}

// macvlanNADYAML is a NetworkAttachmentDefinition: our macvlan (bridge
// mode) on macvlanMaster with host-local.
func macvlanNADYAML(ns, name, subnet string) string {
	return nadObjectYAML(ns, name, `{"cniVersion": "1.0.0", "plugins": [{"type": "macvlan", "master": "`+macvlanMaster+`a", "mode": "bridge", "ipam": {"type": "host-local", "subnet": "`+subnet+`"}}]}`)
}

// checkMacvlan checks that the pod's interface st names is a macvlan on
// the node's macvlanMaster.
func checkMacvlan(t *testing.T, n *nodetest.Node, pod *corev1.Pod, st networkStatus) {
	t.Helper()
	ifs, err := n.PodInterfaces(pod)
	if err != nil {
		t.Fatal(err)
	}
	node, err := nodetest.Interfaces(n.NetnsPath())
	if err != nil {
		t.Fatal(err)
	}
	master := 0
	for _, i := range node {
		if i.Name == macvlanMaster+"a" {
			master = i.Index
		}
	}
	for _, i := range ifs {
		if i.Name == st.Interface {
			if i.Kind != "macvlan" || master == 0 || i.Peer != master {
				t.Errorf("pod %s %s: kind %s on link %d, want a macvlan on %sa (index %d)", pod.Name, i.Name, i.Kind, i.Peer, macvlanMaster, master)
			}
			return
		}
	}
	t.Errorf("pod %s: no interface %s (%v)", pod.Name, st.Interface, ifs)
}

// podYAML is a busybox pod with the networks annotation (none if empty).
func podYAML(ns, name, networks string) string {
	ann := ""
	if networks != "" {
		b, _ := json.Marshal(networks)
		ann = "\n  annotations:\n    k8s.v1.cni.cncf.io/networks: " + string(b)
	}
	return `apiVersion: v1
kind: Pod
metadata:
  name: ` + name + `
  namespace: ` + ns + ann + `
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: bb
    image: ` + nodetest.BusyboxImage + `
    imagePullPolicy: Never
    command: ["sleep", "3600"]
---
`
}

// nadYAML is a NetworkAttachmentDefinition: our bridge with host-local,
// taking a MAC from the annotation (mac capability).
func nadYAML(ns, name, bridge, subnet string) string {
	return nadObjectYAML(ns, name, `{"cniVersion": "1.0.0", "plugins": [{"type": "bridge", "bridge": "`+bridge+`", "capabilities": {"mac": true}, "ipam": {"type": "host-local", "subnet": "`+subnet+`"}}]}`)
}

// nadObjectYAML is a NetworkAttachmentDefinition with config cfg.
func nadObjectYAML(ns, name, cfg string) string {
	b, _ := json.Marshal(cfg)
	return `apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata:
  name: ` + name + `
  namespace: ` + ns + `
spec:
  config: ` + string(b) + `
---
`
}

// waitAllRunning waits for every named pod to be Running, in parallel.
func waitAllRunning(ctx context.Context, n *nodetest.Node, ns string, names []string) map[string]*corev1.Pod {
	type res struct {
		pod *corev1.Pod
		err error
	}
	ch := make(chan res, len(names))
	for _, name := range names {
		go func() {
			p, err := n.WaitPodRunning(ctx, ns, name)
			ch <- res{p, err}
		}()
	}
	out := map[string]*corev1.Pod{}
	var errs []string
	for range names {
		r := <-ch
		if r.err != nil {
			errs = append(errs, r.err.Error())
			continue
		}
		out[r.pod.Name] = r.pod
	}
	if len(errs) > 0 {
		out[""] = &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{"errors": strings.Join(errs, "\n")}}}
	}
	return out
}

// sandboxFailures counts the FailedCreatePodSandBox events of a namespace
// (kubelet retries such a pod; a pod only fails for good at the end).
func sandboxFailures(ctx context.Context, n *nodetest.Node, ns string) (int, []string) {
	evs, err := n.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return -1, []string{err.Error()}
	}
	c := 0
	var msgs []string
	for _, e := range evs.Items {
		if e.Reason == "FailedCreatePodSandBox" {
			c += int(max(e.Count, 1))
			msgs = append(msgs, e.InvolvedObject.Name+": "+e.Message)
		}
	}
	return c, msgs
}
