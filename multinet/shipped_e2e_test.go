package multinet

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/patchbay-cni/patchbay/internal/testutil"
	"github.com/patchbay-cni/patchbay/multinet/api"
)

// shippedConflist is the file users install, read where it is in the repo.
const shippedConflist = "../deploy/multinet/00-multinet.conflist"

// runtimeLibcni are the libcni versions the container runtimes people run
// vendor (their go.mod at each release), as cnitool of that version built
// by scripts/test-deps.sh into <cache>/cnitool-<version>; wantVersion is
// the cniVersion each must pick from the shipped file. cnitool v1.3.1
// (the reference peer, newest) is checked too.
var runtimeLibcni = []struct {
	version, runtimes, wantVersion string
}{
	{"v1.1.2", "containerd 1.6 (v1.0.1-v1.1.1 upstream, v1.1.2 in Debian's 1.6.20), containerd 1.7, CRI-O 1.25-1.30", "1.0.0"},
	{"v1.2.3", "containerd 2.0, CRI-O 1.31-1.32", "1.1.0"},
	{"v1.3.0", "containerd 2.1-2.3, CRI-O 1.33 and later", "1.1.0"},
	{"v1.3.1", "the newest libcni (reference cnitool)", "1.1.0"},
}

func cnitoolAt(t *testing.T, version string) string {
	t.Helper()
	p := filepath.Join(testutil.RefBin(t), "cnitool")
	if version != "v1.3.1" {
		p = filepath.Join(filepath.Dir(testutil.RefBin(t)), "cnitool-"+version, "cnitool")
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("cnitool %s: %v (installed by scripts/test-deps.sh: make test-deps)", version, err)
	}
	return p
}

// shippedNode runs cnitool the way a runtime runs the shipped conflist
// on a node: NETCONFPATH is the repo's deploy/multinet (the file itself,
// not a copy), and every absolute path the file names exists: in a private
// mount namespace, /etc, /opt and /var are overlays on a tmpfs (nothing
// reaches the machine's own), with /etc/cni (kubeconfig, cluster network,
// confDir), /opt/cni/bin (multinet and our plugins), /var/lib/cni (libcni's
// and multinet's caches) and /var/log (multinet.log) bound to the test's
// directories so the test reads what was written.
type shippedNode struct {
	e              *env
	root           string // the test's directories
	etcCNI, varLib string
	varLog         string
}

