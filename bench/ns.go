package main

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
)

// nsManager creates named network namespaces with `ip netns add` and
// remembers them so every one is removed at the end, even when a workload
// fails or the run is interrupted. Names carry our PID so concurrent runs
// (or other helpers' tests) never collide with ours.
type nsManager struct {
	mu   sync.Mutex
	seq  int
	live map[string]bool
}

func newNSManager() *nsManager { return &nsManager{live: map[string]bool{}} }

// add creates a namespace; loUp brings its loopback up (a "host"); container
// namespaces are left as a runtime hands them to plugins (lo down).
func (m *nsManager) add(kind string, loUp bool) (name, path string, err error) {
	m.mu.Lock()
	m.seq++
	name = fmt.Sprintf("pbb%d-%s%d", os.Getpid(), kind, m.seq)
	m.live[name] = true
	m.mu.Unlock()
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		m.forget(name)
		return "", "", fmt.Errorf("ip netns add %s: %v: %s", name, err, strings.TrimSpace(string(out)))
	}
	if loUp {
		if out, err := exec.Command("ip", "-n", name, "link", "set", "lo", "up").CombinedOutput(); err != nil {
			m.del(name)
			return "", "", fmt.Errorf("lo up in %s: %v: %s", name, err, strings.TrimSpace(string(out)))
		}
	}
	return name, "/run/netns/" + name, nil
}

func (m *nsManager) forget(name string) {
	m.mu.Lock()
	delete(m.live, name)
	m.mu.Unlock()
}

// del removes one namespace (and with it every link, bridge and nftables
// table a plugin left inside).
func (m *nsManager) del(name string) error {
	m.forget(name)
	if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
		return fmt.Errorf("ip netns del %s: %v: %s", name, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// delAll removes the given namespaces, reporting the first failure.
func (m *nsManager) delAll(names []string) error {
	var first error
	for _, n := range names {
		if err := m.del(n); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// cleanup removes every namespace still alive; it is safe to call twice.
func (m *nsManager) cleanup() {
	m.mu.Lock()
	var names []string
	for n := range m.live {
		names = append(names, n)
	}
	m.mu.Unlock()
	if err := m.delAll(names); err != nil {
		fmt.Fprintln(os.Stderr, "bench: cleanup:", err)
	}
}
