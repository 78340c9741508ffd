package multinet

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/patchbay-cni/patchbay/internal/testutil"
	"github.com/patchbay-cni/patchbay/multinet/api"
	"github.com/patchbay-cni/patchbay/spec"
)

// A pod whose ADD will fail because of its annotation or its NADs fails
// with nothing attached, on the first ADD and on every retry: the cluster
// network's bridge is never created, its IPAM never hands out (and takes
// back) an address, no plan or result is cached. A valid pod afterwards
// gets the cluster network's first address: none was skipped. Each error
// says "multinet: pod <ns>/<name>: ADD failed:" once.
func TestFailingPodAttachesNothing(t *testing.T) {
	t.Run("thin", func(t *testing.T) { testFailingPodAttachesNothing(t, false) })
	t.Run("thick", func(t *testing.T) { testFailingPodAttachesNothing(t, true) })
}

func testFailingPodAttachesNothing(t *testing.T, thick bool) {
	e := newEnv(t)
	e.opts["namespaceIsolation"] = true
	if thick {
		e.startDaemon(nil)
	}
	other := e.c.UniqueNamespace(t, "mno")
	e.nad(other, "elsewhere", e.bridgeNAD("", 2, nil))
	e.nad("", "blue", e.bridgeNAD("", 1, nil))
	e.nad("", "nested", map[string]any{"cniVersion": "1.0.0", "plugins": []any{map[string]any{"type": "multinet", "clusterNetwork": e.clusterConf}}})
	e.nad("", "broken", `{"cniVersion":"1.0.0","plugins":[{"type":`)
	cases := []struct {
		name, key, value, want string
		code                   uint
	}{
		{"malformed JSON", api.NetworksAnnotation, `[{"name":`, "invalid " + api.NetworksAnnotation + " annotation", spec.ErrInvalidNetworkConfig},
		{"missing NAD", api.NetworksAnnotation, "blue,nosuch", "nosuch", spec.ErrInvalidNetworkConfig},
		{"namespace isolation", api.NetworksAnnotation, other + "/elsewhere", "namespace isolation", spec.ErrInvalidNetworkConfig},
		{"undeclared capability", api.NetworksAnnotation, `[{"name":"blue","mac":"0a:58:0a:4e:01:09"}]`, `"mac"`, spec.ErrUnsupportedField},
		{"self-delegation", api.NetworksAnnotation, "nested", "cannot be its own delegate", spec.ErrInvalidNetworkConfig},
		{"NAD config not JSON", api.NetworksAnnotation, "broken", "broken", spec.ErrDecodingFailure},
		{"missing default-network NAD", api.DefaultNetworkAnnotation, "nosuch", "nosuch", spec.ErrInvalidNetworkConfig},
	}
	for i, c := range cases {
		p := e.pod("p"+string(rune('a'+i)), map[string]string{c.key: c.value})
		ref := p.ns + "/" + p.name
		for try := 1; try <= 2; try++ { // the kubelet retries
			_, err := e.add(p)
			var ce *spec.Error // multinet's own error, inside the runtime's
			if !errors.As(err, &ce) {
				t.Fatalf("%s: ADD %d = %v, want a plugin error", c.name, try, err)
			}
			if try == 1 {
				t.Logf("%s: %s", c.name, ce.Msg)
			}
			if !strings.Contains(ce.Msg, c.want) {
				t.Errorf("%s: error %q does not name %q", c.name, ce.Msg, c.want)
			}
			if c.code != 0 && ce.Code != c.code && !(c.name == "NAD config not JSON" && ce.Code == spec.ErrInvalidNetworkConfig) {
				t.Errorf("%s: code %d, want %d", c.name, ce.Code, c.code)
			}
			if n := strings.Count(ce.Msg, "multinet: "); n != 1 {
				t.Errorf("%s: %q says \"multinet: \" %d times, want once", c.name, ce.Msg, n)
			}
			if n := strings.Count(ce.Msg, "pod "+ref); n != 1 {
				t.Errorf("%s: %q names pod %s %d times, want once", c.name, ce.Msg, ref, n)
			}
			if !strings.HasPrefix(ce.Msg, "multinet: pod "+ref+": ADD failed: ") {
				t.Errorf("%s: %q does not start with the one prefix", c.name, ce.Msg)
			}
			if strings.Contains(ce.Msg, "attempted attachment") {
				t.Errorf("%s: %q: something was attached before the failure was known", c.name, ce.Msg)
			}
		}
		e.mustDel(p)
	}
	// Nothing was ever attached: the cluster network's bridge does not
	// exist, host-local never reserved an address, nothing is cached.
	if out, err := testutil.InNS(t, e.hostNS, "ip", "-o", "link", "show", "mnbr0"); err == nil {
		t.Errorf("the cluster network's bridge was created by failing ADDs: %s", out)
	}
	if ents, _ := os.ReadDir(filepath.Join(e.ipamDir, "cluster")); len(ents) != 0 {
		t.Errorf("host-local state of the cluster network after failing ADDs: %v", ents)
	}
	if ents, _ := os.ReadDir(filepath.Join(e.cniDir, "results")); len(ents) != 0 {
		t.Errorf("delegate results cached by failing ADDs: %v", ents)
	}
	plans, _ := filepath.Glob(filepath.Join(e.cniDir, "*.json"))
	if len(plans) != 0 {
		t.Errorf("plans left by failing ADDs: %v", plans)
	}
	ok := e.pod("ok", map[string]string{api.NetworksAnnotation: "blue"})
	res := e.mustAdd(ok)
	var got []string
	for _, ip := range res.IPs {
		got = append(got, ip.Address.String())
	}
	if len(got) != 1 || got[0] != "10.77.0.2/24" {
		t.Errorf("the first valid pod got %v, want 10.77.0.2/24 (no address taken by the failed ADDs)", got)
	}
	e.mustDel(ok)
}

