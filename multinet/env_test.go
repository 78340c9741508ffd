package multinet

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
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
// kube-apiserver want more than the VM's default 1 GiB. Every test keeps
// away from the machine's run-time state (testutil.Run).
func TestMain(m *testing.M) {
	if os.Getenv("PATCHBAY_VM_MEMORY") == "" {
		os.Setenv("PATCHBAY_VM_MEMORY", "2048")
	}
	os.Exit(vmtest.Wrap(func() int { return kubetest.Wrap(func() int { return testutil.Run(m) }) }))
}

var (
	buildOnce sync.Once
	buildDir  string
	buildErr  error
)

// multinetBin builds cmd/multinet, cmd/multinet-daemon and cmd/multinet-shim
// once per test binary into a directory of this process
// ($TMPDIR/patchbay-multinet-test-<pid>-*), so that test runs in parallel
// (two engineers, two packages) never overwrite each other's binaries.
// TestMain cannot remove it (kubetest.Main exits): each run removes the
// directories of processes that are gone.
func multinetBin(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		if vmtest.InVM() {
			// Linking under QEMU without KVM takes minutes: the host built
			// it before the VM booted (the VM sees the host's files) and
			// named the directory (vmMultinetDir).
			if buildDir = os.Getenv(vmMultinetDir); buildDir == "" {
				buildErr = fmt.Errorf("%s is not set: build multinet on the host before vmtest.Run", vmMultinetDir)
			}
			return
		}
		removeStaleBuildDirs()
		if buildDir, buildErr = os.MkdirTemp("", fmt.Sprintf("patchbay-multinet-test-%d-", os.Getpid())); buildErr != nil {
			return
		}
		for _, cmd := range []string{"multinet", "multinet-daemon", "multinet-shim"} {
			out, err := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", filepath.Join(buildDir, cmd), "github.com/patchbay-cni/patchbay/cmd/"+cmd).CombinedOutput()
			if err != nil {
				buildErr = fmt.Errorf("go build ./cmd/%s: %v: %s", cmd, err, out)
				return
			}
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildDir
}

// removeStaleBuildDirs removes the build directories of test processes
// that no longer run (and the shared directory older versions used).
func removeStaleBuildDirs() {
	os.RemoveAll(filepath.Join(os.TempDir(), "patchbay-multinet-test"))
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "patchbay-multinet-test-*-*"))
	for _, d := range dirs {
		var pid int
		if _, err := fmt.Sscanf(strings.TrimPrefix(filepath.Base(d), "patchbay-multinet-test-"), "%d-", &pid); err != nil || pid <= 0 {
			continue
		}
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); os.IsNotExist(err) {
			os.RemoveAll(d)
		}
	}
}

