package clusteripam

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"sigs.k8s.io/yaml"
)

// deploy/cluster-ipam/rbac.yaml grants enough: a user holding only that
// ClusterRole runs ADD (plain and with an IPAMClaim), CHECK, GC, STATUS,
// DEL and `cluster-ipam reconcile`. The reconciler Deployment is accepted
// by the apiserver (server-side dry run).
func TestRBACIsEnough(t *testing.T) {
	w := newWorld(t)
	if err := w.c.BindPlainUser(filepath.Join("..", "deploy", "cluster-ipam", "rbac.yaml"), "cluster-ipam"); err != nil {
		t.Fatal(err)
	}
	n := w.node("node-rbac")
	kc := filepath.Join(t.TempDir(), "user.kubeconfig")
	if err := w.c.WriteKubeconfig(kc, w.c.UserToken); err != nil {
		t.Fatal(err)
	}
	flat, _ := json.Marshal(map[string]any{"kubernetes": map[string]any{"kubeconfig": kc}, "node_name": "node-rbac"})
	os.WriteFile(n.flat, flat, 0o600)

	conf := n.netconf(map[string]any{"range": "10.56.0.0/24"}, nil)
	p := w.pod("rbac-pod")
	args := "K8S_POD_NAMESPACE=" + w.ns + ";K8S_POD_NAME=rbac-pod;K8S_POD_UID=" + p.UID
	res, err := n.add(t, conf, "r1", args)
	if err != nil {
		t.Fatalf("ADD as the RBAC user: %v", err)
	}
	var m map[string]any
	json.Unmarshal(conf, &m)
	b, _ := res.Encode("1.1.0")
	m["prevResult"] = json.RawMessage(b)
	withPrev, _ := json.Marshal(m)
	if _, err := n.run(t, call{verb: "CHECK", cid: "r1", conf: withPrev}); err != nil {
		t.Errorf("CHECK: %v", err)
	}
	if _, err := n.run(t, call{verb: "STATUS", conf: conf}); err != nil {
		t.Errorf("STATUS: %v", err)
	}
	w.claim("rbac.net")
	claimConf := n.netconf(map[string]any{"range": "10.56.0.0/24"}, map[string]any{"args": map[string]any{"cni": map[string]any{ClaimArg: "rbac.net"}}})
	if _, err := n.add(t, claimConf, "r2", args); err != nil {
		t.Errorf("ADD with an IPAMClaim: %v", err)
	}
	if cl := w.readClaim("rbac.net"); len(cl.Status.IPs) != 1 {
		t.Errorf("claim status not written: %+v", cl.Status)
	}
	delete(m, "prevResult")
	m["cni.dev/valid-attachments"] = []any{map[string]any{"containerID": "r1", "ifname": "net1"}}
	gc, _ := json.Marshal(m)
	if _, err := n.run(t, call{verb: "GC", conf: gc}); err != nil {
		t.Errorf("GC: %v", err)
	}
	if err := n.del(t, conf, "r1", res); err != nil {
		t.Errorf("DEL: %v", err)
	}
	if out, err := exec.Command(n.bin, "reconcile", "--kubeconfig", kc).CombinedOutput(); err != nil {
		t.Errorf("reconcile as the RBAC user: %v\n%s", err, out)
	}

	d, err := os.ReadFile(filepath.Join("..", "deploy", "cluster-ipam", "reconciler.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	j, err := yaml.YAMLToJSON(d)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := w.c.Do("POST", "/apis/apps/v1/namespaces/kube-system/deployments?dryRun=All", j); err != nil {
		t.Errorf("reconciler Deployment refused: %v", err)
	}
}
