//go:build linux && amd64

package crashtest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/patchbay-cni/patchbay/internal/testutil"
)

const raceConflist = `{"cniVersion":"1.0.0","name":"crrace","plugins":[{"type":"bridge","bridge":"crbr2","isGateway":true,
	"ipam":{"type":"host-local","subnet":"10.214.0.0/24","dataDir":"{{DIR}}/ipam"}}]}`

// newWorld sets up namespaces, directories and the runtime environment
// for conflist, as Run does, without crashing anything.
func newWorld(t *testing.T, conflist string) *world {
	t.Helper()
	return setup(t, Case{Name: t.Name(), Conflist: conflist})
}

// Issue 7 item 5: a runtime racing ADD against DEL of one attachment, with
// real processes. The verbs run one after the other, so the ADD succeeds;
// an address configured in the container is allocated to the attachment
// and the other way round; and the DEL that follows leaves nothing.
func TestRaceAddDel(t *testing.T) {
	w := newWorld(t, raceConflist)
	allowed, sysBefore := w.baseline()
	for i := range 30 {
		var wg sync.WaitGroup
		var addOut string
		var addErr error
		wg.Add(2)
		go func() { defer wg.Done(); addOut, addErr = w.patchbay("add") }()
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(i%10) * time.Millisecond) // DEL at different points of the ADD
			if out, err := w.patchbay("del"); err != nil {
				t.Errorf("trial %d: DEL failed: %v: %s", i, err, out)
			}
		}()
		wg.Wait()
		// Serialised, the DEL runs wholly before the ADD (nothing to do)
		// or after it: the ADD is never broken halfway.
		if addErr != nil {
			t.Errorf("trial %d: ADD failed: %s", i, addOut)
		}
		configured, allocated := w.containerAddrs(), w.allocations()
		if strings.Join(configured, ",") != strings.Join(allocated, ",") {
			t.Errorf("trial %d: addresses in the container %v, allocated to it %v", i, configured, allocated)
		}
		if !w.teardown("trial", allowed, sysBefore) {
			t.Fatalf("trial %d: not clean after DEL", i)
		}
	}
}

// Two ADDs of one attachment at once: one attaches, the other is told
// clearly that an ADD of the attachment is in progress (code 11), not
// "eth0 already exists" (999) after doing half the work.
func TestRaceAddAdd(t *testing.T) {
	w := newWorld(t, raceConflist)
	allowed, sysBefore := w.baseline()
	overlapped := 0
	for i := range 10 {
		var wg sync.WaitGroup
		outs := make([]string, 2)
		errs := make([]error, 2)
		for j := range 2 {
			wg.Add(1)
			go func() { defer wg.Done(); outs[j], errs[j] = w.patchbay("add") }()
		}
		wg.Wait()
		if (errs[0] == nil) == (errs[1] == nil) {
			t.Fatalf("trial %d: want exactly one ADD to succeed: %v %q, %v %q", i, errs[0], outs[0], errs[1], outs[1])
		}
		loser := outs[0]
		if errs[1] != nil {
			loser = outs[1]
		}
		if strings.Contains(loser, "code 11") && strings.Contains(loser, "another ADD") {
			overlapped++
		} else if !strings.Contains(loser, "already exists") {
			t.Errorf("trial %d: the losing ADD's error: %s", i, loser)
		}
		if got := w.allocations(); len(got) != 1 {
			t.Errorf("trial %d: allocations %v after two ADDs, want one", i, got)
		}
		if !w.teardown("trial", allowed, sysBefore) {
			t.Fatalf("trial %d: not clean after DEL", i)
		}
	}
	if overlapped == 0 {
		t.Error("no trial had the two ADDs overlap: the code-11 path was not exercised")
	}
	t.Logf("%d of 10 trials overlapped", overlapped)
}

// containerAddrs lists the IPv4 addresses on the container's interface.
func (w *world) containerAddrs() []string {
	var links []struct {
		AddrInfo []struct {
			Family string `json:"family"`
			Local  string `json:"local"`
		} `json:"addr_info"`
	}
	out, err := testutil.InNS(w.t, w.cont, "ip", "-j", "addr", "show", "dev", ifName)
	if err != nil {
		return nil // no interface
	}
	if err := json.Unmarshal([]byte(out), &links); err != nil {
		w.t.Fatalf("ip -j addr: %v: %s", err, out)
	}
	var addrs []string
	for _, l := range links {
		for _, a := range l.AddrInfo {
			if a.Family == "inet" {
				addrs = append(addrs, a.Local)
			}
		}
	}
	return addrs
}

// allocations lists host-local's address files held by the attachment.
func (w *world) allocations() []string {
	dir := filepath.Join(w.dir, "ipam", w.network)
	ents, _ := os.ReadDir(dir)
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "10.") {
			if b, err := os.ReadFile(filepath.Join(dir, e.Name())); err == nil && strings.HasPrefix(string(b), containerID+"\r\n") {
				out = append(out, e.Name())
			}
		}
	}
	return out
}
