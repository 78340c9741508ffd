package nodetest_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/patchbay-cni/patchbay/internal/nodetest"
	"github.com/patchbay-cni/patchbay/internal/ociimage"
)

// ownerEnv makes this test binary a helper that starts a node, prints its
// identity and blocks until killed (TestKilledOwnerLeavesNothing).
const ownerEnv = "NODETEST_OWNER_HELPER"

// machine is the machine's state before any node started.
var machine state

func TestMain(m *testing.M) {
	if os.Getenv(ownerEnv) != "" {
		ownerHelper()
		return
	}
	machine = snapshot()
	nodetest.Main(m, nodetest.DefaultOptions())
}

// state is what a node must never change or leave behind on the machine.
type state struct {
	sysctls map[string]string
	links   []string // links of the machine's own network namespace
	netns   []string // /run/netns
	mounts  int      // lines of the machine's mount table
	run     []string // /run (containerd's default state dir is /run/containerd)
}

func snapshot() state {
	s := state{sysctls: map[string]string{}}
	for _, p := range nodetest.KubeletSysctls() {
		b, _ := os.ReadFile(p)
		s.sysctls[p] = strings.TrimSpace(string(b))
	}
	out, _ := exec.Command("ip", "-o", "link", "show").Output()
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if f := strings.Fields(l); len(f) > 1 {
			s.links = append(s.links, strings.TrimSuffix(f[1], ":"))
		}
	}
	s.netns = dirNames("/run/netns")
	b, _ := os.ReadFile("/proc/self/mountinfo")
	s.mounts = strings.Count(string(b), "\n")
	s.run = dirNames("/run")
	return s
}

func dirNames(dir string) []string {
	des, _ := os.ReadDir(dir)
	var out []string
	for _, de := range des {
		out = append(out, de.Name())
	}
	return out
}

// checkMachine fails the test if the machine's sysctls changed or if
// links, named network namespaces, mounts or /run entries appeared. Other
// tests may run in parallel (other packages): only additions that look
// like ours count.
func checkMachine(t *testing.T, before state) {
	t.Helper()
	now := snapshot()
	for p, v := range before.sysctls {
		if now.sysctls[p] != v {
			t.Errorf("machine sysctl %s changed: %q → %q", p, v, now.sysctls[p])
		}
	}
	for _, l := range now.links {
		if !slices.Contains(before.links, l) && (strings.HasPrefix(l, "veth") || l == nodetest.BridgeName) {
			t.Errorf("new link in the machine's namespace: %s", l)
		}
	}
	for _, n := range now.netns {
		if !slices.Contains(before.netns, n) && strings.HasPrefix(n, "cni-") {
			t.Errorf("new network namespace on the machine: /run/netns/%s", n)
		}
	}
	for _, n := range now.run {
		if !slices.Contains(before.run, n) && (n == "containerd" || n == "kubelet") {
			t.Errorf("new directory on the machine: /run/%s", n)
		}
	}
	b, _ := os.ReadFile("/proc/self/mountinfo")
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, "patchbay-node-") || strings.Contains(l, " /var/lib/kubelet") || strings.Contains(l, " /run/containerd") {
			t.Errorf("mount on the machine: %s", l)
		}
	}
}

func ctx(t *testing.T, d time.Duration) context.Context {
	c, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return c
}