// logLines are the lines of the log at level whose msg is msg.
func logLines(log, level, msg string) []string {
	var out []string
	re := regexp.MustCompile(`level=` + level + ` msg=` + regexp.QuoteMeta(msg) + `( |$)`)
	for _, l := range strings.Split(log, "\n") {
		if re.MatchString(l) {
			out = append(out, l)
		}
	}
	return out
}

// logLevel "verbose": one line per verb (ADD, CHECK, DEL, GC, STATUS) with
// the pod, every attachment as network@interface=addresses, and the time
// taken; a failed verb one error line whose error has no repeated prefix.
// Nothing at debug level.
func TestVerboseLogging(t *testing.T) {
	e := newEnv(t)
	e.opts["logLevel"] = "verbose"
	e.nad("", "blue", e.bridgeNAD("", 1, nil))
	p := e.pod("p1", map[string]string{api.NetworksAnnotation: "blue"})
	e.mustAdd(p)
	if err := e.check(p); err != nil {
		t.Fatalf("CHECK: %v", err)
	}
	if err := e.inHost(func() error { return e.cni.StatusNetworkList(t.Context(), e.conf()) }); err != nil {
		t.Fatalf("STATUS: %v", err)
	}
	e.mustDel(p)
	gc := *e.cni
	gc.CacheDir = t.TempDir()
	if err := e.inHost(func() error { return gc.GCNetworkList(t.Context(), e.conf(), []spec.Attachment{}) }); err != nil {
		t.Fatalf("GC: %v", err)
	}
	bad := e.pod("bad", map[string]string{api.NetworksAnnotation: "nosuch"})
	if _, err := e.add(bad); err == nil {
		t.Fatal("ADD of a pod selecting a missing NAD succeeded")
	}
	log := e.log()
	t.Logf("\n%s", log)

	ref := p.ns + "/p1"
	attRE := `attachments="kube-system/cluster@eth0=10\.77\.0\.\d+/24 ` + regexp.QuoteMeta(e.ns) + `/blue@net1=10\.78\.1\.\d+/24"`
	for _, verb := range []string{"ADD", "CHECK", "DEL"} {
		lines := logLines(log, "INFO", verb)
		if len(lines) != 1 {
			t.Errorf("%d %s lines at verbose, want 1: %q", len(lines), verb, lines)
			continue
		}
		for _, want := range []string{"pod=" + ref, "container=" + p.cid, attRE, `took=\d`} {
			if !regexp.MustCompile(want).MatchString(lines[0]) {
				t.Errorf("%s line %q lacks %s", verb, lines[0], want)
			}
		}
	}
	if lines := logLines(log, "INFO", "STATUS"); len(lines) != 1 || !strings.Contains(lines[0], `networks=cluster`) || !strings.Contains(lines[0], "took=") {
		t.Errorf("STATUS lines: %q", lines)
	}
	if lines := logLines(log, "INFO", "GC"); len(lines) != 1 || !strings.Contains(lines[0], "networks=") || !strings.Contains(lines[0], "took=") {
		t.Errorf("GC lines: %q", lines)
	}
	lines := logLines(log, "ERROR", `"ADD failed"`)
	if len(lines) != 1 || !strings.Contains(lines[0], "pod="+bad.ns+"/bad") || !strings.Contains(lines[0], "nosuch") ||
		strings.Contains(lines[0], "multinet: ") || !strings.Contains(lines[0], `attachments=""`) {
		t.Errorf("failed ADD lines: %q; want one naming the pod and the NAD, no prefix in the error, nothing attached", lines)
	}
	if strings.Contains(log, "level=DEBUG") {
		t.Error("debug lines at logLevel verbose")
	}
}
