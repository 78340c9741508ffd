package firewall

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// conf4 is a firewall configuration for network on dataDir with an
// IPv4-only prevResult holding ip ("" for none: a DEL as a runtime before
// 0.4.0 sends it).
func conf4(network, dataDir, ip string) map[string]any {
	c := map[string]any{"cniVersion": "1.0.0", "name": network, "type": "firewall", "backend": "iptables", "dataDir": dataDir}
	if ip != "" {
		c["prevResult"] = map[string]any{"cniVersion": "1.0.0", "ips": []any{map[string]any{"address": ip + "/24"}}}
	}
	return c
}

func attEnv(id, ifName string) []string {
	return []string{"CNI_CONTAINERID=" + id, "CNI_IFNAME=" + ifName}
}

func (n *node) mustRun(cmd string, conf any, extraEnv ...string) {
	n.t.Helper()
	if out, code := n.run(cmd, conf, extraEnv...); code != 0 {
		n.t.Fatalf("%s: %s", cmd, out)
	}
}

// TestRecordNamesDoNotCollide: ("a_b", "c") and ("a", "b_c") are two
// attachments with two records: removing one leaves the other's, whose DEL
// without prevResult then still finds its address.
func TestRecordNamesDoNotCollide(t *testing.T) {
	n := newNode(t)
	before := n.state()
	dir := filepath.Join(n.dir, "fw")
	n.mustRun("ADD", conf4("coll", dir, "10.51.0.2"), attEnv("a_b", "c")...)
	n.mustRun("ADD", conf4("coll", dir, "10.51.0.3"), attEnv("a", "b_c")...)
	for _, name := range []string{"a_b:c.json", "a:b_c.json"} {
		if _, err := os.Stat(filepath.Join(dir, "coll", name)); err != nil {
			t.Errorf("record %s: %v", name, err)
		}
	}
	n.mustRun("DEL", conf4("coll", dir, ""), attEnv("a", "b_c")...)
	if !n.iptablesHas(false, "-A CNI-FORWARD -s 10.51.0.2/32 -j ACCEPT") || n.iptablesHas(false, "10.51.0.3/32") {
		t.Errorf("after the DEL of (a, b_c):\n%s", n.state())
	}
	n.mustRun("DEL", conf4("coll", dir, ""), attEnv("a_b", "c")...)
	if after := n.state(); after != before {
		t.Fatalf("the DEL of (a_b, c) without prevResult left:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

// TestForeignFilesInDataDir: dataDir is configuration, and the directory
// of a network may hold files that are not records (an operator's, a CNI
// config: "/etc/cni" with a network named "net.d"), even one that looks
// like a record but does not name its own file. ADD, DEL and GC with no
// valid attachment leave every one of them and the directory, which the
// plugin did not make; they are never read as claims either.
func TestForeignFilesInDataDir(t *testing.T) {
	n := newNode(t)
	before := n.state()
	data := filepath.Join(n.dir, "cni")
	netd := filepath.Join(data, "net.d")
	foreign := map[string]string{
		"important.json":   `{"keep":"me"}`,
		"10-mynet.json":    `{"cniVersion":"1.0.0","name":"mynet","type":"bridge","bridge":"cni0"}`,
		"x:eth0.json":      `{"containerID":"y","ifname":"eth0","backend":"iptables","ips":["10.52.0.9"]}`,
		"notes.txt":        "x",
		".hidden.tmp":      "x",
		".x:eth0.json.tmp": "x",
	}
	for name, content := range foreign {
		writeFile(t, filepath.Join(netd, name), content)
	}
	// A directory the plugin did not make, holding a well-named record
	// that claims the address below: not a claim (it would keep the
	// address's rules forever).
	writeFile(t, filepath.Join(data, "other", "z:eth0.json"), `{"containerID":"z","ifname":"eth0","backend":"iptables","ips":["10.52.0.2"]}`)

	n.mustRun("ADD", conf4("net.d", data, "10.52.0.2"))
	n.mustRun("DEL", conf4("net.d", data, "10.52.0.2"))
	if after := n.state(); after != before {
		t.Errorf("DEL left rules (a foreign file counted as a claim?):\n%s", after)
	}
	n.mustRun("ADD", conf4("net.d", data, "10.52.0.2"))
	gc := conf4("net.d", data, "")
	gc["cniVersion"] = "1.1.0"
	n.mustRun("GC", gc)
	if after := n.state(); after != before {
		t.Errorf("GC left rules:\n%s", after)
	}
	for name, content := range foreign {
		if b, err := os.ReadFile(filepath.Join(netd, name)); err != nil || string(b) != content {
			t.Errorf("%s after GC: %q, %v", name, b, err)
		}
	}
	ents, _ := os.ReadDir(netd)
	if len(ents) != len(foreign) {
		t.Errorf("%s holds %d entries, want the %d foreign files", netd, len(ents), len(foreign))
	}
	if _, err := os.Stat(filepath.Join(data, "other", "z:eth0.json")); err != nil {
		t.Errorf("the other directory's file: %v", err)
	}
}

// TestNetworkDirectory: the plugin makes its network directory (with its
// marker) and removes it with the last record, and what a crash left
// while making it; a directory it did not make stays, even when empty.
func TestNetworkDirectory(t *testing.T) {
	n := newNode(t)
	data := filepath.Join(n.dir, "fw")
	n.mustRun("ADD", conf4("ours", data, "10.53.0.2"))
	if _, err := os.Stat(filepath.Join(data, "ours", marker)); err != nil {
		t.Fatalf("marker: %v", err)
	}
	writeFile(t, filepath.Join(data, ".ours.new", marker), "") // a killed makeNetworkDir
	n.mustRun("DEL", conf4("ours", data, "10.53.0.2"))
	if ents, _ := os.ReadDir(data); len(ents) != 0 {
		t.Errorf("left in dataDir: %v", ents)
	}
	// Killed before it made the marker: the next ADD is not blocked, and
	// its DEL leaves nothing.
	if err := os.MkdirAll(filepath.Join(data, ".ours.new"), 0o700); err != nil {
		t.Fatal(err)
	}
	n.mustRun("ADD", conf4("ours", data, "10.53.0.2"))
	n.mustRun("DEL", conf4("ours", data, "10.53.0.2"))
	if ents, _ := os.ReadDir(data); len(ents) != 0 {
		t.Errorf("left in dataDir: %v", ents)
	}

	if err := os.MkdirAll(filepath.Join(data, "theirs"), 0o755); err != nil {
		t.Fatal(err)
	}
	n.mustRun("ADD", conf4("theirs", data, "10.53.0.3"))
	n.mustRun("DEL", conf4("theirs", data, "10.53.0.3"))
	if ents, err := os.ReadDir(filepath.Join(data, "theirs")); err != nil || len(ents) != 0 {
		t.Errorf("the directory the plugin did not make: %v, %v (want it kept, empty)", ents, err)
	}
}

// TestUnsafeDataDir: a dataDir the plugin could harm the machine in is
// refused with code 7 naming it, before anything is done; a DEL with one
// succeeds (its lenient decode uses the default).
func TestUnsafeDataDir(t *testing.T) {
	n := newNode(t)
	before := n.state()
	for _, d := range []string{"/", "/etc", "/run/", "//var", "/proc/x", "/sys/fs/x", "/dev/shm/x"} {
		for _, verb := range []string{"ADD", "GC"} {
			c := conf4("unsafe", d, "10.54.0.2")
			c["cniVersion"] = "1.1.0"
			out, code := n.run(verb, c)
			if code == 0 || !strings.Contains(out, `"code":7`) || !strings.Contains(out, "dataDir") {
				t.Errorf("dataDir %q: %s: %d %s", d, verb, code, out)
			}
		}
		if out, code := n.run("DEL", conf4("unsafe", d, "10.54.0.2")); code != 0 {
			t.Errorf("dataDir %q: DEL: %s", d, out)
		}
	}
	if after := n.state(); after != before {
		t.Errorf("left:\n%s", after)
	}
}

// TestDelKeepsSharedAddresses: two networks whose subnets overlap give one
// address to an attachment each. The iptables rules are per address
// (shared): the DEL of one attachment keeps them for the other (its CHECK
// passes), the DEL of the last removes them.
func TestDelKeepsSharedAddresses(t *testing.T) {
	n := newNode(t)
	before := n.state()
	data := filepath.Join(n.dir, "fw")
	one, two := conf4("one", data, "10.55.0.2"), conf4("two", data, "10.55.0.2")
	n.mustRun("ADD", one, attEnv("c1", "eth0")...)
	n.mustRun("ADD", two, attEnv("c2", "eth0")...)
	n.mustRun("DEL", one, attEnv("c1", "eth0")...)
	if out, code := n.run("CHECK", two, attEnv("c2", "eth0")...); code != 0 {
		t.Errorf("CHECK of the other network's attachment after the DEL: %s", out)
	}
	if !n.iptablesHas(false, "-A CNI-FORWARD -s 10.55.0.2/32 -j ACCEPT") {
		t.Errorf("the DEL removed a shared address's rule:\n%s", n.state())
	}
	// GC of the first network does not remove them either.
	gc := conf4("one", data, "")
	gc["cniVersion"] = "1.1.0"
	n.mustRun("GC", gc)
	if out, code := n.run("CHECK", two, attEnv("c2", "eth0")...); code != 0 {
		t.Errorf("CHECK after GC of the other network: %s", out)
	}
	n.mustRun("DEL", two, attEnv("c2", "eth0")...)
	if after := n.state(); after != before {
		t.Fatalf("left:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	if recs, _ := filepath.Glob(filepath.Join(data, "*", "*")); len(slices.DeleteFunc(recs, func(p string) bool { return filepath.Base(p) == marker })) != 0 {
		t.Errorf("records left: %v", recs)
	}
}
