package interop

import (
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/patchbay-cni/patchbay/internal/launch"
	"github.com/patchbay-cni/patchbay/internal/testutil"
)

// debianPodmanConflist is /etc/cni/net.d/87-podman-bridge.conflist as
// Debian's podman 4.3.1 package ships it, byte for byte: the network
// Podman uses when no network is named (default_network "podman").
const debianPodmanConflist = `{
  "cniVersion": "0.4.0",
  "name": "podman",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "cni-podman0",
      "isGateway": true,
      "ipMasq": true,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "routes": [{ "dst": "0.0.0.0/0" }],
        "ranges": [
          [
            {
              "subnet": "10.88.0.0/16",
              "gateway": "10.88.0.1"
            }
          ]
        ]
      }
    },
    {
      "type": "portmap",
      "capabilities": {
        "portMappings": true
      }
    },
    {
      "type": "firewall"
    },
    {
      "type": "tuning"
    }
  ]
}
`

// podmanMounts is a private mount namespace, held by a process of ours,
// in which podman runs: temp dirs appear there as /var/lib/cni and
// /run/cni, so that the default conflist runs unchanged (host-local's
// default dataDir, tuning's and libcni's result cache land in the test's
// dirs, not the machine's, and so do our plugins' locks and the firewall
// plugin's records, under /run/cni/patchbay: podman runs without
// PATCHBAY_RUN_DIR, see podman), and the network namespaces
// podman mounts under /run/netns live and die with it. Nothing is created
// on the machine for it: /var/lib and /run are shadowed in that namespace
// (shadowScript), and what podman creates at their top goes to a tmpfs.
type podmanMounts struct {
	holder *launch.Process
	ns     string // /proc/PID/ns/mnt
	varLib string // what podman sees as /var/lib/cni
	run    string // what it sees as /run/cni
}

// shadowScript makes $PARENT/$NAME show $SRC in the current (private)
// mount namespace without creating anything in $PARENT on the machine: a
// tmpfs at $STAGE gets a bind mount of each entry of $PARENT (symlinks are
// copied), plus $NAME bound to $SRC, and is then moved over $PARENT. An
// entry that vanishes meanwhile (another process's lock file) is skipped.
const shadowScript = `set -eu
parent=$1 name=$2 src=$3 stage=$4
mount -t tmpfs -o mode=0755 pbshadow "$stage"
ls -A "$parent" | while IFS= read -r e; do
	p="$parent/$e" s="$stage/$e"
	if [ -L "$p" ]; then
		cp -P "$p" "$s"
	elif [ -d "$p" ]; then
		mkdir "$s"
		mount --rbind "$p" "$s" || [ ! -e "$p" ]
	else
		touch "$s"
		mount --bind "$p" "$s" || [ ! -e "$p" ]
	fi
done
[ -d "$stage/$name" ] || mkdir "$stage/$name"
mount --bind "$src" "$stage/$name"
mount --move "$stage" "$parent"
`

func newPodmanMounts(t *testing.T) *podmanMounts {
	t.Helper()
	m := &podmanMounts{varLib: t.TempDir(), run: t.TempDir()}
	holder, err := launch.Start(exec.Command("unshare", "--mount", "--propagation", "private", "sleep", "infinity"))
	if err != nil {
		t.Fatalf("unshare: %v", err)
	}
	m.holder = holder
	t.Cleanup(func() {
		if err := holder.Stop("mount namespace holder", 0, func() error { return holder.Cmd.Process.Kill() }); err != nil {
			t.Error(err)
		}
	})
	m.ns = fmt.Sprintf("/proc/%d/ns/mnt", holder.Pid())
	self, _ := os.Readlink("/proc/self/ns/mnt")
	if !waitFor(5*time.Second, func() bool { l, err := os.Readlink(m.ns); return err == nil && l != self }) {
		t.Fatal("the mount namespace holder did not unshare in 5s")
	}
	for _, sh := range []struct{ parent, name, src string }{{"/var/lib", "cni", m.varLib}, {"/run", "cni", m.run}} {
		stage := t.TempDir()
		if out, err := exec.Command("nsenter", "--mount="+m.ns, "sh", "-c", shadowScript, "sh", sh.parent, sh.name, sh.src, stage).CombinedOutput(); err != nil {
			t.Fatalf("shadow %s/%s with %s: %v: %s", sh.parent, sh.name, sh.src, err, out)
		}
	}
	return m
}