func TestNodeReady(t *testing.T) {
	n := nodetest.Shared(t)
	node, err := n.Client.CoreV1().Nodes().Get(ctx(t, 30*time.Second), nodetest.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if v := node.Status.NodeInfo.KubeletVersion; v != "v1.32.13" {
		t.Errorf("kubelet version %s", v)
	}
	if rt := node.Status.NodeInfo.ContainerRuntimeVersion; !strings.HasPrefix(rt, "containerd://1.6") {
		t.Errorf("container runtime %s", rt)
	}
	var ip string
	for _, a := range node.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			ip = a.Address
		}
	}
	if ip != nodetest.NodeIP {
		t.Errorf("InternalIP %q, want %s", ip, nodetest.NodeIP)
	}
	// Every component runs, inside the node's own network namespace.
	for name, pid := range n.PIDs() {
		ino := inode(t, fmt.Sprintf("/proc/%d/ns/net", pid))
		if ino != n.NetnsInode() {
			t.Errorf("%s (pid %d) is not in the node's network namespace", name, pid)
		}
	}
	if inode(t, "/proc/self/ns/net") == n.NetnsInode() {
		t.Error("the test process is in the node's network namespace")
	}
	// The machine's kernel settings are what they were: kubelet only saw
	// the files covering them.
	checkMachine(t, machine)
	t.Logf("node Ready %v after start (components ready in %v); RSS of the node's processes %d MiB",
		n.Ready.Round(time.Millisecond), n.Startup.Round(time.Millisecond), nodeRSS(t, n)/1024)
}

// nodeRSS is the resident memory of every process of the node, in KiB.
func nodeRSS(t *testing.T, n *nodetest.Node) int {
	t.Helper()
	pids, err := n.Processes()
	if err != nil {
		t.Fatal(err)
	}
	kib := 0
	for _, pid := range pids {
		kib += rssKiB(pid)
	}
	return kib
}

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatalf("stat %s: %v", path, err)
	}
	return st.Ino
}

func rssKiB(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) >= 2 && f[0] == "VmRSS:" {
			v, _ := strconv.Atoi(f[1])
			return v
		}
	}
	return 0
}

const busyboxPod = `
apiVersion: v1
kind: Pod
metadata:
  name: bb
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: bb
    image: ` + nodetest.BusyboxImage + `
    command: ["sleep", "3600"]
`