func newShippedNode(e *env) *shippedNode {
	t := e.t
	root := t.TempDir()
	for _, sys := range []string{"/etc", "/opt", "/var"} {
		if root == sys || strings.HasPrefix(root, sys+"/") {
			t.Fatalf("the temp dir %s is under %s, which the test overlays; set TMPDIR elsewhere", root, sys)
		}
	}
	n := &shippedNode{e: e, root: root, etcCNI: filepath.Join(root, "etc-cni"),
		varLib: filepath.Join(root, "var-lib-cni"), varLog: filepath.Join(root, "var-log")}
	for _, d := range []string{filepath.Join(n.etcCNI, "net.d", "multinet.d"), filepath.Join(n.etcCNI, "multus", "net.d"),
		n.varLib, n.varLog, filepath.Join(root, "ovl")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	copyFile := func(src, dst string) {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// The cluster network and a kubeconfig (TLS, as on a node) where the
	// shipped file expects them.
	copyFile(e.clusterConf, filepath.Join(n.etcCNI, "net.d", "10-cluster.conflist"))
	copyFile(e.tlsKube, filepath.Join(n.etcCNI, "net.d", "multinet.d", "multinet.kubeconfig"))
	return n
}

const nodeMounts = `set -e
s="$1"; bin="$2"; shift 2
mount -t tmpfs tmpfs "$s/ovl"
for d in etc opt var; do
	mkdir "$s/ovl/$d" "$s/ovl/$d.work"
	mount -t overlay overlay -o "lowerdir=/$d,upperdir=$s/ovl/$d,workdir=$s/ovl/$d.work" "/$d"
done
mkdir -p /etc/cni /opt/cni/bin /var/lib/cni /var/log
mount --bind "$s/etc-cni" /etc/cni
mount --bind "$bin" /opt/cni/bin
mount --bind "$s/var-lib-cni" /var/lib/cni
mount --bind "$s/var-log" /var/log
exec ip netns exec "$@"
`

// cnitool runs cnitool (path) with verb on the shipped "multinet" network
// for pod p, as the kubelet's runtime would (CNI_ARGS with the pod's keys).
func (n *shippedNode) cnitool(tool, verb string, p *pod, env ...string) (string, error) {
	n.e.t.Helper()
	conf, err := filepath.Abs(filepath.Dir(shippedConflist))
	if err != nil {
		n.e.t.Fatal(err)
	}
	cmd := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c", nodeMounts, "sh",
		n.root, n.e.binDir, n.e.hostNS, tool, verb, "multinet", p.path)
	cmd.Env = append(os.Environ(), "NETCONFPATH="+conf, "CNI_PATH=/opt/cni/bin",
		fmt.Sprintf("CNI_ARGS=IgnoreUnknown=1;K8S_POD_NAMESPACE=%s;K8S_POD_NAME=%s;K8S_POD_INFRA_CONTAINER_ID=%s;K8S_POD_UID=%s", p.ns, p.name, p.cid, p.uid))
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func (n *shippedNode) log() string {
	b, _ := os.ReadFile(filepath.Join(n.varLog, "multinet.log"))
	return string(b)
}

// The shipped deploy/multinet/00-multinet.conflist, unchanged, works with
// the libcni of every runtime version people run: ADD (the result in the
// version that runtime picks), the pod's interfaces and network status,
// CHECK, STATUS and GC where that libcni has them, DEL leaving nothing; a
// DEL with an interface name ADD would refuse succeeds. multinet logs one
// line per verb at the file's "verbose" level. This is the check to run on
// the file whenever it changes (and for a new runtime version: add its
// libcni above and to scripts/test-deps.sh).
func TestShippedConflistOnRuntimeLibcni(t *testing.T) {
	e := newEnv(t)
	n := newShippedNode(e)
	// The shipped file has no nadPolicy: the built-in policy applies, so
	// the NAD keeps host-local's state in the default /var/lib/cni/networks,
	// which is n.varLib/networks in the node's mount namespace.
	e.ipamDir = filepath.Join(n.varLib, "networks")
	e.nad("", "blue", e.bridgeNAD("", 1, map[string]any{"ipam": map[string]any{"type": "host-local", "subnet": "10.78.1.0/24"}}))
	for i, rt := range runtimeLibcni {
		t.Run("libcni-"+rt.version, func(t *testing.T) {
			tool := cnitoolAt(t, rt.version)
			p := e.pod(fmt.Sprintf("p%d", i), map[string]string{api.NetworksAnnotation: "blue"})
			ref := p.ns + "/" + p.name
			t.Logf("libcni %s: %s", rt.version, rt.runtimes)
			out, err := n.cnitool(tool, "add", p)
			if err != nil {
				t.Fatalf("cnitool %s add: %v\n%s\n%s", rt.version, err, out, n.log())
			}
			var res struct {
				CNIVersion string `json:"cniVersion"`
				Interfaces []struct{ Name, Sandbox string }
				IPs        []struct{ Address string }
			}
			if err := json.Unmarshal([]byte(out), &res); err != nil {
				t.Fatalf("cnitool add printed no result: %v\n%s", err, out)
			}
			if res.CNIVersion != rt.wantVersion {
				t.Errorf("result cniVersion %q, want %q (what libcni %s picks from the file)", res.CNIVersion, rt.wantVersion, rt.version)
			}
			if len(res.IPs) != 1 || !strings.HasPrefix(res.IPs[0].Address, "10.77.0.") {
				t.Errorf("the result is not the cluster network's: %s", out)
			}
			if l := sortedLinks(e, p); !slices.Equal(l, []string{"eth0", "net1"}) {
				t.Errorf("pod interfaces %v, want eth0 and net1", l)
			}
			if st := statusOf(t, e, p); len(st) != 2 || st[1].Name != e.ns+"/blue" || st[1].Interface != "net1" {
				t.Errorf("network status %+v", st)
			}
			if out, err := n.cnitool(tool, "check", p); err != nil {
				t.Errorf("cnitool check: %v\n%s", err, out)
			}
			verbs := []string{"ADD", "CHECK", "DEL"}
			if rt.wantVersion == "1.1.0" {
				if out, err := n.cnitool(tool, "status", p); err != nil {
					t.Errorf("cnitool status: %v\n%s", err, out)
				}
				verbs = append(verbs, "STATUS")
			}
			// A runtime (or a delegating plugin) that sends an interface
			// name ADD refuses gets a successful DEL.
			if out, err := n.cnitool(tool, "del", p, "CNI_IFNAME=a-very-long-interface-name"); err != nil {
				t.Errorf("cnitool del with an over-long CNI_IFNAME: %v\n%s", err, out)
			}
			if out, err := n.cnitool(tool, "del", p); err != nil {
				t.Errorf("cnitool del: %v\n%s", err, out)
			}
			e.nothingLeft(p, "after cnitool del")
			e.noStatus(p)
			if rt.wantVersion == "1.1.0" {
				// GC with no valid attachment: libcni DELs what it cached
				// and multinet's GC removes the rest.
				if out, err := n.cnitool(tool, "add", p); err != nil {
					t.Fatalf("cnitool add: %v\n%s", err, out)
				}
				if out, err := n.cnitool(tool, "gc", p); err != nil {
					t.Errorf("cnitool gc: %v\n%s", err, out)
				}
				e.nothingLeft(p, "after cnitool gc")
				verbs = append(verbs, "GC")
			}
			log := n.log()
			for _, verb := range verbs {
				re := regexp.MustCompile(`level=INFO msg=` + verb + ` .*took=`)
				if verb != "STATUS" && verb != "GC" {
					re = regexp.MustCompile(`level=INFO msg=` + verb + ` .*pod=` + regexp.QuoteMeta(ref) + ` .*took=`)
				}
				if !re.MatchString(log) {
					t.Errorf("no verbose %s line for pod %s in /var/log/multinet.log:\n%s", verb, ref, log)
				}
			}
		})
	}
}
