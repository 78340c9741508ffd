package multinet

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/patchbay-cni/patchbay/internal/testutil"
	"github.com/patchbay-cni/patchbay/multinet/api"
	"github.com/patchbay-cni/patchbay/multinet/plugin"
	"github.com/patchbay-cni/patchbay/spec"
)

// "interface" sets CNI_IFNAME, generated names skip it (§4.1.2.1.5,
// §4.2.1), and "default-route" moves the pod's default route (§4.1.2.1.9):
// in the pod, in the result the runtime gets (the cluster network's,
// without its default route) and in the cached results CHECK verifies.
func TestInterfaceNamesAndDefaultRoute(t *testing.T) {
	e := newEnv(t)
	// The cluster network's default route names its gateway, so CHECK
	// verifies that exact route.
	e.writeJSON(e.clusterConf, map[string]any{
		"cniVersion": "1.0.0", "name": "cluster",
		"plugins": []any{map[string]any{
			"type": "bridge", "bridge": "mnbr0", "isGateway": true,
			"ipam": map[string]any{"type": "host-local", "subnet": "10.77.0.0/24", "dataDir": e.ipamDir,
				"routes": []any{map[string]any{"dst": "0.0.0.0/0", "gw": "10.77.0.1"}}},
		}},
	})
	e.nad("", "blue", e.bridgeNAD("", 1, nil))
	e.nad("", "red", e.bridgeNAD("", 2, map[string]any{"isGateway": true}))
	p := e.pod("p1", map[string]string{api.NetworksAnnotation: `[
		{"name":"blue","interface":"net2"},
		{"name":"red","default-route":["10.78.2.1"]},
		{"name":"blue"}]`})
	res := e.mustAdd(p)
	for _, rt := range res.Routes {
		if rt.Dst.Bits() == 0 {
			t.Errorf("the ADD result keeps the cluster network's default route %v after default-route moved it to net1", rt)
		}
	}
	if l := sortedLinks(e, p); !slices.Equal(l, []string{"eth0", "net1", "net2", "net3"}) {
		t.Errorf("pod interfaces = %v", l)
	}
	st := statusOf(t, e, p)
	ifs := []string{}
	for _, s := range st {
		ifs = append(ifs, s.Interface)
	}
	if !slices.Equal(ifs, []string{"eth0", "net2", "net1", "net3"}) {
		t.Errorf("status interfaces = %v, want eth0 net2 net1 net3", ifs)
	}
	if len(st[0].DefaultRoute) != 0 || !slices.Equal(st[2].DefaultRoute, []string{"10.78.2.1"}) {
		t.Errorf("default-route in status: default %v, red %v", st[0].DefaultRoute, st[2].DefaultRoute)
	}
	out, err := testutil.InNS(t, p.nsName, "ip", "-4", "route", "show", "default")
	if err != nil {
		t.Fatal(err, out)
	}
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 1 || !strings.Contains(out, "via 10.78.2.1 dev net1") {
		t.Errorf("default routes in the pod:\n%s\nwant one via 10.78.2.1 dev net1", out)
	}
	if err := e.check(p); err != nil {
		t.Errorf("CHECK after default-route: %v", err)
	}
	e.mustDel(p)
	e.noStatus(p)
	e.nothingLeft(p, "left after DEL")
}