// A pod on the default network gets an address from our bridge +
// host-local, reaches its gateway, and deleting it runs CNI DEL, which
// leaves no veth, address, host-local reservation or cache entry.
func TestPodOnBridge(t *testing.T) {
	n := nodetest.Shared(t)
	ns := n.Namespace(t, "bridge")
	c := ctx(t, 2*time.Minute)
	manifest := strings.Replace(busyboxPod, "name: bb\n", "name: bb\n  namespace: "+ns+"\n", 1)
	rssBefore := nodeRSS(t, n)
	cacheStart, netnsStart := dirNames(n.HostPath("/var/lib/cni/results")), dirNames(n.HostPath("/run/netns"))
	t0 := time.Now()
	if _, err := n.Apply(c, []byte(manifest)); err != nil {
		t.Fatal(err)
	}
	pod, err := n.WaitPodRunning(c, ns, "bb")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("pod apply → Running: %v; node RSS %d MiB before the pod, %+d MiB with it",
		time.Since(t0).Round(time.Millisecond), rssBefore/1024, (nodeRSS(t, n)-rssBefore)/1024)

	podIP, err := netip.ParseAddr(pod.Status.PodIP)
	if err != nil || !netip.MustParsePrefix(nodetest.PodCIDR).Contains(podIP) {
		t.Fatalf("pod IP %q not in %s", pod.Status.PodIP, nodetest.PodCIDR)
	}
	ifs, err := n.PodInterfaces(pod)
	if err != nil {
		t.Fatal(err)
	}
	eth0 := find(ifs, "eth0")
	if eth0 == nil || !slices.Contains(eth0.Addrs, netip.PrefixFrom(podIP, 24)) || eth0.Kind != "veth" {
		t.Fatalf("pod interfaces %+v: want veth eth0 with %s/24", ifs, podIP)
	}
	// The node side: our bridge with the gateway, one veth attached to it.
	nodeIfs, err := nodetest.Interfaces(n.NetnsPath())
	if err != nil {
		t.Fatal(err)
	}
	br := find(nodeIfs, nodetest.BridgeName)
	if br == nil || !slices.Contains(br.Addrs, netip.MustParsePrefix("10.244.0.1/24")) {
		t.Fatalf("node interfaces %+v: want bridge %s with 10.244.0.1/24", nodeIfs, nodetest.BridgeName)
	}
	hostVeth := findIndex(nodeIfs, eth0.Peer)
	if hostVeth == nil || hostVeth.Kind != "veth" || hostVeth.Master != br.Index {
		t.Fatalf("node interfaces %+v: want eth0's peer (index %d) a veth on %s", nodeIfs, eth0.Peer, nodetest.BridgeName)
	}
	reservation := filepath.Join(n.HostPath("/var/lib/cni/networks"), nodetest.BridgeNetwork, podIP.String())
	if _, err := os.Stat(reservation); err != nil {
		t.Errorf("host-local reservation: %v", err)
	}
	// kubectl exec works, and the pod reaches its gateway.
	out, _, err := n.Exec(c, ns, "bb", "bb", "ip", "-o", "-4", "addr", "show", "eth0")
	if err != nil || !strings.Contains(out, podIP.String()+"/24") {
		t.Errorf("exec ip addr: %q %v", out, err)
	}
	if out, _, err := n.Exec(c, ns, "bb", "bb", "ping", "-c", "1", "-W", "5", "10.244.0.1"); err != nil {
		t.Errorf("ping the gateway from the pod: %v\n%s", err, out)
	}
	// The apiserver answers where kubelet tells pods it is (the kubernetes
	// Service) and on the node IP.
	for _, addr := range []string{"$KUBERNETES_SERVICE_HOST $KUBERNETES_SERVICE_PORT", nodetest.NodeIP + " 6443"} {
		if out, err := apiserverFrom(c, n, ns, "bb", "bb", addr); err != nil {
			t.Errorf("apiserver at %s from the pod: %v %q", addr, err, out)
		}
	}

	// The entries of this pod: new since the start.
	cacheBefore := newEntries(n.HostPath("/var/lib/cni/results"), cacheStart)
	netnsBefore := newEntries(n.HostPath("/run/netns"), netnsStart)
	if len(cacheBefore) == 0 || len(netnsBefore) == 0 {
		t.Errorf("no libcni cache entry (%v) or network namespace file (%v) for the pod", cacheBefore, netnsBefore)
	}

	// kubectl delete pod: kubelet stops the sandbox, containerd runs CNI DEL.
	if err := n.Client.CoreV1().Pods(ns).Delete(c, "bb", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	t0 = time.Now()
	if err := n.WaitPodGone(c, ns, "bb"); err != nil {
		t.Fatal(err)
	}
	t.Logf("pod delete → gone: %v", time.Since(t0).Round(time.Millisecond))
	nodeIfs, err = nodetest.Interfaces(n.NetnsPath())
	if err != nil {
		t.Fatal(err)
	}
	if v := find(nodeIfs, hostVeth.Name); v != nil {
		t.Errorf("the pod's host veth is left: %+v", v)
	}
	if _, err := os.Stat(reservation); !os.IsNotExist(err) {
		t.Errorf("host-local reservation %s left: %v", reservation, err)
	}
	// libcni's cache entry and the pod's namespace file, both named after
	// the sandbox (other tests' pods may come and go meanwhile).
	for _, f := range dirNames(n.HostPath("/var/lib/cni/results")) {
		if slices.Contains(cacheBefore, f) {
			t.Errorf("libcni cache entry left: %s", f)
		}
	}
	for _, f := range dirNames(n.HostPath("/run/netns")) {
		if slices.Contains(netnsBefore, f) {
			t.Errorf("pod network namespace left: %s", f)
		}
	}
}

// apiserverFrom connects from a pod's container to "HOST PORT" (shell
// words) and checks the apiserver answers: plain HTTP to its TLS port gets
// "400 Bad Request" (busybox has no TLS).
func apiserverFrom(c context.Context, n *nodetest.Node, ns, pod, container, addr string) (string, error) {
	out, _, err := n.Exec(c, ns, pod, container, "sh", "-c", `echo "$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT"; printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 5 `+addr)
	if err == nil && !strings.HasPrefix(out, nodetest.KubernetesServiceIP+":443\n") {
		err = fmt.Errorf("kubelet's KUBERNETES_SERVICE_HOST:PORT is not %s:443", nodetest.KubernetesServiceIP)
	}
	if err == nil && !strings.Contains(out, "400 Bad Request") {
		err = fmt.Errorf("no HTTP answer")
	}
	return out, err
}

func find(ifs []nodetest.Interface, name string) *nodetest.Interface {
	for i := range ifs {
		if ifs[i].Name == name {
			return &ifs[i]
		}
	}
	return nil
}

func findIndex(ifs []nodetest.Interface, index int) *nodetest.Interface {
	for i := range ifs {
		if ifs[i].Index == index {
			return &ifs[i]
		}
	}
	return nil
}

// newEntries lists the entries of dir that are not in before.
func newEntries(dir string, before []string) []string {
	var out []string
	for _, n := range dirNames(dir) {
		if !slices.Contains(before, n) {
			out = append(out, n)
		}
	}
	return out
}

// The product image (what `make image` writes) imports into the node's
// containerd and runs: the CLI, and a plugin through its type link.
func TestPatchbayImage(t *testing.T) {
	n := nodetest.Shared(t)
	ns := n.Namespace(t, "image")
	c := ctx(t, 2*time.Minute)
	bin := os.Getenv("PATCHBAY_BIN")
	if bin == "" {
		t.Fatal("PATCHBAY_BIN is not set: `make test` sets it to bin/")
	}
	// What `make image` writes.
	archive := filepath.Join(t.TempDir(), ociimage.ProductArchive)
	if _, _, err := ociimage.WriteProduct(bin, archive, ociimage.ProductRef); err != nil {
		t.Fatal(err)
	}
	if err := n.ImportImage(c, archive); err != nil {
		t.Fatal(err)
	}
	manifest := `
apiVersion: v1
kind: Pod
metadata:
  name: patchbay
  namespace: ` + ns + `
spec:
  restartPolicy: Never
  containers:
  - name: cli
    image: ` + ociimage.ProductRef + `
    imagePullPolicy: Never
    command: ["/patchbay", "version"]
  - name: plugin
    image: ` + ociimage.ProductRef + `
    imagePullPolicy: Never
    command: ["/bridge"]
    env: [{name: CNI_COMMAND, value: VERSION}]
`
	if _, err := n.Apply(c, []byte(manifest)); err != nil {
		t.Fatal(err)
	}
	if _, err := n.WaitPodSucceeded(c, ns, "patchbay"); err != nil {
		t.Fatal(err)
	}
	out, err := n.Logs(c, ns, "patchbay", "cli")
	if err != nil || !strings.HasPrefix(out, "patchbay ") || !strings.Contains(out, "CNI protocol versions") {
		t.Errorf("/patchbay version: %q %v", out, err)
	}
	out, err = n.Logs(c, ns, "patchbay", "plugin")
	var v struct {
		SupportedVersions []string `json:"supportedVersions"`
	}
	if err != nil || json.Unmarshal([]byte(out), &v) != nil || !slices.Contains(v.SupportedVersions, "1.1.0") {
		t.Errorf("/bridge VERSION: %q %v", out, err)
	}
}

// Apply takes several documents, a CRD and an object of it at once, and
// Delete removes them.
func TestApplyAndDelete(t *testing.T) {
	n := nodetest.Shared(t)
	ns := n.Namespace(t, "apply")
	c := ctx(t, time.Minute)
	manifests := `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gadgets.nodetest.patchbay.test
spec:
  group: nodetest.patchbay.test
  scope: Namespaced
  names: {plural: gadgets, singular: gadget, kind: Gadget}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, properties: {size: {type: integer}}}
---
# an empty document, then a List
---
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: ConfigMap
  metadata: {name: one, namespace: ` + ns + `}
  data: {a: "1"}
- apiVersion: nodetest.patchbay.test/v1
  kind: Gadget
  metadata: {name: g, namespace: ` + ns + `}
  spec: {size: 3}
`
	objs, err := n.Apply(c, []byte(manifests))
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, o := range objs {
		kinds = append(kinds, o.GetKind())
	}
	if !slices.Equal(kinds, []string{"CustomResourceDefinition", "ConfigMap", "Gadget"}) {
		t.Errorf("applied %v", kinds)
	}
	// Applying again changes a field in place.
	if _, err := n.Apply(c, []byte(strings.Replace(manifests, `a: "1"`, `a: "2"`, 1))); err != nil {
		t.Fatal(err)
	}
	cm, err := n.Client.CoreV1().ConfigMaps(ns).Get(c, "one", metav1.GetOptions{})
	if err != nil || cm.Data["a"] != "2" {
		t.Errorf("configmap after the second apply: %v %v", cm, err)
	}
	if err := n.Delete(c, []byte(manifests)); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Client.CoreV1().ConfigMaps(ns).Get(c, "one", metav1.GetOptions{}); err == nil {
		t.Error("configmap still there after Delete")
	}
	if _, err := n.Apply(c, []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {}\n")); err == nil || !strings.Contains(err.Error(), "metadata.name") {
		t.Errorf("object without a name: %v", err)
	}
	if _, err := n.Apply(c, []byte("kind: [")); err == nil {
		t.Error("broken YAML applied")
	}
}

// A node stopped by Stop leaves nothing: no process, cgroup, mount,
// directory or network namespace, and the machine is as it was.
func TestTeardownLeavesNothing(t *testing.T) {
	before := snapshot()
	n, err := nodetest.New(nodetest.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			n.Stop()
		}
	})
	// Something to clean up: a running pod (sandbox, shim, veth, mounts).
	c := ctx(t, 2*time.Minute)
	manifest := strings.Replace(busyboxPod, "name: bb\n", "name: bb\n  namespace: default\n", 1)
	if _, err := n.Apply(c, []byte(manifest)); err != nil {
		t.Fatal(err)
	}
	pod, err := n.WaitPodRunning(c, "default", "bb")
	if err != nil {
		t.Fatal(err)
	}
	podPIDs, err := n.PodPIDs(pod)
	if err != nil {
		t.Fatal(err)
	}
	id := identity{Dir: n.Dir, Cgroup: n.Cgroup(), NetnsInode: n.NetnsInode()}
	for _, pid := range n.PIDs() {
		id.PIDs = append(id.PIDs, pid)
	}
	id.PIDs = append(id.PIDs, podPIDs...)
	t0 := time.Now()
	stopped = true
	if err := n.Stop(); err != nil {
		t.Errorf("Stop: %v", err)
	}
	t.Logf("Stop took %v", time.Since(t0).Round(time.Millisecond))
	checkGone(t, id, 0)
	checkMachine(t, before)
}

