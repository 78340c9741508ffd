package node

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/patchbay-cni/patchbay/internal/nodetest"
	"github.com/patchbay-cni/patchbay/internal/ociimage"
	"github.com/patchbay-cni/patchbay/spec"
)

// Subnets of the test's networks.
const (
	podSubnet  = nodetest.PodCIDR
	blueSubnet = "10.78.1.0/24"
	// red is a macvlan NAD (bridge mode) on macvlanMaster.
	redSubnet = "10.78.2.0/24"
	// burstPods are created at once in the burst phase.
	burstPods = 50
)

// clusterStatusName is the cluster network's name in network-status: the
// on-disk network (nodetest's bridge) in multusNamespace.
const clusterStatusName = "kube-system/" + nodetest.BridgeNetwork

// TestThin deploys thin mode (`kubectl apply -k deploy/multinet-thin/`)
// and runs every phase on it.
func TestThin(t *testing.T) { exercise(t, "thin") }

// TestThick deploys thick mode, the default (`kubectl apply -f deploy/crds/
// -f deploy/multinet/`), and runs every phase on it.
func TestThick(t *testing.T) { exercise(t, "thick") }

// deployment is one installed mode.
type deployment struct {
	n         *nodetest.Node
	mode      string
	manifests []byte
	bin       string // the binaries of the image installed
}

func exercise(t *testing.T, mode string) {
	n := sharedNode(t)
	d := &deployment{n: n, mode: mode, bin: binDir(t), manifests: manifests(t, mode)}
	phases := []struct {
		name string
		f    func(t *testing.T)
	}{
		{"install", d.install},
		{"rbac", d.rbac},
		{"annotations", d.annotations},
		{"restart", d.restart},
		{"upgrade", d.upgrade},
		{"burst", d.burst},
		{"uninstall", d.uninstall},
	}
	for _, p := range phases {
		start := time.Now()
		ok := t.Run(p.name, p.f)
		t.Logf("%s %s: %v", mode, p.name, time.Since(start).Round(100*time.Millisecond))
		if !ok {
			// Later phases need the earlier ones; uninstall anyway, so a
			// later test on the shared node starts clean.
			if p.name != "uninstall" {
				d.remove(t)
			}
			return
		}
	}
}

const dsNamespace, dsName = "kube-system", "multinet"

// install: the product image imported, the manifests applied; the
// DaemonSet comes up on the node and installs multinet in front of the
// bridge default network.
func (d *deployment) install(t *testing.T) {
	n, c := d.n, ctxT(t, 3*time.Minute)
	productImage(t, n, d.bin, ociimage.ProductRef)
	start := time.Now()
	if _, err := n.Apply(c, d.manifests); err != nil {
		t.Fatal(err)
	}
	pod, err := n.WaitDaemonSet(c, dsNamespace, dsName)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("DaemonSet Ready %v after apply", time.Since(start).Round(100*time.Millisecond))
	// The conflist sorts first, in the version containerd 1.6 takes.
	first, err := n.Run(c, "sh", "-c", "ls /etc/cni/net.d | head -1")
	if err != nil || strings.TrimSpace(first) != "00-multinet.conflist" {
		t.Fatalf("first configuration: %q %v", first, err)
	}
	b, err := os.ReadFile(n.HostPath("/etc/cni/net.d/00-multinet.conflist"))
	if err != nil {
		t.Fatal(err)
	}
	l, err := spec.ParseConfList(b)
	wantType := map[string]string{"thin": "multinet", "thick": "multinet-shim"}[d.mode]
	if err != nil || l.CNIVersion != "1.0.0" || strings.Join(l.CNIVersions, ",") != "1.0.0,1.1.0" || len(l.Plugins) != 1 || l.Plugins[0].Network.Type != wantType {
		t.Errorf("installed conflist (%v):\n%s", err, b)
	}
	for _, f := range []string{"multinet", "patchbay-plugins", "tuning", "portmap", "bridge"} {
		if _, err := os.Stat(n.HostPath("/opt/cni/bin/" + f)); err != nil {
			t.Errorf("not installed: %v", err)
		}
	}
	shim := n.HostPath("/opt/cni/bin/multinet-shim")
	if _, err := os.Stat(shim); (err == nil) != (d.mode == "thick") {
		t.Errorf("%s mode: multinet-shim: %v", d.mode, err)
	}
	waitMultinetConfig(t, n, n.Namespace(t, d.mode+"-probe"))
	logs := d.installLogs(t, pod)
	if !strings.Contains(logs, "containerd://1.6") {
		t.Errorf("installer did not read the node's runtime:\n%s", logs)
	}
	if d.mode == "thin" {
		if !strings.Contains(logs, "node-bound TokenRequest") {
			t.Errorf("thin plugin token is not node-bound:\n%s", logs)
		}
		for _, f := range []string{"multinet.kubeconfig", "token", "ca.crt"} {
			if st, err := os.Stat(n.HostPath("/etc/cni/net.d/multinet.d/" + f)); err != nil || st.Mode().Perm() != 0o600 {
				t.Errorf("credentials %s: %v %v", f, st, err)
			}
		}
	}
}

