// Package kubetest runs a real Kubernetes API server for tests: Debian's etcd
// and a kube-apiserver built by scripts/kube-deps.sh, in a network namespace
// of their own (see Isolation), with their state in a temporary directory.
// No controller-manager, scheduler or kubelet runs: objects are stored and
// validated, nothing acts on them (create the "default" ServiceAccount before
// Pods; CRDs still become Established because the apiserver does that itself).
//
// Two ways to get a cluster:
//
//   - Start(t) gives a test its own cluster (≈3 s to start), stopped when the
//     test ends.
//   - Shared(t) gives every test of the binary one cluster, started on first
//     use. The package's TestMain must call kubetest.Main(m), which stops it
//     after all tests. Tests sharing it should use their own namespaces
//     (UniqueNamespace).
//
// # Isolation
//
// Both servers run inside a network namespace the cluster creates (unnamed,
// only lo, up) and listen on its 127.0.0.1; the machine's own namespace
// gets no listener of theirs. Clients reach the apiserver at Cluster.URL, a
// relay (internal/tcprelay) on the machine's 127.0.0.1 that pipes each
// connection into the namespace: Do, Client, Kubeconfig and every program a
// test runs with that kubeconfig work as if the apiserver listened there,
// and RestartAPIServer keeps the URL. Relay serves the same into a test's own
// namespace. The namespace's only references are the two servers and a
// descriptor the Cluster holds, so Stop (which closes the relays, stops the
// servers and closes the descriptor) leaves nothing, and neither does a test
// binary that dies without cleaning up, even by SIGKILL: the kernel closes
// the descriptor and the relays' sockets, and the servers get SIGKILL when
// it dies (launch.Start's Pdeathsig).
//
// Authentication is a static admin token (group system:masters) sent by the
// Cluster's helpers and its HTTP client; the serving certificate is signed by
// a CA generated per cluster, which the client and the kubeconfig trust (no
// insecure-skip-verify anywhere).
//
// The package needs only the standard library and sigs.k8s.io/yaml (for
// the manifests InstallCRDs and BindPlainUser read); client-go users can
// load Cluster.Kubeconfig.
package kubetest

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/patchbay-cni/patchbay/internal/tcprelay"
)

// Version is the Kubernetes version scripts/kube-deps.sh builds.
const Version = "v1.32.13"

// Cluster is a running etcd + kube-apiserver pair.
type Cluster struct {
	URL        string       // https://127.0.0.1:<port>: the relay on the machine's loopback
	Token      string       // bearer token of AdminUser (group system:masters)
	UserToken  string       // bearer token of PlainUser (no rights beyond system:authenticated)
	CAFile     string       // PEM CA that signed the serving certificate
	CAPEM      []byte       // contents of CAFile
	Kubeconfig string       // kubeconfig file (server, CA, token) for client-go users
	Dir        string       // state directory: etcd data, certificates, logs
	Client     *http.Client // trusts CAFile; does not add the token (Do does)
	Startup    time.Duration

	etcd, apiserver *process
	ns              *clusterNetns
	relayMu         sync.Mutex
	relays          []*tcprelay.Relay // the URL's first, then Relay's
	apiBin          string
	apiArgs         []string
	disc            discoveryCache
	crdMu           sync.Mutex
	crds            map[string]bool // established by InstallCRDs
}

// Start runs a cluster for this test and stops it (killing exactly the two
// processes it started, by PID, and waiting for them) when the test ends.
// It fails the test when not root or when the binaries are missing. When the
// test fails, the tails of the etcd and apiserver logs are printed.
func Start(t testing.TB) *Cluster {
	t.Helper()
	requireRoot(t)
	c, err := start(t.TempDir())
	if err != nil {
		t.Fatalf("kubetest: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(c.LogTails(40))
		}
		if err := c.Stop(); err != nil {
			t.Errorf("kubetest: stop: %v", err)
		}
	})
	t.Logf("kubetest: %s ready in %v (etcd pid %d, apiserver pid %d)", c.URL, c.Startup.Round(time.Millisecond), c.etcd.Pid(), c.apiserver.Pid())
	return c
}

