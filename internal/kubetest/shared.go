package kubetest

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
)

// One cluster per test binary, started by the first Shared call and stopped
// by Main after all tests ran.
var shared struct {
	mu      sync.Mutex
	inMain  bool
	cluster *Cluster
	err     error
	dir     string
}

// Main runs the tests of a package that uses Shared and then stops the
// shared cluster. Use it as the package's TestMain:
//
//	func TestMain(m *testing.M) { kubetest.Main(m) }
func Main(m *testing.M) { os.Exit(Wrap(m.Run)) }

// Wrap is Main for a TestMain that does more around the tests, e.g. with
// VM tests (internal/vmtest):
//
//	os.Exit(vmtest.Wrap(func() int { return kubetest.Wrap(m.Run) }))
//
// It runs run, then stops the shared cluster if one was started, and
// returns run's exit code (1 if stopping failed).
func Wrap(run func() int) int {
	shared.mu.Lock()
	shared.inMain = true
	shared.mu.Unlock()
	code := run()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if c := shared.cluster; c != nil {
		if code != 0 {
			fmt.Fprint(os.Stderr, c.LogTails(40))
		}
		if err := c.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "kubetest: stop shared cluster: %v\n", err)
			code = 1
		}
	}
	if shared.dir != "" {
		os.RemoveAll(shared.dir)
	}
	return code
}

// Shared returns the test binary's shared cluster, starting it on first use
// (a failed start fails every later caller too, without retrying). It fails
// the test unless the package's TestMain calls Main, which stops it. When the
// test fails, the log tails are printed.
func Shared(t testing.TB) *Cluster {
	t.Helper()
	requireRoot(t)
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if !shared.inMain {
		t.Fatal("kubetest.Shared needs `func TestMain(m *testing.M) { kubetest.Main(m) }` in the package, to stop the cluster")
	}
	if shared.cluster == nil && shared.err == nil {
		shared.dir, shared.err = os.MkdirTemp("", "kubetest-")
		if shared.err == nil {
			shared.cluster, shared.err = start(shared.dir)
		}
		if shared.err == nil {
			c := shared.cluster
			t.Logf("kubetest: shared cluster %s ready in %v (etcd pid %d, apiserver pid %d)", c.URL, c.Startup.Round(1e6), c.etcd.Pid(), c.apiserver.Pid())
		}
	}
	if shared.err != nil {
		t.Fatalf("kubetest: shared cluster: %v", shared.err)
	}
	c := shared.cluster
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(c.LogTails(40))
		}
	})
	return c
}

// UniqueNamespace creates a namespace named prefix-<random> with its default
// ServiceAccount, for tests sharing a cluster. It is left in place: without a
// controller-manager a deleted namespace never finishes terminating.
func (c *Cluster) UniqueNamespace(t testing.TB, prefix string) string {
	t.Helper()
	name := strings.ToLower(prefix) + "-" + randomHex(3)
	if err := c.EnsureNamespace(name); err != nil {
		t.Fatalf("kubetest: namespace %s: %v", name, err)
	}
	if err := c.CreateDefaultServiceAccount(name); err != nil {
		t.Fatalf("kubetest: default service account in %s: %v", name, err)
	}
	return name
}
