package multinet

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/patchbay-cni/patchbay/internal/kubetest"
	"github.com/patchbay-cni/patchbay/internal/netns"
	"github.com/patchbay-cni/patchbay/internal/testutil"
	"github.com/patchbay-cni/patchbay/internal/vmtest"
	"github.com/patchbay-cni/patchbay/multinet/api"
	"github.com/patchbay-cni/patchbay/runtime"
	"github.com/patchbay-cni/patchbay/spec"
)

// Tests needing kernel features this machine lacks run in the test VM
// (internal/vmtest), with their own cluster inside it: etcd and
// kube-apiserver want more than the VM's default 1 GiB.
func TestMain(m *testing.M) {
	if os.Getenv("PATCHBAY_VM_MEMORY") == "" {
		os.Setenv("PATCHBAY_VM_MEMORY", "2048")
	}
	os.Exit(vmtest.Wrap(func() int { return kubetest.Wrap(m.Run) }))
}

var (
	buildOnce sync.Once
	buildDir  string
	buildErr  error
	crdOnce   sync.Once
	crdErr    error
)

// multinetBin builds cmd/multinet once per test binary into a fixed
// directory under the temp dir (overwritten by the next run, so nothing
// accumulates). `make build` does not build it yet.
func multinetBin(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		buildDir = filepath.Join(os.TempDir(), "patchbay-multinet-test")
		if vmtest.InVM() {
			// Linking under QEMU without KVM takes minutes: the host built
			// it before the VM booted (the VM sees the host's files) and
			// named the directory (vmMultinetDir).
			if buildDir = os.Getenv(vmMultinetDir); buildDir == "" {
				buildErr = fmt.Errorf("%s is not set: build multinet on the host before vmtest.Run", vmMultinetDir)
			}
			return
		}
		if buildErr = os.MkdirAll(buildDir, 0o755); buildErr != nil {
			return
		}
		out, err := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", filepath.Join(buildDir, "multinet"), "github.com/patchbay-cni/patchbay/cmd/multinet").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build ./cmd/multinet: %v: %s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildDir
}

func installCRDs(t testing.TB, c *kubetest.Cluster) {
	t.Helper()
	crdOnce.Do(func() {
		for _, f := range []string{"network-attachment-definitions.yaml", "ipamclaims.yaml"} {
			y, err := os.ReadFile(filepath.Join("..", "deploy", "crds", f))
			if err != nil {
				crdErr = err
				return
			}
			j, err := yaml.YAMLToJSON(y)
			if err != nil {
				crdErr = fmt.Errorf("%s: %v", f, err)
				return
			}
			if _, err := c.Create(j); err != nil && !kubetest.IsStatus(err, http.StatusConflict) {
				crdErr = fmt.Errorf("%s: %v", f, err)
				return
			}
		}
		for _, n := range []string{"network-attachment-definitions.k8s.cni.cncf.io", "ipamclaims.k8s.cni.cncf.io"} {
			if crdErr = c.WaitCRDEstablished(n, 30*time.Second); crdErr != nil {
				return
			}
		}
	})
	if crdErr != nil {
		t.Fatal(crdErr)
	}
}

// env is one test's world: a Kubernetes namespace, a "host" netns with the
// cluster network's bridge, directories, and the runtime that plays CRI.
type env struct {
	t        testing.TB
	c        *kubetest.Cluster
	ns       string
	hostNS   string // name
	hostPath string
	dir      string
	binDir   string
	confDir  string
	cniDir   string
	ipamDir  string
	// clusterConf is the cluster network's conflist file (bridge mnbr0,
	// host-local 10.77.0.0/24 in ipamDir).
	clusterConf string
	kubeconfig  string        // through the counting proxy (plain HTTP in the host netns)
	tlsKube     string        // through a TCP forwarder: TLS end to end
	tlsConns    *atomic.Int64 // connections the forwarder accepted
	cni         *runtime.CNI
	proxy       *countingProxy
	// opts are extra keys of multinet's configuration.
	opts map[string]any
	// runtimeConfig is what the runtime passes multinet.
	runtimeConfig map[string]any
}

