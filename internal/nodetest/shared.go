package nodetest

import (
	"fmt"
	"os"
	"sync"
	"testing"
	"time"
)

// One node per test binary, started by the first Shared call with the
// options given to Main, stopped by Main after all tests ran.
var shared struct {
	mu     sync.Mutex
	inMain bool
	opts   Options
	node   *Node
	err    error
}

// Main runs the tests of a package that uses Shared, then stops the shared
// node. Use it as the package's TestMain:
//
//	func TestMain(m *testing.M) { nodetest.Main(m, nodetest.DefaultOptions()) }
func Main(m *testing.M, opts Options) {
	shared.mu.Lock()
	shared.inMain, shared.opts = true, opts
	shared.mu.Unlock()
	code := m.Run()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if n := shared.node; n != nil {
		if code != 0 {
			fmt.Fprint(os.Stderr, n.LogTails(40))
		}
		if err := n.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "nodetest: stop shared node: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// Shared returns the test binary's node, starting it on first use (a failed
// start fails every later caller too, without retrying). It fails the test
// unless the package's TestMain calls Main. When the test fails, the
// components' log tails are printed. Tests sharing the node should use
// their own namespaces (Node.Namespace).
func Shared(t testing.TB) *Node {
	t.Helper()
	requireRoot(t)
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if !shared.inMain {
		t.Fatal("nodetest.Shared needs `func TestMain(m *testing.M) { nodetest.Main(m, opts) }` in the package, to stop the node")
	}
	if shared.node == nil && shared.err == nil {
		shared.node, shared.err = New(shared.opts)
		if shared.err == nil {
			n := shared.node
			t.Logf("nodetest: shared node %s Ready in %v (components %v), dir %s", NodeName, n.Ready.Round(time.Millisecond), n.Startup.Round(time.Millisecond), n.Dir)
		}
	}
	if shared.err != nil {
		t.Fatalf("nodetest: shared node: %v", shared.err)
	}
	n := shared.node
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(n.LogTails(40))
		}
	})
	return n
}