// A requested runtimeConfig value whose capability no plugin declares
// fails the pod (Multus drops it silently), before anything is attached.
func TestUndeclaredCapabilityFails(t *testing.T) {
	e := newEnv(t)
	e.nad("", "blue", e.bridgeNAD("", 1, nil))
	p := e.pod("p1", map[string]string{api.NetworksAnnotation: `[{"name":"blue","mac":"02:00:00:00:00:42"}]`})
	_, err := e.add(p)
	if ce := spec.AsError(err, 0); err == nil || ce.Code != spec.ErrUnsupportedField || !strings.Contains(err.Error(), `"mac"`) {
		t.Fatalf("ADD = %v, want code 2 naming \"mac\"", err)
	}
	e.nothingLeft(p, "left after the failed ADD")
	// Declared: the MAC is applied.
	e.nad("", "green", e.bridgeNAD("", 3, map[string]any{"capabilities": map[string]bool{"mac": true}}))
	p2 := e.pod("p2", map[string]string{api.NetworksAnnotation: `[{"name":"green","mac":"02:00:00:00:00:42"}]`})
	e.mustAdd(p2)
	if st := statusOf(t, e, p2); len(st) != 2 || st[1].Mac != "02:00:00:00:00:42" {
		t.Errorf("status = %+v, want net1 with mac 02:00:00:00:00:42", st)
	}
	e.mustDel(p2)
}

// §7.5: the runtime's runtimeConfig reaches the cluster network only;
// cni-args are merged into args.cni (annotation first, §4.1.2.1.6.2); the
// IPAMClaim reference is handed on as args.cni["ipam-claim-reference"];
// "ips" with "ipam-claim-reference" fails.
func TestRuntimeConfigCNIArgsAndIPAMClaim(t *testing.T) {
	e := newEnv(t)
	blue := e.bridgeNAD("", 1, map[string]any{"args": map[string]any{"cni": map[string]any{"keep": "nad", "over": "nad"}},
		"capabilities": map[string]bool{"portMappings": true}})
	e.nad("", "blue", blue)
	p := e.pod("p1", map[string]string{api.NetworksAnnotation: `[{"name":"blue","cni-args":{"over":"pod","extra":1},"ipam-claim-reference":"vm1.blue"}]`})
	e.runtimeConfig = map[string]any{"portMappings": []map[string]any{{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}}}
	e.mustAdd(p)
	// What each attachment was given is in the delegates' result cache.
	cached := map[string]map[string]any{}
	ents, _ := os.ReadDir(filepath.Join(e.cniDir, "results"))
	for _, d := range ents {
		b, _ := os.ReadFile(filepath.Join(e.cniDir, "results", d.Name()))
		var c struct {
			IfName         string         `json:"ifName"`
			Config         []byte         `json:"config"`
			CapabilityArgs map[string]any `json:"capabilityArgs"`
		}
		if err := json.Unmarshal(b, &c); err != nil {
			t.Fatal(err)
		}
		var conf map[string]any
		json.Unmarshal(c.Config, &conf)
		cached[c.IfName] = map[string]any{"caps": c.CapabilityArgs, "conf": conf}
	}
	if caps := cached["eth0"]["caps"]; caps == nil || cached["eth0"]["caps"].(map[string]any)["portMappings"] == nil {
		t.Errorf("cluster network did not get the runtime's portMappings: %v", cached["eth0"])
	}
	if caps, _ := cached["net1"]["caps"].(map[string]any); caps["portMappings"] != nil {
		t.Errorf("annotation network got the runtime's runtimeConfig (§7.5): %v", caps)
	}
	plug := cached["net1"]["conf"].(map[string]any)["plugins"].([]any)[0].(map[string]any)
	args, _ := json.Marshal(plug["args"])
	want := `{"cni":{"extra":1,"ipam-claim-reference":"vm1.blue","keep":"nad","over":"pod"}}`
	if string(args) != want {
		t.Errorf("net1 args = %s, want %s", args, want)
	}
	e.mustDel(p)
	if plugin.IPAMClaimArg != "ipam-claim-reference" {
		t.Error("documented key changed")
	}

	p2 := e.pod("p2", map[string]string{api.NetworksAnnotation: `[{"name":"blue","ips":["10.78.1.9/24"],"ipam-claim-reference":"vm1.blue"}]`})
	if _, err := e.add(p2); err == nil || !strings.Contains(err.Error(), "ipam-claim-reference") {
		t.Errorf("ADD with ips and ipam-claim-reference = %v, want an error", err)
	}
	if l := e.links(p2); len(l) != 0 {
		t.Errorf("interfaces after the refused ADD: %v", l)
	}
}