func newEnv(t testing.TB) *env {
	t.Helper()
	testutil.RequireRoot(t)
	c := kubetest.Shared(t)
	installCRDs(t, c)
	e := &env{t: t, c: c, dir: t.TempDir(), opts: map[string]any{}}
	e.ns = c.UniqueNamespace(t, "mn")
	e.hostNS, e.hostPath = testutil.NewNS(t, "mnh")
	e.confDir = filepath.Join(e.dir, "net.d")
	e.cniDir = filepath.Join(e.dir, "multus")
	e.ipamDir = filepath.Join(e.dir, "ipam")
	for _, d := range []string{e.confDir, e.ipamDir, filepath.Join(e.dir, "cluster")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	e.clusterConf = filepath.Join(e.dir, "cluster", "10-cluster.conflist")
	e.writeJSON(e.clusterConf, map[string]any{
		"cniVersion": "1.0.0", "name": "cluster",
		"plugins": []any{map[string]any{
			"type": "bridge", "bridge": "mnbr0", "isGateway": true,
			"ipam": map[string]any{"type": "host-local", "subnet": "10.77.0.0/24", "dataDir": e.ipamDir,
				"routes": []any{map[string]any{"dst": "0.0.0.0/0"}}},
		}},
	})
	e.proxy = startCountingProxy(t, c, e.hostPath)
	e.kubeconfig = filepath.Join(e.dir, "kubeconfig")
	e.writeKubeconfig(e.kubeconfig, "http://"+e.proxy.addr, false)
	e.tlsKube = filepath.Join(e.dir, "kubeconfig-tls")
	fwd, conns := startForwarder(t, c, e.hostPath)
	e.tlsConns = conns
	e.writeKubeconfig(e.tlsKube, "https://"+fwd, true)
	// One directory with multinet and our plugins, so a test can remove one.
	e.binDir = filepath.Join(e.dir, "bin")
	os.MkdirAll(e.binDir, 0o755)
	os.Symlink(filepath.Join(multinetBin(t), "multinet"), filepath.Join(e.binDir, "multinet"))
	ours := testutil.OurBin(t)
	ents, _ := os.ReadDir(ours)
	for _, d := range ents {
		os.Symlink(filepath.Join(ours, d.Name()), filepath.Join(e.binDir, d.Name()))
	}
	e.cni = &runtime.CNI{Path: []string{e.binDir}, CacheDir: filepath.Join(e.dir, "runtime-cache")}
	return e
}

func (e *env) writeJSON(path string, v any) {
	e.t.Helper()
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		e.t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) writeKubeconfig(path, server string, withCA bool) {
	e.t.Helper()
	cluster := map[string]any{"server": server}
	if withCA {
		cluster["certificate-authority"] = e.c.CAFile
	}
	kc := map[string]any{
		"apiVersion": "v1", "kind": "Config", "current-context": "t",
		"clusters": []any{map[string]any{"name": "t", "cluster": cluster}},
		"users":    []any{map[string]any{"name": "u", "user": map[string]any{"token": e.c.Token}}},
		"contexts": []any{map[string]any{"name": "t", "context": map[string]any{"cluster": "t", "user": "u"}}},
	}
	b, _ := yaml.Marshal(kc)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		e.t.Fatal(err)
	}
}

// conf is multinet's conflist as the runtime loads it.
func (e *env) conf() *spec.ConfList {
	e.t.Helper()
	p := map[string]any{
		"type": "multinet", "kubeconfig": e.kubeconfig, "clusterNetwork": e.clusterConf,
		"confDir": e.confDir, "cniDir": e.cniDir,
		"capabilities": map[string]bool{"portMappings": true, "bandwidth": true},
		"logFile":      filepath.Join(e.dir, "multinet.log"), "logLevel": "debug",
	}
	for k, v := range e.opts {
		p[k] = v
	}
	b, _ := json.Marshal(map[string]any{"cniVersion": "1.1.0", "name": "multinet", "plugins": []any{p}})
	l, err := spec.ParseConfList(b)
	if err != nil {
		e.t.Fatal(err)
	}
	return l
}