func installCRDs(t testing.TB, c *kubetest.Cluster) {
	t.Helper()
	var files []string
	for _, f := range []string{"network-attachment-definitions.yaml", "ipamclaims.yaml"} {
		files = append(files, filepath.Join("..", "deploy", "crds", f))
	}
	if err := c.InstallCRDs(files...); err != nil {
		t.Fatal(err)
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
	tlsAddr     string        // the forwarder's address (127.0.0.1:port in the host netns)
	tlsConns    *atomic.Int64 // connections the forwarder accepted
	cni         *runtime.CNI
	proxy       *countingProxy
	// opts are extra keys of multinet's configuration.
	opts map[string]any
	// runtimeConfig is what the runtime passes multinet.
	runtimeConfig map[string]any
	// nodeName, when set, binds the pods e.pod creates to that node
	// (spec.nodeName, as the scheduler would).
	nodeName string
	// daemon, when set, is thick mode: conf() is the shim's, and e.opts
	// went to the daemon's configuration (startDaemon).
	daemon *daemonProc
	// daemonFlags are more command-line flags for startDaemon;
	// daemonWrap, when set, is a command that runs the daemon's.
	daemonFlags, daemonWrap []string
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
	e.tlsAddr = fwd
	e.tlsConns = conns
	e.writeKubeconfig(e.tlsKube, "https://"+fwd, true)
	// One directory with multinet and our plugins, so a test can remove one.
	e.binDir = filepath.Join(e.dir, "bin")
	os.MkdirAll(e.binDir, 0o755)
	for _, cmd := range []string{"multinet", "multinet-daemon", "multinet-shim"} {
		os.Symlink(filepath.Join(multinetBin(t), cmd), filepath.Join(e.binDir, cmd))
	}
	ours := testutil.OurBin(t)
	ents, _ := os.ReadDir(ours)
	for _, d := range ents {
		os.Symlink(filepath.Join(ours, d.Name()), filepath.Join(e.binDir, d.Name()))
	}
	e.cni = &runtime.CNI{Path: []string{e.binDir}, CacheDir: filepath.Join(e.dir, "runtime-cache")}
	// The tests' NADs are in namespaces the NAD policy checks and keep
	// host-local's state in the test's directory: the built-in policy
	// with that directory allowed.
	e.opts["nadPolicy"] = e.policy(nil)
	return e
}

// policy is a NAD policy that allows host-local's dataDir in the test's
// ipamDir (instead of only /var/lib/cni/networks), plus types.
func (e *env) policy(types map[string]any) map[string]any {
	all := map[string]any{"host-local": map[string]any{"keys": map[string]any{"dataDir": map[string]any{"under": []string{e.ipamDir}}}}}
	for k, v := range types {
		all[k] = v
	}
	return map[string]any{"types": all}
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

// conf is multinet's conflist as the runtime loads it (the shim's in
// thick mode).
func (e *env) conf() *spec.ConfList {
	e.t.Helper()
	if e.daemon != nil {
		b, _ := json.Marshal(map[string]any{"cniVersion": "1.1.0", "name": "multinet", "plugins": []any{map[string]any{
			"type": "multinet-shim", "daemonSocketDir": e.daemon.socketDir,
			// No wait for a daemon that is down: these tests assert the
			// code-11 answer itself (the wait is shim_test's).
			"daemonWaitSeconds": 0,
			"capabilities":      map[string]bool{"portMappings": true, "bandwidth": true},
		}}})
		l, err := spec.ParseConfList(b)
		if err != nil {
			e.t.Fatal(err)
		}
		return l
	}
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

// inWatchCache waits until the apiserver's watch cache serves each of
// the objects (API paths): multinet reads from it first and asks etcd
// only on a miss, so a test counting API calls waits for it, as NADs and
// pods on a real node are long in it before the runtime calls ADD.
func (e *env) inWatchCache(paths ...string) {
	e.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for _, p := range paths {
		for {
			status, _, err := e.c.Do("GET", p+"?resourceVersion=0", nil)
			if err == nil && status == http.StatusOK {
				break
			}
			if time.Now().After(deadline) {
				e.t.Fatalf("%s not in the watch cache after 30 s (status %d, %v)", p, status, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
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
	spec := map[string]any{"containers": []any{map[string]any{"name": "main", "image": "busybox"}}}
	if e.nodeName != "" {
		spec["nodeName"] = e.nodeName
	}
	obj := map[string]any{"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": name, "namespace": e.ns, "annotations": annotations},
		"spec":     spec}
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
		// "N: name: ..." only: ip also prints notes such as "Peer netns
		// reference is invalid." when a veth's peer namespace just went.
		if len(f) < 2 || !strings.HasSuffix(f[0], ":") {
			continue
		}
		if _, err := strconv.Atoi(strings.TrimSuffix(f[0], ":")); err != nil {
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
	t.Cleanup(func() { ln.Close() })
	return ln.Addr().String(), c.Relay(ln)
}

func execOut(bin string, args ...string) (string, error) {
	out, err := exec.Command(bin, args...).CombinedOutput()
	return string(out), err
}
