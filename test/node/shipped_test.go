package node

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/patchbay-cni/patchbay/internal/nodetest"
)

// The shipped example conflist, deploy/multinet/00-multinet.conflist —
// the file itself, linked into the node's /etc/cni/net.d, not a copy —
// runs under the node's containerd 1.6 (issue 12: with "cniVersion" 1.1.0
// every sandbox failed there). Everything the file names is provided on
// the node: the cluster network at /etc/cni/net.d/10-cluster.conflist, a
// kubeconfig at /etc/cni/net.d/multinet.d/multinet.kubeconfig (a token of
// deploy/multinet/rbac.yaml's service account), multinet in /opt/cni/bin,
// and its log file /var/log/multinet.log.
func TestShippedConflistOnContainerd16(t *testing.T) {
	n := sharedNode(t)
	c := ctxT(t, 4*time.Minute)
	shipped, err := filepath.Abs(filepath.Join(repo, "deploy", "multinet", "00-multinet.conflist"))
	if err != nil {
		t.Fatal(err)
	}
	if ds, err := n.Client.AppsV1().DaemonSets(dsNamespace).Get(c, dsName, metav1.GetOptions{}); err == nil {
		t.Fatalf("DaemonSet %s/%s is installed (%s): this test installs the shipped file by hand", ds.Namespace, ds.Name, ds.UID)
	}
	// The node's /var/log must be the test's (an overlay), never the
	// machine's: the file logs to /var/log/multinet.log.
	var machineLog syscall.Stat_t
	if err := syscall.Stat("/var/log", &machineLog); err != nil {
		t.Fatal(err)
	}
	out, err := n.Run(c, "stat", "-c", "%d:%i", "/var/log")
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(out) == strconv.FormatUint(machineLog.Dev, 10)+":"+strconv.FormatUint(machineLog.Ino, 10) {
		t.Fatalf("the node's /var/log is the machine's: the shipped file's logFile would write there")
	}
	rbac, err := os.ReadFile(filepath.Join(repo, "deploy", "multinet", "rbac.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.ApplyFiles(c, filepath.Join(repo, "deploy", "crds")); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Apply(c, rbac); err != nil {
		t.Fatal(err)
	}
	exp := int64(3600)
	tr, err := n.Client.CoreV1().ServiceAccounts(dsNamespace).CreateToken(c, "multinet", &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig, _ := json.Marshal(map[string]any{
		"apiVersion": "v1", "kind": "Config", "current-context": "c",
		"clusters": []any{map[string]any{"name": "c", "cluster": map[string]any{
			"server": "https://" + nodetest.KubernetesServiceIP + ":443", "certificate-authority-data": n.Credentials.CAPEM}}},
		"users":    []any{map[string]any{"name": "u", "user": map[string]any{"token": tr.Status.Token}}},
		"contexts": []any{map[string]any{"name": "c", "context": map[string]any{"cluster": "c", "user": "u"}}},
	})
	netd := n.HostPath("/etc/cni/net.d")
	multinetBin := filepath.Join(n.HostPath("/opt/cni/bin"), "multinet")
	_, hadMultinet := os.Stat(multinetBin)
	t.Cleanup(func() {
		for _, p := range []string{filepath.Join(netd, "00-multinet.conflist"), filepath.Join(netd, "10-cluster.conflist"), filepath.Join(netd, "multinet.d")} {
			os.RemoveAll(p)
		}
		if hadMultinet != nil {
			os.Remove(multinetBin)
		}
		n.Delete(ctxT(t, time.Minute), rbac)
	})
	if err := os.MkdirAll(filepath.Join(netd, "multinet.d"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(netd, "multinet.d", "multinet.kubeconfig"), kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(netd, "10-cluster.conflist"), []byte(nodetest.BridgeConflist), 0o644); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(binDir(t), "multinet"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(multinetBin+".tmp", b, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(multinetBin+".tmp", multinetBin); err != nil {
		t.Fatal(err)
	}
	// Last: the runtime picks the file up. containerd reloads its CNI
	// configuration on a write, rename or removal in the directory, not on
	// a creation: the link is made under another name and renamed.
	tmp := filepath.Join(netd, ".00-multinet.conflist.tmp")
	if err := os.Symlink(shipped, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(netd, "00-multinet.conflist")); err != nil {
		t.Fatal(err)
	}

	ns := n.Namespace(t, "shipped")
	waitMultinetConfig(t, n, ns)
	if _, err := n.Apply(c, []byte(nadYAML(ns, "blue", "blue0", blueSubnet)+podYAML(ns, "p", "blue"))); err != nil {
		t.Fatal(err)
	}
	pod, err := n.WaitPodRunning(c, ns, "p")
	if err != nil {
		t.Fatal(err)
	}
	checkPodNetworks(t, n, pod, map[string]string{"kube-system/" + nodetest.BridgeNetwork: podSubnet, ns + "/blue": blueSubnet})
	logs, err := n.Run(c, "cat", "/var/log/multinet.log")
	if err != nil || !strings.Contains(logs, "msg=ADD") || !strings.Contains(logs, "pod="+ns+"/p") {
		t.Errorf("multinet.log (logLevel verbose) has no ADD line for the pod: %v\n%s", err, logs)
	}
	if err := n.Client.CoreV1().Pods(ns).Delete(c, "p", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := n.WaitPodGone(c, ns, "p"); err != nil {
		t.Fatal(err)
	}
	logs, _ = n.Run(c, "cat", "/var/log/multinet.log")
	if !strings.Contains(logs, "msg=DEL") {
		t.Errorf("multinet.log has no DEL line:\n%s", logs)
	}
	d := &deployment{n: n}
	d.nothingLeft(t)
}