// installLogs is the installer's output: the init container in thick
// mode, the container in thin mode.
func (d *deployment) installLogs(t *testing.T, pod *corev1.Pod) string {
	t.Helper()
	container := "multinet"
	if d.mode == "thick" {
		container = "install"
	}
	logs, err := d.n.Logs(ctxT(t, time.Minute), pod.Namespace, pod.Name, container)
	if err != nil {
		t.Fatal(err)
	}
	return logs
}

// annotations: pods with the networks annotation in both forms get their
// interfaces, addresses and a network-status that says so; traffic flows on
// a secondary network; deleting the pods leaves nothing behind.
func (d *deployment) annotations(t *testing.T) {
	n, c := d.n, ctxT(t, 4*time.Minute)
	ns := n.Namespace(t, d.mode+"-ann")
	addMacvlanMaster(t, n)
	m := nadYAML(ns, "blue", "blue0", blueSubnet) + macvlanNADYAML(ns, "red", redSubnet) +
		podYAML(ns, "comma", "blue, red") +
		podYAML(ns, "json", `[{"name": "blue", "interface": "data0", "mac": "02:00:00:00:10:01"}, {"name": "red", "namespace": "`+ns+`"}]`) +
		podYAML(ns, "plain", "")
	if _, err := n.Apply(c, []byte(m)); err != nil {
		t.Fatal(err)
	}
	pods := waitAllRunning(c, n, ns, []string{"comma", "json", "plain"})
	if e := pods[""]; e != nil {
		t.Fatal(e.Annotations["errors"])
	}
	blue, red := ns+"/blue", ns+"/red"
	want := map[string]map[string]string{
		"comma": {clusterStatusName: podSubnet, blue: blueSubnet, red: redSubnet},
		"json":  {clusterStatusName: podSubnet, blue: blueSubnet, red: redSubnet},
		"plain": {clusterStatusName: podSubnet},
	}
	statuses := map[string][]networkStatus{}
	for name, w := range want {
		statuses[name] = checkPodNetworks(t, n, pods[name], w)
	}
	if st := statuses["json"]; len(st) == 3 && (st[1].Interface != "data0" || st[1].MAC != "02:00:00:00:10:01") {
		t.Errorf("json pod: blue attachment %+v, want interface data0 with mac 02:00:00:00:10:01", st[1])
	}
	if st := statuses["comma"]; len(st) == 3 && (st[1].Interface != "net1" || st[2].Interface != "net2") {
		t.Errorf("comma pod: interfaces %s %s, want net1 net2", st[1].Interface, st[2].Interface)
	}
	// red is a macvlan on the node's macvlanMaster in each pod: the
	// interface the status names is a macvlan with the status's MAC.
	for _, name := range []string{"comma", "json"} {
		if st := statuses[name]; len(st) == 3 {
			checkMacvlan(t, n, pods[name], st[2])
		}
	}
	// Traffic on blue (bridge) and on red (macvlan siblings in bridge
	// mode), from the comma pod to the json pod.
	if st := statuses["json"]; len(st) == 3 {
		for i, net := range map[int]string{1: "blue", 2: "red"} {
			if out, _, err := n.Exec(c, ns, "comma", "bb", "ping", "-c", "2", "-W", "2", addrOnly(st[i].IPs[0])); err != nil {
				t.Errorf("ping over %s: %v\n%s", net, err, out)
			}
		}
	}
	// Delete: every attachment goes, with its address and cache files.
	for name := range want {
		if err := n.Client.CoreV1().Pods(ns).Delete(c, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for name := range want {
		if err := n.WaitPodGone(c, ns, name); err != nil {
			t.Fatal(err)
		}
	}
	d.nothingLeft(t)
}

// nothingLeft: with no pod left on the node (the DaemonSet's is
// hostNetwork), no attachment has left anything.
func (d *deployment) nothingLeft(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		left := leftovers(t, d.n, 0)
		veths := nodeVeths(t, d.n)
		if len(left) == 0 && veths == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("left behind after every pod was deleted: %d veths on the node; %v", veths, left)
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// restart: the multinet pod is deleted (the DaemonSet makes a new one)
// while pods are being created and while traffic flows between two pods
// over a secondary network: no packet is lost, every pod comes up with all
// its networks, and deleting them leaves nothing.
func (d *deployment) restart(t *testing.T) {
	n, c := d.n, ctxT(t, 5*time.Minute)
	ns := n.Namespace(t, d.mode+"-restart")
	m := nadYAML(ns, "blue", "blue0", blueSubnet) + podYAML(ns, "a", "blue") + podYAML(ns, "b", "blue")
	if _, err := n.Apply(c, []byte(m)); err != nil {
		t.Fatal(err)
	}
	pods := waitAllRunning(c, n, ns, []string{"a", "b"})
	if e := pods[""]; e != nil {
		t.Fatal(e.Annotations["errors"])
	}
	bIP := addrOnly(statusOf(t, pods["b"])[1].IPs[0])
	// 40 pings, 0.1 s apart, while the daemon restarts.
	pinged := make(chan string, 1)
	go func() {
		out, _, err := n.Exec(c, ns, "a", "bb", "ping", "-c", "40", "-i", "0.1", "-W", "2", bIP)
		pinged <- fmt.Sprintf("%s %v", out, err)
	}()
	time.Sleep(500 * time.Millisecond)
	old, err := n.WaitDaemonSet(c, dsNamespace, dsName)
	if err != nil {
		t.Fatal(err)
	}
	var created []string
	var more strings.Builder
	for i := range 8 {
		created = append(created, fmt.Sprintf("p%d", i))
		more.WriteString(podYAML(ns, created[i], "blue"))
	}
	if err := n.Client.CoreV1().Pods(dsNamespace).Delete(c, old.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Apply(c, []byte(more.String())); err != nil {
		t.Fatal(err)
	}
	if err := d.waitNewPod(c, old.Name); err != nil {
		t.Fatal(err)
	}
	got := waitAllRunning(c, n, ns, created)
	if e := got[""]; e != nil {
		t.Fatal(e.Annotations["errors"])
	}
	for _, name := range created {
		checkPodNetworks(t, n, got[name], map[string]string{clusterStatusName: podSubnet, ns + "/blue": blueSubnet})
	}
	out := <-pinged
	if !strings.Contains(out, "40 packets transmitted, 40 packets received") {
		t.Errorf("traffic during the restart: %s", out)
	}
	failures, msgs := sandboxFailures(c, n, ns)
	t.Logf("pods created during the restart: %d, sandbox failures %d", len(created), failures)
	if failures > 0 {
		// The thick shim waits for the restarted daemon; thin mode has
		// no daemon on the path.
		t.Errorf("sandbox failures during a %s daemon restart: %v", d.mode, msgs)
	}
	d.deleteNamespacePods(t, c, ns)
}

// addrOnly drops a prefix length.
func addrOnly(ip string) string {
	ip, _, _ = strings.Cut(ip, "/")
	return ip
}

// waitNewPod waits until the DaemonSet's pod is another than old, Ready.
func (d *deployment) waitNewPod(ctx context.Context, old string) error {
	for {
		p, err := d.n.WaitDaemonSet(ctx, dsNamespace, dsName)
		if err != nil {
			return err
		}
		if p.Name != old {
			for _, cond := range p.Status.Conditions {
				if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no new multinet pod: %w", ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// deleteNamespacePods deletes every pod of ns, waits until they are gone,
// and checks that nothing is left.
func (d *deployment) deleteNamespacePods(t *testing.T, c context.Context, ns string) {
	t.Helper()
	pods, err := d.n.Client.CoreV1().Pods(ns).List(c, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.n.Client.CoreV1().Pods(ns).DeleteCollection(c, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if err := d.n.WaitPodGone(c, ns, p.Name); err != nil {
			t.Fatal(err)
		}
	}
	d.nothingLeft(t)
}

// upgrade: the DaemonSet moves to a new image whose binaries differ while
// pods are being created: no pod fails, and the node ends up with the new
// binaries.
func (d *deployment) upgrade(t *testing.T) {
	n, c := d.n, ctxT(t, 5*time.Minute)
	ns := n.Namespace(t, d.mode+"-upgrade")
	newBin := changedBin(t, d.bin, "\npatchbay-upgrade-marker\n")
	newRef := strings.TrimSuffix(ociimage.ProductRef, "-dev") + "-upgrade"
	productImage(t, n, newBin, newRef)
	if _, err := n.Apply(c, []byte(nadYAML(ns, "blue", "blue0", blueSubnet))); err != nil {
		t.Fatal(err)
	}
	old, err := n.WaitDaemonSet(c, dsNamespace, dsName)
	if err != nil {
		t.Fatal(err)
	}
	// Pods keep coming while the DaemonSet rolls.
	var names []string
	created := make(chan error, 1)
	go func() {
		for i := range 12 {
			name := fmt.Sprintf("u%d", i)
			if _, err := n.Apply(c, []byte(podYAML(ns, name, "blue"))); err != nil {
				created <- err
				return
			}
			names = append(names, name)
			time.Sleep(250 * time.Millisecond)
		}
		created <- nil
	}()
	time.Sleep(500 * time.Millisecond)
	upgraded := bytes.ReplaceAll(d.manifests, []byte(ociimage.ProductRef), []byte(newRef))
	if _, err := n.Apply(c, upgraded); err != nil {
		t.Fatal(err)
	}
	if err := d.waitNewPod(c, old.Name); err != nil {
		t.Fatal(err)
	}
	if err := <-created; err != nil {
		t.Fatal(err)
	}
	got := waitAllRunning(c, n, ns, names)
	if e := got[""]; e != nil {
		t.Fatal(e.Annotations["errors"])
	}
	for _, name := range names {
		checkPodNetworks(t, n, got[name], map[string]string{clusterStatusName: podSubnet, ns + "/blue": blueSubnet})
	}
	failures, msgs := sandboxFailures(c, n, ns)
	t.Logf("pods created during the upgrade: %d, sandbox failures (kubelet retried) %d", len(names), failures)
	if failures > 0 {
		// Thin mode keeps its conflist, its token and a complete binary
		// at every moment of the upgrade; in thick mode the shim waits for
		// the replaced daemon (daemonWaitSeconds): nothing may fail.
		t.Errorf("sandbox failures during a %s upgrade: %v", d.mode, msgs)
	}
	for _, f := range []string{"multinet", "patchbay-plugins"} {
		want, _ := os.ReadFile(filepath.Join(newBin, f))
		have, err := os.ReadFile(n.HostPath("/opt/cni/bin/" + f))
		if err != nil || !bytes.Equal(have, want) {
			t.Errorf("node's %s is not the upgraded binary (%v)", f, err)
		}
	}
	d.manifests = upgraded
	d.deleteNamespacePods(t, c, ns)
}

// burst: burstPods pods with a secondary network created at once all
// become Running with both networks; deleting them leaves nothing.
func (d *deployment) burst(t *testing.T) {
	n, c := d.n, ctxT(t, 8*time.Minute)
	ns := n.Namespace(t, d.mode+"-burst")
	if _, err := n.Apply(c, []byte(nadYAML(ns, "blue", "blue0", blueSubnet))); err != nil {
		t.Fatal(err)
	}
	var all strings.Builder
	var names []string
	for i := range burstPods {
		names = append(names, fmt.Sprintf("b%02d", i))
		all.WriteString(podYAML(ns, names[i], "blue"))
	}
	start := time.Now()
	errs := make(chan error, len(names))
	docs := strings.Split(all.String(), "---\n")
	for _, doc := range docs[:len(names)] {
		go func() { _, err := n.Apply(c, []byte(doc)); errs <- err }()
	}
	for range names {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	got := waitAllRunning(c, n, ns, names)
	if e := got[""]; e != nil {
		t.Fatal(e.Annotations["errors"])
	}
	t.Logf("%d pods created at once: all Running after %v", len(names), time.Since(start).Round(100*time.Millisecond))
	ips := map[string]string{}
	for _, name := range names {
		for _, s := range statusOf(t, got[name]) {
			for _, ip := range s.IPs {
				ip = addrOnly(ip)
				if other, dup := ips[ip]; dup {
					t.Errorf("address %s given to %s and %s", ip, other, name)
				}
				ips[ip] = name
			}
		}
	}
	if len(ips) != 2*len(names) {
		t.Errorf("%d addresses for %d pods with two networks each", len(ips), len(names))
	}
	failures, _ := sandboxFailures(c, n, ns)
	t.Logf("sandbox failures during the burst (kubelet retried): %d", failures)
	start = time.Now()
	d.deleteNamespacePods(t, c, ns)
	t.Logf("%d pods deleted and gone after %v", len(names), time.Since(start).Round(100*time.Millisecond))
}

// uninstall: deleting the manifests (not the CRDs) removes multinet's
// conflist and credentials from the node; new pods then get the cluster
// network alone.
func (d *deployment) uninstall(t *testing.T) {
	n, c := d.n, ctxT(t, 3*time.Minute)
	d.remove(t)
	if t.Failed() {
		return
	}
	ns := n.Namespace(t, d.mode+"-after")
	if _, err := n.Apply(c, []byte(podYAML(ns, "after", "blue"))); err != nil {
		t.Fatal(err)
	}
	pod, err := n.WaitPodRunning(c, ns, "after")
	if err != nil {
		t.Fatal(err)
	}
	ifs, err := n.PodInterfaces(pod)
	if err != nil {
		t.Fatal(err)
	}
	if len(ifs) != 2 { // lo and eth0
		t.Errorf("pod after uninstall has %v, want lo and eth0", ifs)
	}
	if _, ok := pod.Annotations["k8s.v1.cni.cncf.io/network-status"]; ok {
		t.Errorf("pod after uninstall has a network-status")
	}
	d.deleteNamespacePods(t, c, ns)
}

// remove deletes what the manifests created (except the CRDs, which other
// tests may use) and checks the node is back to its default network.
func (d *deployment) remove(t *testing.T) {
	t.Helper()
	n, c := d.n, ctxT(t, 2*time.Minute)
	objs, err := nodetest.DecodeManifests(d.manifests)
	if err != nil {
		t.Fatal(err)
	}
	var keep []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() != "CustomResourceDefinition" {
			keep = append(keep, o)
		}
	}
	if err := n.Delete(c, toYAML(t, keep)); err != nil {
		t.Fatal(err)
	}
	for {
		pods, err := n.Client.CoreV1().Pods(dsNamespace).List(c, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=multinet"})
		if err == nil && len(pods.Items) == 0 {
			break
		}
		select {
		case <-c.Done():
			t.Fatalf("multinet pods still there: %v", err)
		case <-time.After(200 * time.Millisecond):
		}
	}
	des, _ := os.ReadDir(n.HostPath("/etc/cni/net.d"))
	var names []string
	for _, de := range des {
		names = append(names, de.Name())
	}
	if strings.Join(names, " ") != "10-patchbay-bridge.conflist" {
		t.Errorf("after uninstall /etc/cni/net.d holds %v", names)
	}
}