// identity is what a node leaves traces of.
type identity struct {
	Dir        string
	Cgroup     string
	NetnsInode uint64
	PIDs       []int
}

// checkGone fails the test if anything of the node is left, waiting up to
// wait for it to go.
func checkGone(t *testing.T, id identity, wait time.Duration) {
	t.Helper()
	var left []string
	for deadline := time.Now().Add(wait); ; time.Sleep(100 * time.Millisecond) {
		left = leftovers(id)
		if len(left) == 0 || time.Now().After(deadline) {
			break
		}
	}
	for _, l := range left {
		t.Errorf("left behind: %s", l)
	}
}

func leftovers(id identity) []string {
	var left []string
	if _, err := os.Stat(id.Dir); !os.IsNotExist(err) {
		left = append(left, "directory "+id.Dir)
	}
	for _, h := range []string{"pids", "memory", "cpu", "unified", "systemd"} {
		p := filepath.Join("/sys/fs/cgroup", h, id.Cgroup)
		if _, err := os.Stat(p); err == nil {
			left = append(left, "cgroup "+p)
		}
	}
	for _, pid := range id.PIDs {
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid)); err == nil && strings.Contains(string(b), id.Cgroup) {
			left = append(left, fmt.Sprintf("process %d", pid))
		}
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/ns/net")
	for _, p := range procs {
		var st syscall.Stat_t
		if syscall.Stat(p, &st) == nil && st.Ino == id.NetnsInode {
			left = append(left, "a process in the node's network namespace: "+p)
		}
	}
	b, _ := os.ReadFile("/proc/self/mountinfo")
	if strings.Contains(string(b), id.Dir) {
		left = append(left, "a mount under "+id.Dir)
	}
	return left
}