// §3.4.1 rule 2: a NAD without spec.config uses the on-disk .conflist of
// its name before a .conf of the same name; no file at all fails (rule 4).
func TestOnDiskLookupOrder(t *testing.T) {
	e := newEnv(t)
	e.nad("", "disk", nil)
	e.writeJSON(filepath.Join(e.confDir, "10-disk.conf"), map[string]any{
		"cniVersion": "1.0.0", "name": "disk", "type": "bridge", "bridge": "mnbr9",
		"ipam": map[string]any{"type": "host-local", "subnet": "10.78.9.0/24", "dataDir": e.ipamDir}})
	e.writeJSON(filepath.Join(e.confDir, "90-disk.conflist"), map[string]any{
		"cniVersion": "1.0.0", "name": "disk", "plugins": []any{map[string]any{"type": "bridge", "bridge": "mnbr8",
			"ipam": map[string]any{"type": "host-local", "subnet": "10.78.8.0/24", "dataDir": e.ipamDir}}}})
	p := e.pod("p1", map[string]string{api.NetworksAnnotation: "disk"})
	e.mustAdd(p)
	if st := statusOf(t, e, p); len(st) != 2 || len(st[1].IPs) != 1 || !strings.HasPrefix(st[1].IPs[0], "10.78.8.") {
		t.Errorf("status = %+v, want the .conflist's 10.78.8.0/24", st)
	}
	e.mustDel(p)
	// Rule 1 first: spec.config wins over an on-disk file of the same name.
	e.nad("", "both", e.bridgeNAD("", 10, nil))
	e.writeJSON(filepath.Join(e.confDir, "05-both.conflist"), map[string]any{
		"cniVersion": "1.0.0", "name": "both", "plugins": []any{map[string]any{"type": "bridge", "bridge": "mnbr11",
			"ipam": map[string]any{"type": "host-local", "subnet": "10.78.11.0/24", "dataDir": e.ipamDir}}}})
	p3 := e.pod("p3", map[string]string{api.NetworksAnnotation: "both"})
	e.mustAdd(p3)
	if st := statusOf(t, e, p3); len(st) != 2 || len(st[1].IPs) != 1 || !strings.HasPrefix(st[1].IPs[0], "10.78.10.") {
		t.Errorf("status = %+v, want spec.config's 10.78.10.0/24", st)
	}
	e.mustDel(p3)
	e.nad("", "nowhere", nil)
	p2 := e.pod("p2", map[string]string{api.NetworksAnnotation: "nowhere"})
	if _, err := e.add(p2); err == nil || !strings.Contains(err.Error(), "no spec.config") {
		t.Errorf("ADD with a NAD without config or file = %v", err)
	}
}

// §6.1: `multinet install` writes the configuration only once the cluster
// network's configuration (and the readiness indicator file) exist.
func TestInstallWaitsForClusterNetwork(t *testing.T) {
	dir := t.TempDir()
	clusterDir := filepath.Join(dir, "cluster")
	dest := filepath.Join(dir, "kubelet")
	os.MkdirAll(clusterDir, 0o755)
	os.MkdirAll(dest, 0o755)
	ready := filepath.Join(dir, "ready")
	src := filepath.Join(dir, "00-multinet.conflist")
	b, _ := json.Marshal(map[string]any{"cniVersion": "1.1.0", "name": "multinet", "plugins": []any{map[string]any{
		"type": "multinet", "clusterNetwork": clusterDir, "readinessindicatorfile": ready}}})
	os.WriteFile(src, b, 0o644)
	bin := filepath.Join(multinetBin(t), "multinet")
	run := func(timeout string) (string, error) {
		out, err := execOut(bin, "install", "-config", src, "-dest", dest, "-timeout", timeout)
		return out, err
	}
	if out, err := run("300ms"); err == nil || !strings.Contains(out, "not ready") {
		t.Errorf("install without the cluster network: %v %s", err, out)
	}
	if _, err := os.Stat(filepath.Join(dest, "00-multinet.conflist")); !os.IsNotExist(err) {
		t.Errorf("installed before the cluster network was ready")
	}
	go func() {
		time.Sleep(300 * time.Millisecond)
		os.WriteFile(filepath.Join(clusterDir, "10-c.conf"), []byte(`{"cniVersion":"1.0.0","name":"c","type":"loopback"}`), 0o644)
		time.Sleep(200 * time.Millisecond)
		os.WriteFile(ready, nil, 0o644)
	}()
	if out, err := run("10s"); err != nil {
		t.Fatalf("install: %v %s", err, out)
	}
	got, err := os.ReadFile(filepath.Join(dest, "00-multinet.conflist"))
	if err != nil || string(got) != string(b) {
		t.Errorf("installed file = %s, %v", got, err)
	}
	if _, err := os.Stat(ready); err != nil {
		t.Errorf("installed before the readiness file existed")
	}
}

