package clusteripam

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/patchbay-cni/patchbay/internal/testutil"
	"github.com/patchbay-cni/patchbay/spec"
)

// node is a "node" running the cluster-ipam binary: its own node name and
// credentials, given through a flat file (as a node agent would install
// it). The plugin runs in the test's own network namespace: an IPAM plugin
// touches no interface, and the apiserver is on 127.0.0.1.
type node struct {
	w    *world
	name string
	flat string
	bin  string
}

func (w *world) node(name string) *node {
	w.t.Helper()
	dir := w.t.TempDir()
	kc := filepath.Join(dir, "kubeconfig")
	if err := w.c.WriteKubeconfig(kc, w.c.Token); err != nil {
		w.t.Fatal(err)
	}
	flat := filepath.Join(dir, "cluster-ipam.conf")
	b, _ := json.Marshal(map[string]any{"kubernetes": map[string]any{"kubeconfig": kc}, "node_name": name})
	if err := os.WriteFile(flat, b, 0o600); err != nil {
		w.t.Fatal(err)
	}
	return &node{w: w, name: name, flat: flat, bin: pluginBin(w.t)}
}

func pluginBin(t testing.TB) string {
	t.Helper()
	p := filepath.Join(testutil.OurBin(t), "cluster-ipam")
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%v: run `make build` first", err)
	}
	return p
}

// netconf is a network configuration using cluster-ipam with the world's
// network_name and this node's flat file.
func (n *node) netconf(ipam map[string]any, extra map[string]any) []byte {
	m := map[string]any{"type": Type, "network_name": n.w.net, "configuration_path": n.flat}
	for k, v := range ipam {
		m[k] = v
	}
	conf := map[string]any{"cniVersion": "1.1.0", "name": "net", "ipam": m}
	for k, v := range extra {
		conf[k] = v
	}
	b, _ := json.Marshal(conf)
	return b
}

// invocation of the binary; wrap prefixes the command (strace ...).
type call struct {
	verb, cid, ifname, args string
	conf                    []byte
	wrap                    []string
}

func (n *node) run(t testing.TB, c call) ([]byte, error) {
	t.Helper()
	argv := append(append([]string{}, c.wrap...), n.bin)
	cmd := exec.Command(argv[0], argv[1:]...)
	ifname := c.ifname
	if ifname == "" {
		ifname = "net1"
	}
	cmd.Env = append(os.Environ(), "CNI_COMMAND="+c.verb, "CNI_CONTAINERID="+c.cid, "CNI_NETNS=/proc/self/ns/net",
		"CNI_IFNAME="+ifname, "CNI_PATH=/nonexistent", "CNI_ARGS="+c.args)
	cmd.Stdin = bytes.NewReader(c.conf)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		if ce, ok := spec.ParseError(stdout.Bytes()); ok {
			return stdout.Bytes(), ce
		}
		return stdout.Bytes(), fmt.Errorf("%v: %s %s", err, stdout.String(), stderr.String())
	}
	return stdout.Bytes(), nil
}

func (n *node) add(t testing.TB, conf []byte, cid, args string) (*spec.Result, error) {
	t.Helper()
	out, err := n.run(t, call{verb: "ADD", cid: cid, args: args, conf: conf})
	if err != nil {
		return nil, err
	}
	return spec.ParseResult(out, "1.1.0")
}

// del runs DEL, with prev as prevResult when given.
func (n *node) del(t testing.TB, conf []byte, cid string, prev *spec.Result) error {
	t.Helper()
	if prev != nil {
		var m map[string]any
		json.Unmarshal(conf, &m)
		b, _ := prev.Encode("1.1.0")
		m["prevResult"] = json.RawMessage(b)
		conf, _ = json.Marshal(m)
	}
	_, err := n.run(t, call{verb: "DEL", cid: cid, conf: conf})
	return err
}