// Killing the process that owns a node (SIGKILL: no cleanup runs in it)
// still tears the node down: its supervisor sees the control pipe close.
func TestKilledOwnerLeavesNothing(t *testing.T) {
	before := snapshot()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), ownerEnv+"=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	t.Cleanup(func() {
		if !killed {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var id identity
	select {
	case l, ok := <-lines:
		if !ok || json.Unmarshal([]byte(l), &id) != nil {
			cmd.Wait()
			t.Fatalf("owner helper: %q\n%s", l, stderr.String())
		}
	case <-time.After(4 * time.Minute):
		t.Fatalf("owner helper did not start a node\n%s", stderr.String())
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed = true
	cmd.Wait()
	t0 := time.Now()
	checkGone(t, id, time.Minute)
	t.Logf("node gone %v after its owner was killed", time.Since(t0).Round(time.Millisecond))
	checkMachine(t, before)
}

// ownerHelper starts a node with a running pod, prints its identity as JSON
// and blocks until it is killed.
func ownerHelper() {
	n, err := nodetest.New(nodetest.DefaultOptions())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	c, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	manifest := strings.Replace(busyboxPod, "name: bb\n", "name: bb\n  namespace: default\n", 1)
	var pod *corev1.Pod
	if _, err = n.Apply(c, []byte(manifest)); err == nil {
		pod, err = n.WaitPodRunning(c, "default", "bb")
	}
	var podPIDs []int
	if err == nil {
		podPIDs, err = n.PodPIDs(pod)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		n.Stop()
		os.Exit(1)
	}
	id := identity{Dir: n.Dir, Cgroup: n.Cgroup(), NetnsInode: n.NetnsInode(), PIDs: podPIDs}
	for _, pid := range n.PIDs() {
		id.PIDs = append(id.PIDs, pid)
	}
	b, _ := json.Marshal(id)
	fmt.Println(string(b))
	select {}
}

// A privileged hostNetwork DaemonSet (the shape of a CNI installer) runs on
// the node, sees the node's network namespace, and its hostPath volumes are
// the node's standard directories: what it writes to /opt/cni/bin lands in
// the test's directory, never in the machine's /opt.
func TestDaemonSetHostPaths(t *testing.T) {
	n := nodetest.Shared(t)
	ns := n.Namespace(t, "ds")
	c := ctx(t, 2*time.Minute)
	manifest := `
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: installer
  namespace: ` + ns + `
spec:
  selector: {matchLabels: {app: installer}}
  template:
    metadata: {labels: {app: installer}}
    spec:
      hostNetwork: true
      tolerations: [{operator: Exists}]
      terminationGracePeriodSeconds: 1
      containers:
      - name: install
        image: ` + nodetest.BusyboxImage + `
        securityContext: {privileged: true}
        command: ["sh", "-c", "cp /bin/busybox /host/opt/cni/bin/installed-by-ds && ls /host/etc/cni/net.d > /host/var/lib/cni/conf-listing && exec sleep 3600"]
        volumeMounts:
        - {name: bin, mountPath: /host/opt/cni/bin}
        - {name: conf, mountPath: /host/etc/cni/net.d}
        - {name: state, mountPath: /host/var/lib/cni}
      volumes:
      - {name: bin, hostPath: {path: /opt/cni/bin}}
      - {name: conf, hostPath: {path: /etc/cni/net.d}}
      - {name: state, hostPath: {path: /var/lib/cni}}
`
	if _, err := n.Apply(c, []byte(manifest)); err != nil {
		t.Fatal(err)
	}
	pod, err := n.WaitDaemonSet(c, ns, "installer")
	if err != nil {
		t.Fatal(err)
	}
	out, _, err := n.Exec(c, ns, pod.Name, "install", "ip", "-o", "-4", "addr", "show", "lo")
	if err != nil || !strings.Contains(out, nodetest.NodeIP) {
		t.Errorf("hostNetwork pod's lo: %q %v (want the node IP %s)", out, err, nodetest.NodeIP)
	}
	for _, addr := range []string{"$KUBERNETES_SERVICE_HOST $KUBERNETES_SERVICE_PORT", "127.0.0.1 6443"} {
		if out, err := apiserverFrom(c, n, ns, pod.Name, "install", addr); err != nil {
			t.Errorf("apiserver at %s from a hostNetwork pod: %v %q", addr, err, out)
		}
	}
	if _, err := os.Stat(n.HostPath("/opt/cni/bin/installed-by-ds")); err != nil {
		t.Errorf("file the DaemonSet installed: %v", err)
	}
	if _, err := os.Stat("/opt/cni/bin/installed-by-ds"); !os.IsNotExist(err) {
		t.Errorf("the DaemonSet wrote to the machine's /opt/cni/bin: %v", err)
	}
	listing, err := os.ReadFile(n.HostPath("/var/lib/cni/conf-listing"))
	if err != nil || strings.TrimSpace(string(listing)) != "10-patchbay-bridge.conflist" {
		t.Errorf("the DaemonSet's view of /etc/cni/net.d: %q %v", listing, err)
	}
	// The node runs what its conf dir says; the machine's own is untouched.
	if out, err := n.Run(c, "ls", "/etc/cni/net.d"); err != nil || strings.TrimSpace(out) != "10-patchbay-bridge.conflist" {
		t.Errorf("node's /etc/cni/net.d: %q %v", out, err)
	}
}

// Bad options are refused before anything starts, with a message naming
// the option, and leave nothing behind.
func TestBadOptions(t *testing.T) {
	empty := t.TempDir()
	for _, tc := range []struct {
		name string
		opts nodetest.Options
		want string
	}{
		{"relative host dir", nodetest.Options{HostDirs: []string{"run/x"}}, `"run/x"`},
		{"host dir twice", nodetest.Options{HostDirs: []string{"/run/netns"}}, `"/run/netns" given twice`},
		{"no loopback plugin", nodetest.Options{CNIBinDir: empty}, "no loopback plugin"},
		{"conf file name with a slash", nodetest.Options{CNIConfig: map[string]string{"../x.conflist": "{}"}}, `"../x.conflist"`},
		{"missing image archive", nodetest.Options{Images: []string{filepath.Join(empty, "none.tar")}}, "none.tar"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, _ := filepath.Glob(filepath.Join(os.TempDir(), "patchbay-node-*"))
			n, err := nodetest.New(tc.opts)
			if err == nil {
				n.Stop()
				t.Fatal("started")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q, want one mentioning %s", strings.SplitN(err.Error(), "\n", 2)[0], tc.want)
			}
			after, _ := filepath.Glob(filepath.Join(os.TempDir(), "patchbay-node-*"))
			for _, d := range after {
				if !slices.Contains(before, d) {
					t.Errorf("%s left", d)
				}
			}
		})
	}
}
