package tuning

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/patchbay-cni/patchbay/internal/atomicfile"
	"github.com/patchbay-cni/patchbay/spec"
)

// Values the kernel takes in a narrower type are refused, not truncated
// (txQLen 4294967301 used to set 5); text values with control characters
// are refused; interface MACs the kernel refuses are config errors naming
// the key. Nothing is applied and no message repeats the plugin's name.
func TestValuesOutOfKernelRange(t *testing.T) {
	f := newFixture(t)
	prev := f.prevResult("1.1.0")
	before := f.link(t, "eth0")
	for _, c := range []struct {
		keys     string
		code     uint
		mentions []string
	}{
		{`"txQLen":4294967301`, 7, []string{"txQLen", "4294967301", "out of range"}},
		{`"mtu":4294968796`, 7, []string{"mtu", "4294968796", "out of range"}},
		{`"args":{"cni":{"txQLen":4294967296}}`, 7, []string{"args.cni.txQLen", "4294967296"}},
		{`"args":{"cni":{"mtu":-1}}`, 7, []string{"args.cni.mtu", "-1"}},
		{`"sysctl":{"net.core.somaxconn":"100\n200"}`, 7, []string{"net.core.somaxconn", "newline"}},
		{`"sysctl":{"net.core.somaxconn":"100\u0007"}`, 7, []string{"net.core.somaxconn", "control character"}},
		{`"sysctl":{"net.core.somaxconn":""}`, 7, []string{"net.core.somaxconn", "empty value"}},
		{`"sysctl":{"net.core.somaxconn":"` + strings.Repeat("1", 5000) + `"}`, 7, []string{"net.core.somaxconn", "4096 bytes"}},
		{`"sysctl":{"net.core.soma xconn":"1"}`, 7, []string{"soma xconn", "space"}},
		{`"mac":"ff:ff:ff:ff:ff:ff"`, 7, []string{`mac "ff:ff:ff:ff:ff:ff"`, "broadcast"}},
		{`"mac":"01:00:5e:00:00:01"`, 7, []string{`mac "01:00:5e:00:00:01"`, "multicast"}},
		{`"mac":"00:00:00:00:00:00"`, 7, []string{`mac "00:00:00:00:00:00"`, "all-zero"}},
		{`"runtimeConfig":{"mac":"33:33:00:00:00:01"}`, 7, []string{"runtimeConfig.mac", "multicast"}},
		{`"args":{"cni":{"mac":"ff:ff:ff:ff:ff:ff"}}`, 7, []string{"args.cni.mac", "broadcast"}},
		{`"dataDir":"/tmp/x\u0000y"`, 7, []string{"dataDir", "NUL"}},
	} {
		conf := f.conf("1.1.0", c.keys, prev)
		out, rc := f.run(t, "ADD", conf)
		e, ok := spec.ParseError([]byte(out))
		if rc == 0 || !ok {
			t.Errorf("%s: ADD succeeded or gave no error: %s", c.keys, out)
			continue
		}
		if e.Code != c.code {
			t.Errorf("%s: code %d, want %d: %s", c.keys, e.Code, c.code, e.Msg)
		}
		for _, m := range c.mentions {
			if !strings.Contains(e.Msg, m) {
				t.Errorf("%s: message %q does not mention %q", c.keys, e.Msg, m)
			}
		}
		if strings.HasPrefix(e.Msg, "tuning") {
			t.Errorf("%s: message repeats the plugin's name: %q", c.keys, e.Msg)
		}
		if l := f.link(t, "eth0"); l.TxQLen != before.TxQLen || l.MTU != before.MTU || l.Address != before.Address {
			t.Fatalf("%s: eth0 changed by a refused ADD: %+v", c.keys, l)
		}
		f.mustSucceed(t, "DEL", conf)
	}
	out, rc := f.run(t, "ADD", f.conf("1.1.0", "", prev), "CNI_ARGS=MAC=ff:ff:ff:ff:ff:ff")
	if e, ok := spec.ParseError([]byte(out)); rc == 0 || !ok || e.Code != 4 || !strings.Contains(e.Msg, "CNI_ARGS MAC") {
		t.Errorf("CNI_ARGS MAC broadcast: %s", out)
	}
	// The largest values the kernel holds are accepted.
	f.mustAdd(t, f.conf("1.1.0", `"txQLen":4294967295,"sysctl":{"net.ipv4.ip_local_port_range":"20000\t30000"}`, prev))
	if got := uint32(f.link(t, "eth0").TxQLen); got != 4294967295 { // ip -j prints it as a signed int
		t.Errorf("txQLen %d, want 4294967295", got)
	}
	f.mustSucceed(t, "DEL", f.conf("1.1.0", "", ""))
}

// A container ID too long for the reference's file name still gets its
// values saved and restored; a killed write's temporary goes with DEL.
func TestSavedStateForLongIDs(t *testing.T) {
	f := newFixture(t)
	before := f.link(t, "eth0")
	id := "c" + strings.Repeat("0", 299)
	conf := f.conf("1.1.0", `"mtu":1300`, f.prevResult("1.1.0"))
	f.mustAdd(t, conf, "CNI_CONTAINERID="+id)
	ents, _ := os.ReadDir(f.dataDir)
	if len(ents) != 1 || len(ents[0].Name()) > atomicfile.NameMax {
		t.Fatalf("saved files %v", ents)
	}
	f.mustSucceed(t, "DEL", conf, "CNI_CONTAINERID="+id)
	if got := f.link(t, "eth0").MTU; got != before.MTU {
		t.Errorf("mtu %d after DEL, want %d", got, before.MTU)
	}
	// A writeSaved killed between link and rename left only its temporary.
	os.WriteFile(atomicfile.TempPath(filepath.Join(f.dataDir, "ctr1_eth0.json")), []byte(`{"mtu":`), 0o600)
	f.mustSucceed(t, "DEL", conf)
	if ents, _ := os.ReadDir(f.dataDir); len(ents) != 0 {
		t.Errorf("left in dataDir after DEL: %v", ents)
	}
}