// The binary's verbs: ADD, CHECK (needs prevResult, verifies the holder),
// STATUS, DEL with and without prevResult, VERSION.
func TestBinaryVerbs(t *testing.T) {
	w := newWorld(t)
	n := w.node("node-a")
	conf := n.netconf(map[string]any{"range": "10.46.0.0/24", "gateway": "10.46.0.1", "routes": []any{map[string]any{"dst": "0.0.0.0/0"}},
		"dns": map[string]any{"nameservers": []any{"10.46.0.1"}}}, nil)
	res, err := n.add(t, conf, "c1", "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p;K8S_POD_UID=u")
	if err != nil {
		t.Fatal(err)
	}
	if len(res.IPs) != 1 || res.IPs[0].Gateway.String() != "10.46.0.1" || len(res.Routes) != 1 || res.DNS.Nameservers[0] != "10.46.0.1" {
		t.Fatalf("result %+v", res)
	}
	a := w.wantAllocations(1, "after ADD")[0]
	if a.Spec.Node != "node-a" || a.Spec.Pod == nil || a.Spec.Pod.Name != "p" || a.Spec.ContainerID != "c1" {
		t.Errorf("allocation %+v", a.Spec)
	}
	withPrev := func(cmd string) error {
		var m map[string]any
		json.Unmarshal(conf, &m)
		b, _ := res.Encode("1.1.0")
		m["prevResult"] = json.RawMessage(b)
		c, _ := json.Marshal(m)
		_, err := n.run(t, call{verb: cmd, cid: "c1", conf: c})
		return err
	}
	if err := withPrev("CHECK"); err != nil {
		t.Errorf("CHECK: %v", err)
	}
	if _, err := n.run(t, call{verb: "STATUS", conf: conf}); err != nil {
		t.Errorf("STATUS: %v", err)
	}
	if err := n.del(t, conf, "c1", res); err != nil {
		t.Fatal(err)
	}
	w.wantAllocations(0, "after DEL")
	if err := withPrev("CHECK"); err == nil || !strings.Contains(err.Error(), "is not allocated") {
		t.Errorf("CHECK after DEL: %v", err)
	}
	if err := n.del(t, conf, "c1", nil); err != nil {
		t.Errorf("DEL again: %v", err)
	}
	// STATUS without working credentials is code 50.
	bad := []byte(strings.Replace(string(conf), n.flat, filepath.Join(t.TempDir(), "none.conf"), 1))
	if _, err := n.run(t, call{verb: "STATUS", conf: bad}); err == nil {
		t.Error("STATUS without a kubeconfig succeeded")
	}
	// No credentials at all: ADD is code 7 naming them; DEL succeeds (it
	// cannot free anything, and failing would block the teardown for good).
	noCreds := n.netconf(map[string]any{"range": "10.46.0.0/24", "kubernetes": map[string]any{"kubeconfig": "/nonexistent/kubeconfig"}}, nil)
	if _, err := n.add(t, noCreds, "c3", ""); spec.AsError(err, 0).Code != spec.ErrInvalidNetworkConfig || !strings.Contains(err.Error(), `ipam.kubernetes.kubeconfig "/nonexistent/kubeconfig"`) {
		t.Errorf("ADD without credentials: %v", err)
	}
	if err := n.del(t, noCreds, "c3", nil); err != nil {
		t.Errorf("DEL without credentials: %v", err)
	}
	kc := filepath.Join(t.TempDir(), "kc")
	w.c.WriteKubeconfig(kc, "wrong-token")
	badCreds := n.netconf(map[string]any{"range": "10.46.0.0/24", "kubernetes": map[string]any{"kubeconfig": kc}}, nil)
	_, err = n.run(t, call{verb: "STATUS", conf: badCreds})
	if ce, ok := err.(*spec.Error); !ok || ce.Code != spec.ErrPluginNotAvailable {
		t.Errorf("STATUS with refused credentials: %v, want code 50", err)
	}
	// Invalid configuration: code 7 naming the key, for ADD; DEL still works.
	broken := n.netconf(map[string]any{"range": "10.46.0.0/33"}, nil)
	if _, err := n.add(t, broken, "c2", ""); spec.AsError(err, 0).Code != spec.ErrInvalidNetworkConfig || !strings.Contains(err.Error(), `ipam.range "10.46.0.0/33"`) {
		t.Errorf("ADD with a bad range: %v", err)
	}
	if err := n.del(t, broken, "c2", nil); err != nil {
		t.Errorf("DEL with a bad range: %v", err)
	}
	out, err := n.run(t, call{verb: "VERSION", conf: []byte(`{"cniVersion":"1.1.0"}`)})
	if err != nil || !strings.Contains(string(out), `"1.1.0"`) {
		t.Errorf("VERSION: %s %v", out, err)
	}
}