// StartIn runs a cluster with its state in dir, for programs (the
// benchmarks); tests use Start or Shared. The caller stops it.
func StartIn(dir string) (*Cluster, error) {
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("kubetest needs root")
	}
	return start(dir)
}

// PIDs returns the process IDs of etcd and kube-apiserver (both in the
// cluster's network namespace: /proc/PID/ns/net).
func (c *Cluster) PIDs() []int { return []int{c.etcd.Pid(), c.apiserver.Pid()} }

// Stop closes the relays (the URL's and Relay's: their listeners and
// connections), kills the apiserver then etcd (SIGTERM, SIGKILL after a
// grace period), waits for both, and drops the network namespace. Safe to
// call more than once.
func (c *Cluster) Stop() error {
	var errs []string
	c.relayMu.Lock()
	relays := c.relays
	c.relays = nil
	c.relayMu.Unlock()
	for _, r := range relays {
		if err := r.Close(); err != nil {
			errs = append(errs, fmt.Sprintf("relay on %s: %v", r.Addr(), err))
		}
	}
	for _, p := range []*process{c.apiserver, c.etcd} {
		if p == nil {
			continue
		}
		if err := p.stop(10 * time.Second); err != nil {
			errs = append(errs, err.Error())
		}
	}
	c.ns.close()
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}

// LogTails returns the last n lines of the etcd and apiserver logs.
func (c *Cluster) LogTails(n int) string {
	var b strings.Builder
	for _, name := range []string{"etcd.log", "kube-apiserver.log"} {
		fmt.Fprintf(&b, "--- last %d lines of %s ---\n%s\n", n, name, tailFile(filepath.Join(c.Dir, name), n))
	}
	return b.String()
}

func requireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("kubetest needs root (the test suite runs as root via `make test`)")
	}
}

// binaries finds etcd and kube-apiserver, with a message naming the fix.
func binaries() (etcd, apiserver string, err error) {
	if etcd, err = Binary("etcd"); err != nil {
		return "", "", err
	}
	apiserver, err = Binary("kube-apiserver")
	return etcd, apiserver, err
}

// Binary finds a cluster component: "etcd" (Debian's etcd-server) or one
// of kube-apiserver, kube-controller-manager, kube-scheduler and kubelet,
// which scripts/kube-deps.sh builds into $PATCHBAY_KUBE_BIN (default
// ~/.cache/patchbay/kube-<Version>); $PATCHBAY_KUBE_APISERVER names the
// apiserver alone. A missing one is an error naming the fix.
func Binary(name string) (string, error) {
	const fix = "run scripts/kube-deps.sh as root (or `make test`) to install etcd-server and build the kube binaries"
	if name == "etcd" {
		if p, err := exec.LookPath("etcd"); err == nil {
			return p, nil
		}
		if _, err := os.Stat("/usr/bin/etcd"); err != nil {
			return "", fmt.Errorf("etcd not found: %s", fix)
		}
		return "/usr/bin/etcd", nil
	}
	p := ""
	if name == "kube-apiserver" {
		p = os.Getenv("PATCHBAY_KUBE_APISERVER")
	}
	if p == "" {
		dir := os.Getenv("PATCHBAY_KUBE_BIN")
		if dir == "" {
			home, err := os.UserHomeDir()
			if err != nil {
				return "", fmt.Errorf("%s: PATCHBAY_KUBE_BIN unset and no home directory: %v", name, err)
			}
			dir = filepath.Join(home, ".cache", "patchbay", "kube-"+Version)
		}
		p = filepath.Join(dir, name)
	}
	if st, err := os.Stat(p); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
		return "", fmt.Errorf("%s not found at %s: %s", name, p, fix)
	}
	return p, nil
}
