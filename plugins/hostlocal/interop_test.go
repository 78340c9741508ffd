package hostlocal

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/patchbay-cni/patchbay/internal/testutil"
	"github.com/patchbay-cni/patchbay/spec"
)

func refAdd(t *testing.T, ref, conf, id string) []string {
	t.Helper()
	out, err := execPlugin(t, ref, call{cmd: "ADD", id: id}, conf)
	if err != nil {
		t.Fatalf("reference ADD %s: %v: %s", id, err, out)
	}
	r, perr := spec.ParseResult([]byte(out), "")
	if perr != nil {
		t.Fatalf("reference ADD %s: %v: %s", id, perr, out)
	}
	return addrs(r)
}

func refVerb(t *testing.T, ref, cmd, conf, id string) error {
	t.Helper()
	out, err := execPlugin(t, ref, call{cmd: cmd, id: id}, conf)
	if err != nil {
		return fmt.Errorf("%v: %s", err, out)
	}
	return nil
}

// allocated lists the per-IP files of the test network.
func allocated(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(dir, "testnet"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if n := e.Name(); strings.ContainsAny(n, ".:") && !strings.HasPrefix(n, ".") && !strings.HasPrefix(n, lastIPPrefix) {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

// TestInteropWithReference shares one dataDir between the reference
// host-local v1.9.1 and us, both ways, dual-stack.
func TestInteropWithReference(t *testing.T) {
	ref := testutil.RefBin(t) + "/host-local"
	dir := t.TempDir()
	conf := testConf(dir, `"ranges":[[{"subnet":"10.4.0.0/24"}],[{"subnet":"2001:db8:4::/64"}]]`)

	// Reference first: we continue without duplicating, round-robin after its last.
	for _, id := range []string{"r1", "r2", "r3"} {
		refAdd(t, ref, conf, id)
	}
	if got := addrs(mustAdd(t, conf, "p1")); !reflect.DeepEqual(got, []string{"10.4.0.5/24", "2001:db8:4::5/64"}) {
		t.Errorf("our ADD after the reference got %v", got)
	}
	wantErr(t, call{cmd: "ADD", id: "r1"}, conf, 7, "duplicate")
	mustVerb(t, "CHECK", testConf(dir, `"ranges":[[{"subnet":"10.4.0.0/24"}],[{"subnet":"2001:db8:4::/64"}]]`, `"prevResult":{"cniVersion":"1.1.0","ips":[{"address":"10.4.0.3/24"}]}`), "r2")
	mustVerb(t, "DEL", conf, "r2")
	if readIPFile(t, dir, "10.4.0.3") != "" || readIPFile(t, dir, "2001:db8:4::3") != "" {
		t.Fatal("our DEL did not release what the reference allocated")
	}

	// Now the reference again: it sees our allocations and releases them.
	if got := refAdd(t, ref, conf, "r4"); !reflect.DeepEqual(got, []string{"10.4.0.6/24", "2001:db8:4::6/64"}) {
		t.Errorf("reference ADD after us got %v", got)
	}
	if err := refVerb(t, ref, "CHECK", testConf(dir, `"ranges":[[{"subnet":"10.4.0.0/24"}],[{"subnet":"2001:db8:4::/64"}]]`, `"prevResult":{"cniVersion":"1.1.0"}`), "p1"); err != nil {
		t.Errorf("reference CHECK of our allocation: %v", err)
	}
	if err := refVerb(t, ref, "DEL", conf, "p1"); err != nil {
		t.Fatal(err)
	}
	if readIPFile(t, dir, "10.4.0.5") != "" || readIPFile(t, dir, "2001:db8:4::5") != "" {
		t.Fatal("reference DEL did not release our allocation")
	}
	// Our index learned nothing of r4 or of the release of p1: it must notice.
	wantErr(t, call{cmd: "ADD", id: "r4"}, conf, 7, "duplicate")
	wantErr(t, call{cmd: "CHECK", id: "p1"}, testConf(dir, `"ranges":[[{"subnet":"10.4.0.0/24"}],[{"subnet":"2001:db8:4::/64"}]]`, `"prevResult":{"cniVersion":"1.1.0"}`), 3)
	mustVerb(t, "DEL", conf, "r4")
	want := []string{"10.4.0.2", "10.4.0.4", "2001:db8:4::2", "2001:db8:4::4"}
	if got := allocated(t, dir); !reflect.DeepEqual(got, want) {
		t.Errorf("allocated %v, want %v (r1 and r3)", got, want)
	}

	// Tight interleaving (same clock tick): ours, reference, ours.
	for i := range 5 {
		p, r := fmt.Sprintf("q%d", i), fmt.Sprintf("s%d", i)
		mustAdd(t, conf, p)
		refAdd(t, ref, conf, r)
		mustVerb(t, "DEL", conf, r)
		if err := refVerb(t, ref, "DEL", conf, p); err != nil {
			t.Fatal(err)
		}
	}
	if got := allocated(t, dir); !reflect.DeepEqual(got, want) {
		t.Errorf("after interleaving: allocated %v, want %v", got, want)
	}
	for _, id := range []string{"r1", "r3"} {
		mustVerb(t, "DEL", conf, id)
	}
	if got := allocated(t, dir); len(got) != 0 {
		t.Errorf("left %v", got)
	}
}

// TestConcurrentProcesses runs many plugin processes at once, ours and the
// reference's, on one network: every ADD succeeds with a distinct address.
func TestConcurrentProcesses(t *testing.T) {
	ref := testutil.RefBin(t) + "/host-local"
	dir := t.TempDir()
	conf := testConf(dir, `"ranges":[[{"subnet":"10.20.0.0/24"}],[{"subnet":"2001:db8:20::/64"}]]`)
	const n = 100
	bin := func(i int) string {
		if i%6 == 5 {
			return ref // one in six is the reference
		}
		return os.Args[0]
	}
	var mu sync.Mutex
	seen := map[string]string{}
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("ctr%d", i)
			out, err := execPlugin(t, bin(i), call{cmd: "ADD", id: id}, conf)
			if err != nil {
				t.Errorf("ADD %s (%s): %v: %s", id, bin(i), err, out)
				return
			}
			r, perr := spec.ParseResult([]byte(out), "")
			if perr != nil || len(r.IPs) != 2 {
				t.Errorf("ADD %s: %v %s", id, perr, out)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			for _, a := range addrs(r) {
				if other, dup := seen[a]; dup {
					t.Errorf("duplicate address %s for %s and %s", a, other, id)
				}
				seen[a] = id
			}
		}()
	}
	wg.Wait()
	if got := len(allocated(t, dir)); got != 2*n {
		t.Errorf("%d per-IP files, want %d", got, 2*n)
	}
	// Concurrent DELs (each by the other implementation) and new ADDs.
	for i := range n {
		wg.Add(2)
		go func() {
			defer wg.Done()
			if out, err := execPlugin(t, bin(i+1), call{cmd: "DEL", id: fmt.Sprintf("ctr%d", i)}, conf); err != nil {
				t.Errorf("DEL: %v: %s", err, out)
			}
		}()
		go func() {
			defer wg.Done()
			if out, err := execPlugin(t, bin(i), call{cmd: "ADD", id: fmt.Sprintf("new%d", i)}, conf); err != nil {
				t.Errorf("ADD: %v: %s", err, out)
			}
		}()
	}
	wg.Wait()
	if got := len(allocated(t, dir)); got != 2*n {
		t.Errorf("%d per-IP files after DEL+ADD, want %d", got, 2*n)
	}
	owners := map[string]bool{}
	for _, ip := range allocated(t, dir) {
		o := readIPFile(t, dir, ip)
		if !strings.HasPrefix(o, "new") {
			t.Errorf("%s still held by %q", ip, o)
		}
		owners[ip] = true
	}
	for i := range n {
		mustVerb(t, "DEL", conf, fmt.Sprintf("new%d", i))
	}
	if got := allocated(t, dir); len(got) != 0 {
		t.Errorf("left %v", got)
	}
}

// TestConcurrentInProcess runs many invocations as goroutines of one
// process, as in-process delegation does: the flock still serialises them.
func TestConcurrentInProcess(t *testing.T) {
	dir := t.TempDir()
	conf := testConf(dir, `"subnet":"10.21.0.0/24"`)
	var wg sync.WaitGroup
	var mu sync.Mutex
	seen := map[string]bool{}
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, code := run(t, call{cmd: "ADD", id: fmt.Sprintf("g%d", i)}, conf)
			r, err := spec.ParseResult([]byte(out), "")
			if code != 0 || err != nil {
				t.Errorf("ADD g%d: %s", i, out)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if a := addrs(r)[0]; seen[a] {
				t.Errorf("duplicate %s", a)
			} else {
				seen[a] = true
			}
		}()
	}
	wg.Wait()
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if out, code := run(t, call{cmd: "DEL", id: fmt.Sprintf("g%d", i)}, conf); code != 0 {
				t.Errorf("DEL g%d: %s", i, out)
			}
		}()
	}
	wg.Wait()
	if got := allocated(t, dir); len(got) != 0 {
		t.Errorf("left %v", got)
	}
}