// nad creates a NetworkAttachmentDefinition in namespace ns ("" = env's).
func (e *env) nad(ns, name string, config any) {
	e.t.Helper()
	if ns == "" {
		ns = e.ns
	}
	obj := map[string]any{"apiVersion": api.APIVersion(api.NADVersion), "kind": api.NADKind,
		"metadata": map[string]any{"name": name, "namespace": ns}, "spec": map[string]any{}}
	if config != nil {
		s, ok := config.(string)
		if !ok {
			b, _ := json.Marshal(config)
			s = string(b)
		}
		obj["spec"] = map[string]any{"config": s}
	}
	if _, err := e.c.Create(obj); err != nil {
		e.t.Fatal(err)
	}
}

// bridgeNAD is a bridge network with host-local IPAM in its own subnet
// 10.78.<n>.0/24 (gateway .1); no "name", to exercise name injection.
func (e *env) bridgeNAD(name string, n int, extra map[string]any) map[string]any {
	p := map[string]any{"type": "bridge", "bridge": fmt.Sprintf("mnbr%d", n),
		"ipam": map[string]any{"type": "host-local", "subnet": fmt.Sprintf("10.78.%d.0/24", n), "dataDir": e.ipamDir}}
	for k, v := range extra {
		p[k] = v
	}
	return map[string]any{"cniVersion": "1.0.0", "plugins": []any{p}}
}

type pod struct {
	ns, name, uid string
	cid           string
	nsName, path  string // its netns
}

// pod creates a Pod with the annotations and a netns for its sandbox.
func (e *env) pod(name string, annotations map[string]string) *pod {
	e.t.Helper()
	obj := map[string]any{"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": name, "namespace": e.ns, "annotations": annotations},
		"spec":     map[string]any{"containers": []any{map[string]any{"name": "main", "image": "busybox"}}}}
	out, err := e.c.Create(obj)
	if err != nil {
		e.t.Fatal(err)
	}
	var m struct {
		Metadata struct{ UID string } `json:"metadata"`
	}
	json.Unmarshal(out, &m)
	p := &pod{ns: e.ns, name: name, uid: m.Metadata.UID, cid: "c" + randHex(8)}
	p.nsName, p.path = testutil.NewNS(e.t, "mnp")
	return p
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func (e *env) rt(p *pod) *runtime.RuntimeConf {
	rt := &runtime.RuntimeConf{ContainerID: p.cid, NetNS: p.path, IfName: "eth0",
		Args: [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", p.ns}, {"K8S_POD_NAME", p.name},
			{"K8S_POD_INFRA_CONTAINER_ID", p.cid}, {"K8S_POD_UID", p.uid}}}
	if e.runtimeConfig != nil {
		rt.CapabilityArgs = e.runtimeConfig
	}
	return rt
}

// inHost runs f with the calling thread in the host netns, as a runtime
// running in the node's namespace would.
func (e *env) inHost(f func() error) error { return netns.Do(e.hostPath, f) }

func (e *env) add(p *pod) (*spec.Result, error) {
	var res *spec.Result
	err := e.inHost(func() error {
		var err error
		res, err = e.cni.AddNetworkList(context.Background(), e.conf(), e.rt(p))
		return err
	})
	return res, err
}

func (e *env) del(p *pod) error {
	return e.inHost(func() error { return e.cni.DelNetworkList(context.Background(), e.conf(), e.rt(p)) })
}

func (e *env) check(p *pod) error {
	return e.inHost(func() error { return e.cni.CheckNetworkList(context.Background(), e.conf(), e.rt(p)) })
}

func (e *env) mustAdd(p *pod) *spec.Result {
	e.t.Helper()
	res, err := e.add(p)
	if err != nil {
		e.t.Fatalf("ADD: %v\n%s", err, e.log())
	}
	return res
}

func (e *env) mustDel(p *pod) {
	e.t.Helper()
	if err := e.del(p); err != nil {
		e.t.Fatalf("DEL: %v\n%s", err, e.log())
	}
}

// noStatus fails the test when the pod still has a network-status
// annotation (DEL removes the one its ADD wrote).
func (e *env) noStatus(p *pod) {
	e.t.Helper()
	if v, ok := e.podAnnotations(p)[api.NetworkStatusAnnotation]; ok {
		e.t.Errorf("network status left after DEL: %s\n%s", v, e.log())
	}
}