// 100 concurrent ADD processes on two nodes, one pool: no failure, no
// duplicate; then 100 concurrent DELs leave nothing.
func TestHundredConcurrentProcesses(t *testing.T) {
	w := newWorld(t)
	nodes := []*node{w.node("node-a"), w.node("node-b")}
	conf := nodes[0].netconf(map[string]any{"range": "10.47.0.0/24"}, nil)
	confB := nodes[1].netconf(map[string]any{"range": "10.47.0.0/24"}, nil)
	const n = 100
	results := make([]*spec.Result, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	t0 := time.Now()
	for i := range n {
		wg.Go(func() {
			nd, cf := nodes[i%2], conf
			if i%2 == 1 {
				cf = confB
			}
			results[i], errs[i] = nd.add(t, cf, fmt.Sprintf("c%d", i), "")
		})
	}
	wg.Wait()
	t.Logf("%d concurrent ADD processes: %v", n, time.Since(t0))
	seen := map[netip.Addr]int{}
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("ADD %d: %v", i, errs[i])
		}
		seen[results[i].IPs[0].Address.Addr()]++
	}
	for a, k := range seen {
		if k > 1 {
			t.Errorf("%s handed out %d times", a, k)
		}
	}
	allocs := w.wantAllocations(n, "after the ADDs")
	perNode := map[string]int{}
	for _, a := range allocs {
		perNode[a.Spec.Node]++
	}
	if perNode["node-a"] != n/2 || perNode["node-b"] != n/2 {
		t.Errorf("allocations per node %v", perNode)
	}
	t0 = time.Now()
	for i := range n {
		wg.Go(func() {
			nd, cf := nodes[i%2], conf
			if i%2 == 1 {
				cf = confB
			}
			errs[i] = nd.del(t, cf, fmt.Sprintf("c%d", i), results[i])
		})
	}
	wg.Wait()
	t.Logf("%d concurrent DEL processes: %v", n, time.Since(t0))
	for i := range n {
		if errs[i] != nil {
			t.Errorf("DEL %d: %v", i, errs[i])
		}
	}
	w.wantAllocations(0, "after the DELs")
}

// The plugin killed (SIGKILL, injected by strace at the Nth write or read
// system call, or as it exits after printing its result) at every step of
// an ADD; then the runtime's DEL, which has
// no result to pass: nothing is left and nothing was handed out twice. The
// kills land before the allocation exists and after it exists, both.
func TestKilledAtEveryStep(t *testing.T) {
	if _, err := exec.LookPath("strace"); err != nil {
		t.Fatal("strace is needed (make test-deps installs it)")
	}
	w := newWorld(t)
	nd := w.node("node-a")
	conf := nd.netconf(map[string]any{"range": "10.48.0.0/24", "ipRanges": []any{map[string]any{"range": "fd48::/120"}}}, nil)
	killedBefore, killedAfter, completed := 0, 0, 0
	for _, sc := range []string{"write", "read", "connect", "exit_group"} {
		for when := 1; when < 60; when++ {
			cid := fmt.Sprintf("k-%s-%d", sc, when)
			wrap := []string{"strace", "-f", "-qq", "-o", "/dev/null", "-e", "trace=" + sc, "-e", fmt.Sprintf("inject=%s:signal=KILL:when=%d", sc, when)}
			_, err := nd.run(t, call{verb: "ADD", cid: cid, conf: conf, wrap: wrap})
			var ee *exec.ExitError
			killed := err != nil && (strings.Contains(err.Error(), "signal: killed") || errors.As(err, &ee) && ee.Sys().(syscall.WaitStatus).Signaled())
			if err != nil && !killed {
				t.Fatalf("%s when=%d: ADD failed without being killed: %v", sc, when, err)
			}
			held := 0
			for _, a := range w.allocations() {
				if a.Spec.ContainerID == cid {
					held++
				}
			}
			switch {
			case !killed:
				completed++
			case held == 0:
				killedBefore++
			default:
				killedAfter++
			}
			if err := nd.del(t, conf, cid, nil); err != nil {
				t.Fatalf("%s when=%d: DEL after the kill: %v", sc, when, err)
			}
			if left := w.allocations(); len(left) != 0 {
				t.Fatalf("%s when=%d: %d allocations left after DEL: %+v", sc, when, len(left), left[0].Spec)
			}
			if !killed {
				break // the ADD ran to completion: no later step to kill
			}
		}
	}
	t.Logf("killed before the allocation existed: %d, after: %d, completed: %d", killedBefore, killedAfter, completed)
	if killedBefore == 0 || killedAfter == 0 || completed != 4 {
		t.Errorf("the kills did not cover both sides of the allocation (before %d, after %d, completed %d)", killedBefore, killedAfter, completed)
	}
}