// CNI_ARGS: the cluster network gets the runtime's own (here IP=, a
// static address for the pod), a selected network only IgnoreUnknown and
// the K8S_POD_* keys: the requested IP is the cluster network's.
func TestRuntimeCNIArgsGoToTheClusterNetworkOnly(t *testing.T) {
	e := newEnv(t)
	e.nad("", "blue", e.bridgeNAD("", 1, nil))
	p := e.pod("p1", map[string]string{api.NetworksAnnotation: "blue"})
	rt := e.rt(p)
	rt.Args = append(rt.Args, [2]string{"IP", "10.77.0.50"})
	var err error
	if err = e.inHost(func() error { _, err := e.cni.AddNetworkList(t.Context(), e.conf(), rt); return err }); err != nil {
		t.Fatalf("ADD with CNI_ARGS IP=10.77.0.50: %v\n%s", err, e.log())
	}
	st := statusOf(t, e, p)
	if len(st) != 2 || !slices.Equal(st[0].IPs, []string{"10.77.0.50"}) || len(st[1].IPs) != 1 || !strings.HasPrefix(st[1].IPs[0], "10.78.1.") {
		t.Errorf("status = %+v, want eth0 10.77.0.50 and net1 in 10.78.1.0/24", st)
	}
	if err := e.inHost(func() error { return e.cni.DelNetworkList(t.Context(), e.conf(), rt) }); err != nil {
		t.Fatal(err)
	}
	if l := e.leases(); len(l) != 0 {
		t.Errorf("leases left: %v", l)
	}
}

// A NetworkAttachmentDefinition that runs multinet is refused before
// anything is delegated to it (it would recurse or wait on its own lock).
func TestSelfDelegationRefused(t *testing.T) {
	e := newEnv(t)
	// Whatever the NAD policy says: it is off here.
	e.opts["nadPolicy"] = map[string]any{"mode": "off"}
	e.nad("", "loop", map[string]any{"cniVersion": "1.0.0", "type": "multinet", "clusterNetwork": filepath.Join(e.dir, "nowhere")})
	e.nad("", "shim", map[string]any{"cniVersion": "1.0.0", "type": "multinet-shim"})
	e.nad("", "ipam", map[string]any{"cniVersion": "1.0.0", "plugins": []any{
		map[string]any{"type": "bridge", "bridge": "mnbr1", "ipam": map[string]any{"type": "multinet"}}}})
	for i, nad := range []string{"loop", "shim", "ipam"} {
		p := e.pod(fmt.Sprintf("p%d", i), map[string]string{api.NetworksAnnotation: nad})
		_, err := e.add(p)
		if err == nil || !strings.Contains(err.Error(), "cannot be its own delegate") {
			t.Fatalf("%s: ADD = %v, want a refusal naming the self-delegation", nad, err)
		}
		e.nothingLeft(p, nad+": left")
		e.mustDel(p)
	}
}