func (e *env) log() string {
	b, _ := os.ReadFile(filepath.Join(e.dir, "multinet.log"))
	return "--- multinet.log ---\n" + string(b)
}

// links lists the interface names in a pod's netns (lo excluded).
func (e *env) links(p *pod) []string {
	e.t.Helper()
	out, err := testutil.InNS(e.t, p.nsName, "ip", "-o", "link", "show")
	if err != nil {
		e.t.Fatalf("ip link: %v: %s", err, out)
	}
	var names []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		n, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
		if n != "lo" {
			names = append(names, n)
		}
	}
	return names
}

// nothingLeft fails the test when the pod's netns still has interfaces
// or host-local still holds addresses; when says after what.
func (e *env) nothingLeft(p *pod, when string) {
	e.t.Helper()
	if l, ls := e.links(p), e.leases(); len(l) != 0 || len(ls) != 0 {
		e.t.Errorf("%s: interfaces %v, leases %v", when, l, ls)
	}
}

// leases lists the addresses host-local still holds in ipamDir.
func (e *env) leases() []string {
	var out []string
	filepath.WalkDir(e.ipamDir, func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if _, perr := netip.ParseAddr(d.Name()); perr == nil {
				out = append(out, filepath.Base(filepath.Dir(path))+"/"+d.Name())
			}
		}
		return nil
	})
	return out
}

// podAnnotations reads the pod's annotations.
func (e *env) podAnnotations(p *pod) map[string]string {
	e.t.Helper()
	out, err := e.c.Get("v1", "Pod", p.ns, p.name)
	if err != nil {
		e.t.Fatal(err)
	}
	var m struct {
		Metadata struct{ Annotations map[string]string } `json:"metadata"`
	}
	json.Unmarshal(out, &m)
	return m.Metadata.Annotations
}

// countingProxy is a plain-HTTP reverse proxy to the apiserver listening on
// 127.0.0.1 inside the host netns (where multinet runs); it records every
// request multinet makes.
type countingProxy struct {
	addr string
	mu   sync.Mutex
	reqs []string
	// slowStatusWrite delays merge patches (the status writes) by that many
	// nanoseconds, to order them after a later request.
	slowStatusWrite atomic.Int64
}

func startCountingProxy(t testing.TB, c *kubetest.Cluster, hostPath string) *countingProxy {
	t.Helper()
	var ln net.Listener
	if err := netns.Do(hostPath, func() (err error) { ln, err = net.Listen("tcp", "127.0.0.1:0"); return }); err != nil {
		t.Fatal(err)
	}
	target, _ := url.Parse(c.URL)
	cp := &countingProxy{addr: ln.Addr().String()}
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.Transport = c.Client.Transport
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cp.mu.Lock()
		cp.reqs = append(cp.reqs, r.Method+" "+r.URL.Path)
		cp.mu.Unlock()
		if d := cp.slowStatusWrite.Load(); d > 0 && r.Header.Get("Content-Type") == "application/merge-patch+json" {
			time.Sleep(time.Duration(d))
		}
		rp.ServeHTTP(w, r)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return cp
}

// take returns and clears the recorded requests.
func (cp *countingProxy) take() []string {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	r := cp.reqs
	cp.reqs = nil
	return r
}

// startForwarder relays TCP from 127.0.0.1 in the host netns to the
// apiserver, so TLS runs end to end (for the benchmark); it counts the
// connections it accepts.
func startForwarder(t testing.TB, c *kubetest.Cluster, hostPath string) (string, *atomic.Int64) {
	t.Helper()
	var ln net.Listener
	if err := netns.Do(hostPath, func() (err error) { ln, err = net.Listen("tcp", "127.0.0.1:0"); return }); err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(c.URL)
	conns := new(atomic.Int64)
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			go func() {
				defer in.Close()
				out, err := net.Dial("tcp", u.Host)
				if err != nil {
					return
				}
				defer out.Close()
				go io.Copy(out, in)
				io.Copy(in, out)
			}()
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return ln.Addr().String(), conns
}

func execOut(bin string, args ...string) (string, error) {
	out, err := exec.Command(bin, args...).CombinedOutput()
	return string(out), err
}