// TestPodmanDefaultNetworkOnOurPlugins: Podman 4.3 (CNI backend) on its
// own default network, as Debian ships it (bridge + portmap + firewall +
// tuning, no key changed) and as Podman generates it when no conflist
// names it, running only our plugins: `podman run -p` without --network
// gives the container an address in 10.88.0.0/16, it reaches its gateway,
// the published port answers from the host and from a peer on the uplink,
// our firewall plugin put the reference's iptables rules in place; after
// `podman rm -f` no veth, rule naming the container, firewall record,
// address allocation or cache entry is left.
func TestPodmanDefaultNetworkOnOurPlugins(t *testing.T) {
	requirePodman(t)
	pluginDir := testutil.OurBin(t)
	for _, typ := range []string{"bridge", "host-local", "portmap", "firewall", "tuning"} {
		if _, err := os.Stat(filepath.Join(pluginDir, typ)); err != nil {
			t.Fatalf("our plugin %s is missing from %s (%v): run `make build`", typ, pluginDir, err)
		}
	}
	for _, shape := range []struct{ name, conflist string }{
		{"debian-shipped", debianPodmanConflist},
		{"podman-generated", ""},
	} {
		t.Run(shape.name, func(t *testing.T) { podmanDefaultNetwork(t, pluginDir, shape.conflist) })
	}
}

