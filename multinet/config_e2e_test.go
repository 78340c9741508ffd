package multinet

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/patchbay-cni/patchbay/multinet/api"
)

// clusterNetwork as a NAD name, defaultNetworks, and a pod's own default
// network (v1.multus-cni.io/default-network).
func TestClusterNetworkNADAndDefaultNetworks(t *testing.T) {
	e := newEnv(t)
	sys := e.c.UniqueNamespace(t, "mnsys")
	e.nad(sys, "podnet", e.bridgeNAD("", 5, map[string]any{"isGateway": true}))
	e.nad(sys, "extra", e.bridgeNAD("", 6, nil))
	e.nad("", "blue", e.bridgeNAD("", 1, nil))
	e.nad(sys, "alt", e.bridgeNAD("", 7, nil))
	e.opts["clusterNetwork"] = "podnet"
	e.opts["multusNamespace"] = sys
	e.opts["defaultNetworks"] = []string{"extra"}
	p := e.pod("p1", map[string]string{api.NetworksAnnotation: "blue"})
	nads := "/apis/k8s.cni.cncf.io/v1/namespaces/"
	e.inWatchCache("/api/v1/namespaces/"+e.ns+"/pods/p1", nads+sys+"/network-attachment-definitions/podnet",
		nads+sys+"/network-attachment-definitions/extra", nads+e.ns+"/network-attachment-definitions/blue")
	e.proxy.take()
	res := e.mustAdd(p)
	if len(res.IPs) != 1 || !strings.HasPrefix(res.IPs[0].Address.String(), "10.78.5.") {
		t.Errorf("result = %v, want the podnet NAD's address", res)
	}
	st := statusOf(t, e, p)
	var got []string
	for _, s := range st {
		got = append(got, s.Name+"@"+s.Interface)
	}
	want := []string{sys + "/podnet@eth0", sys + "/extra@net2", e.ns + "/blue@net1"}
	if !slices.Equal(got, want) || !st[0].Default {
		t.Errorf("status = %v, want %v (cluster network default)", got, want)
	}
	if calls := e.proxy.take(); len(calls) != 5 { // pod + 3 NADs + status
		t.Errorf("API calls = %q, want 5", calls)
	}
	e.mustDel(p)
	e.nothingLeft(p, "left")

	// The pod's own default network replaces the configured one.
	p2 := e.pod("p2", map[string]string{api.DefaultNetworkAnnotation: "alt"})
	res = e.mustAdd(p2)
	if len(res.IPs) != 1 || !strings.HasPrefix(res.IPs[0].Address.String(), "10.78.7.") {
		t.Errorf("result = %v, want the alt NAD's address", res)
	}
	if st := statusOf(t, e, p2); st[0].Name != sys+"/alt" || !st[0].Default {
		t.Errorf("status = %+v", st)
	}
	e.mustDel(p2)
	// And the same from an on-disk cluster network (attached, then replaced).
	e.opts["clusterNetwork"] = e.clusterConf
	e.mustAdd(p2)
	if st := statusOf(t, e, p2); st[0].Name != sys+"/alt" || len(e.leases()) != 2 {
		t.Errorf("status = %+v, leases %v (want alt and extra only)", st, e.leases())
	}
	e.mustDel(p2)
	if l := e.leases(); len(l) != 0 {
		t.Errorf("leases left: %v", l)
	}
}

// A pre-0.3.0 delegate result (§5.3.3.1: ips from ip4/ip6, interface from
// CNI_IFNAME).
func TestPre030Result(t *testing.T) {
	e := newEnv(t)
	e.nad("", "old", map[string]any{"cniVersion": "0.2.0", "type": "bridge", "bridge": "mnbr4",
		"ipam": map[string]any{"type": "host-local", "subnet": "10.78.4.0/24", "dataDir": e.ipamDir}})
	p := e.pod("p1", map[string]string{api.NetworksAnnotation: "old"})
	e.mustAdd(p)
	st := statusOf(t, e, p)
	if len(st) != 2 || st[1].Interface != "net1" || len(st[1].IPs) != 1 || !strings.HasPrefix(st[1].IPs[0], "10.78.4.") || st[1].Mac != "" {
		t.Errorf("status of the 0.2.0 network = %+v", st[1:])
	}
	e.mustDel(p)
	e.noStatus(p)
	if l := e.leases(); len(l) != 0 {
		t.Errorf("leases left: %v", l)
	}
}

// deploy/multinet/rbac.yaml is enough: a user holding only that role runs
// ADD (pod GET, NAD GET, pods/status PATCH) and records events.
func TestRBACIsEnough(t *testing.T) {
	e := newEnv(t)
	if err := e.c.BindPlainUser(filepath.Join("..", "deploy", "multinet", "rbac.yaml"), "multinet"); err != nil {
		t.Fatal(err)
	}
	// The proxy passes the client's own token: write one with the user's.
	e.c.WriteKubeconfig(e.kubeconfig, e.c.UserToken)
	kc, _ := os.ReadFile(e.kubeconfig)
	kc = []byte(strings.Replace(string(kc), e.c.URL, "http://"+e.proxy.addr, 1))
	os.WriteFile(e.kubeconfig, kc, 0o600)

	e.nad("", "blue", e.bridgeNAD("", 1, nil))
	p := e.pod("p1", map[string]string{api.NetworksAnnotation: `[{"name":"blue"},{"name":"blue","mac":"bad"}]`})
	e.mustAdd(p)
	if st := statusOf(t, e, p); len(st) != 1 {
		t.Errorf("status = %+v", st)
	}
	if strings.Contains(e.log(), "cannot record the event") {
		t.Errorf("event refused:\n%s", e.log())
	}
	e.mustDel(p)
	e.noStatus(p)
}