func podmanDefaultNetwork(t *testing.T, pluginDir, conflist string) {
	hostNS, hostPath := testutil.NewNS(t, "pdhost")
	clientNS, clientPath := testutil.NewNS(t, "pdcli")
	uplink(t, hostNS, clientNS)
	// iptables-nft makes built-in chains on first use and keeps them:
	// touched first, the comparison below sees rules only.
	for _, tool := range []string{"iptables", "ip6tables"} {
		testutil.InNS(t, hostNS, tool, "-A", "FORWARD", "-j", "RETURN")
		testutil.InNS(t, hostNS, tool, "-D", "FORWARD", "-j", "RETURN")
	}
	m := newPodmanMounts(t)
	e := newPodmanEnv(t, hostPath, pluginDir)
	e.mountNS, e.varLib = m.ns, m.varLib
	if conflist != "" {
		writeFile(t, filepath.Join(e.netDir, "87-podman-bridge.conflist"), conflist)
	}
	rootfs := busyboxRootfs(t, pmBody)
	if out := e.mustPodman(t, 20*time.Second, "network", "ls", "--format", "{{.Name}} {{.Driver}}"); !strings.Contains(out, "podman bridge") {
		t.Fatalf("podman does not list its default network:\n%s", out)
	}
	before := testutil.FirewallState(t, hostNS)

	const name = "pbpd-web"
	var ctr podmanInspect
	t.Cleanup(func() {
		if out, err := e.podman(60*time.Second, "rm", "-f", "--ignore", "-t", "0", name); err != nil {
			t.Errorf("cleanup: podman rm -f %s: %v\n%s", name, err, out)
		}
		for _, pid := range pidsMentioning(ctr.ID) {
			if ctr.ID != "" {
				t.Errorf("cleanup: killing pid %d naming container %.12s", pid, ctr.ID)
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	e.mustPodman(t, 60*time.Second, "run", "-d", "--name", name, "-p", pmHostPort+":80",
		"--rootfs", rootfs, "/bin/busybox", "httpd", "-f", "-p", "80", "-h", "/www")
	out := e.mustPodman(t, 20*time.Second, "inspect", name)
	var all []podmanInspect
	if err := json.Unmarshal([]byte(out), &all); err != nil || len(all) != 1 {
		t.Fatalf("podman inspect: %v\n%s", err, out)
	}
	ctr = all[0]
	nw, ok := ctr.NetworkSettings.Networks["podman"]
	if !ok || !ctr.State.Running {
		t.Fatalf("container not running on the default network podman: %+v", ctr)
	}
	ip, err := netip.ParseAddr(nw.IPAddress)
	if err != nil || !netip.MustParsePrefix("10.88.0.0/16").Contains(ip) || nw.Gateway != "10.88.0.1" {
		t.Fatalf("podman reports %q gateway %q, want an address in 10.88.0.0/16 via 10.88.0.1", nw.IPAddress, nw.Gateway)
	}
	t.Logf("container %.12s: %s/%d", ctr.ID, ip, nw.IPPrefixLen)
	if out, err := e.podman(20*time.Second, "exec", name, "/bin/ping", "-c1", "-W2", "10.88.0.1"); err != nil {
		t.Errorf("container cannot ping its gateway: %v\n%s", err, out)
	}
	hostURL := "http://" + net.JoinHostPort(pmHostAddr, pmHostPort) + "/"
	httpGetIn(t, hostPath, hostURL, "host netns")
	httpGetIn(t, clientPath, hostURL, "uplink peer netns")

	// The firewall plugin ran with its default backend (iptables).
	ipt, _ := testutil.InNS(t, hostNS, "iptables-save", "-t", "filter")
	for _, want := range []string{"-A CNI-FORWARD -s " + ip.String() + "/32 -j ACCEPT", `-A FORWARD -m comment --comment "CNI firewall plugin rules" -j CNI-FORWARD`} {
		if !strings.Contains(ipt, want) {
			t.Errorf("iptables lacks %q:\n%s", want, ipt)
		}
	}
	records := filepath.Join(m.run, "patchbay", "firewall", "podman")
	if recs, _ := filepath.Glob(filepath.Join(records, "*.json")); len(recs) != 1 {
		t.Errorf("firewall records in %s: %v", records, recs)
	}

	e.mustPodman(t, 60*time.Second, "rm", "-f", "-t", "0", name)
	after := testutil.FirewallState(t, hostNS)
	for _, gone := range []string{ip.String() + "/", ip.String() + " ", ":" + pmHostPort, "dport " + pmHostPort, "CNI-FORWARD", "CNI-ADMIN"} {
		if strings.Contains(after, gone) {
			t.Errorf("%q left in the rule set after podman rm:\n%s", gone, after)
		}
	}
	// What may remain is shared scaffolding of the bridge plugin's ipMasq
	// (the reference's layout keeps it) and of portmap.
	for _, l := range strings.Split(after, "\n") {
		if !strings.Contains(before, l) {
			t.Logf("kept after podman rm: %s", l)
		}
	}
	if vs, _ := testutil.InNS(t, hostNS, "ip", "-o", "link", "show", "type", "veth"); strings.Contains(vs, "veth") && !strings.Contains(vs, "up0@") {
		t.Errorf("veth left: %s", vs)
	}
	if recs, _ := filepath.Glob(filepath.Join(m.run, "patchbay", "firewall", "*", "*")); len(recs) != 0 {
		t.Errorf("firewall records left: %v", recs)
	}
	if _, err := os.Stat(filepath.Join(m.varLib, "networks", "podman", ip.String())); !os.IsNotExist(err) {
		t.Errorf("host-local did not release %s (stat: %v)", ip, err)
	}
	if _, err := os.Stat(filepath.Join(m.varLib, "results", "podman-"+ctr.ID+"-eth0")); !os.IsNotExist(err) {
		t.Errorf("libcni cache entry left (stat: %v)", err)
	}
	if !waitFor(5*time.Second, func() bool { return len(pidsMentioning(ctr.ID)) == 0 }) {
		t.Errorf("processes naming container %.12s still running after podman rm -f: %v", ctr.ID, pidsMentioning(ctr.ID))
	}
}
