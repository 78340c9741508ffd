package hostdevice

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/patchbay-cni/patchbay/internal/atomicfile"
	"github.com/patchbay-cni/patchbay/internal/testutil"
	"github.com/patchbay-cni/patchbay/spec"
)

// ADD moves dev0 into the container as eth0 with host-local's addresses
// (dual-stack): traffic reaches peer0, still in the host, over it. CHECK
// passes, and fails once something ADD made is gone. DEL puts dev0 back
// under its name with its MAC, MTU, alias and up state; a second DEL is a
// no-op.
func TestAddCheckDel(t *testing.T) {
	l := newLab(t)
	cont, contPath := testutil.NewNS(t, "hdc")
	conf := l.conf("1.1.0", nil, "10.60.0.0/24", "fd00:60::/64")
	r, out := l.mustAdd(conf, "c1", contPath, "eth0")
	if len(r.Interfaces) != 1 || r.Interfaces[0].Name != "eth0" || r.Interfaces[0].Sandbox != contPath ||
		r.Interfaces[0].Mac != l.origMAC {
		t.Fatalf("interfaces: %s", out)
	}
	if len(r.IPs) != 2 || len(r.Routes) != 1 {
		t.Fatalf("ips/routes: %s", out)
	}
	for _, ipc := range r.IPs {
		if ipc.Interface == nil || *ipc.Interface != 0 {
			t.Errorf("ip %s not on interface 0", ipc.Address)
		}
	}
	if d := l.link(l.host, "dev0"); d.Name != "" {
		t.Fatalf("dev0 still in the host: %+v", d)
	}
	e := l.link(cont, "eth0")
	if !e.up() || e.Alias != "dev0" || e.MTU != 1400 {
		t.Errorf("eth0 in the container: %+v (want up, alias dev0)", e)
	}
	for _, dst := range []string{"10.60.0.1", "fd00:60::1"} {
		if o, err := testutil.InNS(t, cont, "ping", "-c", "1", "-W", "3", dst); err != nil {
			t.Errorf("ping %s over the moved device: %v: %s", dst, err, o)
		}
	}
	if got := in(t, cont, "ip", "route", "show", "192.168.0.0/16"); !strings.Contains(got, "via 10.60.0.1 dev eth0") {
		t.Errorf("IPAM route: %q", got)
	}
	check := withPrev(t, conf, out)
	l.mustRun("CHECK", check, "c1", contPath, "eth0")

	// CHECK sees what changed.
	ipIn(t, cont, "addr", "del", r.IPs[0].Address.String(), "dev", "eth0")
	if o, code := l.run("CHECK", check, "c1", contPath, "eth0"); code == 0 || !strings.Contains(o, r.IPs[0].Address.Addr().String()) {
		t.Errorf("CHECK with an address gone: %d %s", code, o)
	}
	if o, code := l.run("CHECK", withPrev(t, l.conf("1.1.0", map[string]any{"device": "other0"}, "10.60.0.0/24", "fd00:60::/64"), out), "c1", contPath, "eth0"); code == 0 || !strings.Contains(o, "other0") {
		t.Errorf("CHECK of another device: %d %s", code, o)
	}
	ipIn(t, cont, "link", "set", "eth0", "down")
	if o, code := l.run("CHECK", check, "c1", contPath, "eth0"); code == 0 || !strings.Contains(o, "down") {
		t.Errorf("CHECK with eth0 down: %d %s", code, o)
	}
	ipIn(t, cont, "link", "set", "eth0", "up")

	l.mustRun("DEL", conf, "c1", contPath, "eth0")
	l.restored(true)
	if e := l.link(cont, "eth0"); e.Name != "" {
		t.Errorf("eth0 left in the container: %+v", e)
	}
	if m, _ := filepath.Glob(filepath.Join(l.ipamDir, "hdnet", "10.*")); len(m) != 0 {
		t.Errorf("IPAM not released: %v", m)
	}
	l.mustRun("DEL", conf, "c1", contPath, "eth0")
	l.restored(true)
}

// A device that was a bridge port goes back into its bridge.
func TestDelRestoresMaster(t *testing.T) {
	l := newLab(t)
	l.ip("link", "add", "br0", "type", "bridge")
	l.ip("link", "set", "dev0", "master", "br0")
	_, contPath := testutil.NewNS(t, "hdc")
	conf := l.conf("1.1.0", nil)
	l.mustAdd(conf, "br1", contPath, "eth0")
	l.mustRun("DEL", conf, "br1", contPath, "eth0")
	l.restored(true)
	if got := in(t, l.host, "ip", "-o", "link", "show", "dev0"); !strings.Contains(got, "master br0") {
		t.Errorf("dev0 not back in br0: %s", got)
	}
}

// A device that was down, and MTU and MAC changed inside the container (as
// tuning would): DEL restores the host's values and leaves it down.
func TestDelRestoresState(t *testing.T) {
	l := newLab(t)
	l.ip("link", "set", "dev0", "down")
	cont, contPath := testutil.NewNS(t, "hdc")
	conf := l.conf("1.0.0", nil)
	r, _ := l.mustAdd(conf, "c1", contPath, "net1")
	if len(r.IPs) != 0 || len(r.Interfaces) != 1 || r.Interfaces[0].Name != "net1" {
		t.Fatalf("layer-2 result: %+v", r)
	}
	if !l.link(cont, "net1").up() {
		t.Errorf("net1 not up in the container")
	}
	ipIn(t, cont, "link", "set", "net1", "down")
	ipIn(t, cont, "link", "set", "net1", "mtu", "9000", "address", "02:00:00:00:00:99", "alias", "changed")
	// DEL finds it by name and our record (MAC and alias changed inside do
	// not matter).
	l.mustRun("DEL", conf, "c1", contPath, "net1")
	l.restored(false)
}

// Every spec version: ADD's result has the version's shape, DEL puts
// the device back.
func TestVersions(t *testing.T) {
	l := newLab(t)
	for _, v := range spec.AllVersions {
		t.Run(v, func(t *testing.T) {
			l.t = t
			_, contPath := testutil.NewNS(t, "hdc")
			conf := l.conf(v, nil, "10.60.0.0/24")
			_, out := l.mustAdd(conf, "v1", contPath, "eth0")
			if !strings.Contains(out, `"cniVersion": "`+v+`"`) && !strings.Contains(out, `"cniVersion":"`+v+`"`) {
				t.Errorf("result not in %s: %s", v, out)
			}
			if spec.Compare(v, spec.V030) < 0 {
				if !strings.Contains(out, `"ip4"`) {
					t.Errorf("%s result without ip4: %s", v, out)
				}
			} else if !strings.Contains(out, `"interfaces"`) {
				t.Errorf("%s result without interfaces: %s", v, out)
			}
			if spec.VerbSupported(v, spec.CmdCheck) {
				l.mustRun("CHECK", withPrev(t, conf, out), "v1", contPath, "eth0")
			}
			if spec.VerbSupported(v, spec.CmdStatus) {
				l.mustRun("STATUS", conf, "", "", "")
			}
			l.mustRun("DEL", conf, "v1", contPath, "eth0")
			l.restored(true)
		})
	}
}

// STATUS of a network whose device comes only from the deviceID
// capability (no device key; STATUS gets no runtimeConfig) succeeds;
// without the capability the config names no device (code 7).
func TestStatusDeviceIDCapability(t *testing.T) {
	l := newLab(t)
	l.mustRun("STATUS", l.conf("1.1.0", map[string]any{"device": nil, "capabilities": map[string]bool{"deviceID": true}}), "", "", "")
	out, code := l.run("STATUS", l.conf("1.1.0", map[string]any{"device": nil}), "", "", "")
	if e := cniError(t, out); code == 0 || e.Code != spec.ErrInvalidNetworkConfig {
		t.Errorf("STATUS naming no device: %d %s", code, out)
	}
}

// hwaddr picks the device by MAC.
func TestByHWAddr(t *testing.T) {
	l := newLab(t)
	cont, contPath := testutil.NewNS(t, "hdc")
	conf := l.conf("1.1.0", map[string]any{"device": nil, "hwaddr": strings.ToUpper(l.origMAC)})
	l.mustAdd(conf, "m1", contPath, "eth0")
	if e := l.link(cont, "eth0"); e.Alias != "dev0" {
		t.Fatalf("hwaddr moved %+v, want dev0", e)
	}
	l.mustRun("DEL", conf, "m1", contPath, "eth0")
	l.restored(true)
}

// Bad input is code 7 naming the key and value, before anything changes.
func TestBadInput(t *testing.T) {
	l := newLab(t)
	cont, contPath := testutil.NewNS(t, "hdc")
	for _, c := range []struct {
		extra map[string]any
		want  string
	}{
		{map[string]any{"device": nil}, "device"},
		{map[string]any{"device": "no/such"}, "no/such"},
		{map[string]any{"device": "averyveryverylongname"}, "averyveryverylongname"},
		{map[string]any{"device": "nosuch0"}, "nosuch0"},
		{map[string]any{"device": nil, "hwaddr": "zz:zz"}, "hwaddr"},
		{map[string]any{"device": nil, "hwaddr": "02:00:00:00:00:42"}, "02:00:00:00:00:42"},
		{map[string]any{"device": nil, "kernelpath": "/sys/devices/../../etc"}, "kernelpath"},
		{map[string]any{"device": nil, "kernelpath": "sys/devices/x"}, "kernelpath"},
		{map[string]any{"device": nil, "kernelpath": "/sys/devices/nosuch"}, "/sys/devices/nosuch"},
		{map[string]any{"device": nil, "pciBusID": "../../../etc"}, "pciBusID"},
		{map[string]any{"device": nil, "pciBusID": "0000:ff:1f.7"}, "0000:ff:1f.7"},
		{map[string]any{"device": nil, "runtimeConfig": map[string]any{"deviceID": "../x"}}, "deviceID"},
		{map[string]any{"device": nil, "runtimeConfig": map[string]any{"deviceID": "nosuch.aux.7"}}, "nosuch.aux.7"},
		{map[string]any{"dataDir": "relative/dir"}, "dataDir"},
	} {
		out, code := l.run("ADD", l.conf("1.1.0", c.extra, "10.60.0.0/24"), "bad", contPath, "eth0")
		e := cniError(t, out)
		if code == 0 || e.Code != spec.ErrInvalidNetworkConfig || !strings.Contains(e.Msg, c.want) {
			t.Errorf("%v: got code %d %q, want code 7 naming %q", c.extra, e.Code, e.Msg, c.want)
		}
	}
	// A taken CNI_IFNAME (spec: an error) leaves the device where it is.
	ipIn(t, cont, "link", "add", "eth0", "type", "veth", "peer", "name", "x0")
	if out, code := l.run("ADD", l.conf("1.1.0", nil, "10.60.0.0/24"), "bad", contPath, "eth0"); code == 0 || !strings.Contains(out, "eth0") {
		t.Errorf("ADD with eth0 taken: %d %s", code, out)
	}
	l.restored(true)
	if m, _ := filepath.Glob(filepath.Join(l.ipamDir, "hdnet", "10.*")); len(m) != 0 {
		t.Errorf("refused ADD allocated: %v", m)
	}
	// The runtime's DEL after the refused ADD leaves the container's own
	// eth0 alone.
	l.mustRun("DEL", l.conf("1.1.0", nil, "10.60.0.0/24"), "bad", contPath, "eth0")
	if e := l.link(cont, "eth0"); e.Name == "" {
		t.Errorf("DEL after the refused ADD removed the container's own eth0")
	}
}

// A failure after the move puts everything back: IPAM that cannot run,
// and a route IPAM gives that the kernel refuses (then the allocation is
// released too).
func TestRollback(t *testing.T) {
	l := newLab(t)
	cont, contPath := testutil.NewNS(t, "hdc")
	noIPAM := l.conf("1.1.0", map[string]any{"ipam": map[string]any{"type": "no-such-ipam"}})
	if out, code := l.run("ADD", noIPAM, "rb1", contPath, "eth0"); code == 0 {
		t.Fatalf("ADD with a missing IPAM plugin succeeded: %s", out)
	}
	l.restored(true)
	badRoute := l.conf("1.1.0", map[string]any{"ipam": map[string]any{"type": "host-local", "dataDir": l.ipamDir,
		"subnet": "10.60.0.0/24", "routes": []map[string]string{{"dst": "192.168.0.0/16", "gw": "10.99.0.1"}}}})
	if out, code := l.run("ADD", badRoute, "rb2", contPath, "eth0"); code == 0 || !strings.Contains(out, "192.168.0.0/16") {
		t.Fatalf("ADD with an unreachable gateway: %d %s", code, out)
	}
	l.restored(true)
	if m, _ := filepath.Glob(filepath.Join(l.ipamDir, "hdnet", "10.*")); len(m) != 0 {
		t.Errorf("failed ADD kept its allocation: %v", m)
	}
	if e := l.link(cont, "eth0"); e.Name != "" {
		t.Errorf("failed ADD left eth0 in the container")
	}
}

// DEL never fails for a device that is gone: unplugged in the container,
// or destroyed with the container's namespace (veths are); without a
// namespace at all; and when the record is gone but the device is back.
func TestDelToleratesGoneDevice(t *testing.T) {
	l := newLab(t)
	cont, contPath := testutil.NewNS(t, "hdc")
	conf := l.conf("1.1.0", nil, "10.60.0.0/24")
	l.mustAdd(conf, "g1", contPath, "eth0")
	ipIn(t, cont, "link", "del", "eth0") // hot-unplug
	l.mustRun("DEL", conf, "g1", contPath, "eth0")
	l.mustRun("DEL", conf, "g1", "", "eth0")
	if files, _ := listStates(l.dataDir, "hdnet"); len(files) != 0 {
		t.Errorf("record left after the device vanished: %v", files)
	}

	l.ip("link", "add", "dev0", "mtu", "1400", "type", "veth", "peer", "name", "peer1")
	l.ip("link", "set", "dev0", "alias", "uplink-a", "up")
	l.origMAC = l.link(l.host, "dev0").Address
	gone, gonePath := testutil.NewNS(t, "hdg")
	l.mustAdd(conf, "g2", gonePath, "eth0")
	if out, err := exec.Command("ip", "netns", "del", gone).CombinedOutput(); err != nil {
		t.Fatalf("delete the container namespace: %v: %s", err, out)
	}
	l.mustRun("DEL", conf, "g2", gonePath, "eth0")
	if files, _ := listStates(l.dataDir, "hdnet"); len(files) != 0 {
		t.Errorf("record left after the namespace went: %v", files)
	}
	if m, _ := filepath.Glob(filepath.Join(l.ipamDir, "hdnet", "10.*")); len(m) != 0 {
		t.Errorf("allocations left: %v", m)
	}
}

// A crash can stop ADD after the record is written and before the move,
// or after the move before IPAM: DEL finishes from either.
func TestDelAfterCrash(t *testing.T) {
	l := newLab(t)
	cont, contPath := testutil.NewNS(t, "hdc")
	conf := l.conf("1.1.0", nil, "10.60.0.0/24")
	// Stopped after the record and the alias: the device is still in the host.
	st := &saved{ContainerID: "k1", IfName: "eth0", Netns: contPath, Name: "dev0", Alias: "uplink-a",
		MAC: l.origMAC, MTU: 1400, Up: true}
	if err := writeState(statePath(l.dataDir, "hdnet", "k1", "eth0"), st); err != nil {
		t.Fatal(err)
	}
	l.ip("link", "set", "dev0", "alias", "dev0")
	l.ip("link", "set", "dev0", "down")
	l.mustRun("DEL", conf, "k1", contPath, "eth0")
	l.restored(true)
	// Stopped after the move (an ADD without ipam leaves exactly that).
	l.mustAdd(l.conf("1.1.0", nil), "k2", contPath, "eth0")
	l.mustRun("DEL", conf, "k2", contPath, "eth0")
	l.restored(true)

	// Found by internal/crashtest (issue 7): stopped between the move and
	// the rename in the container, where the device kept the name it
	// travelled with: its own, or a temporary one when that was taken.
	for _, travel := range []string{"dev0", "pbtmp0a1b2c3d"} {
		st.ContainerID = "k3"
		path := statePath(l.dataDir, "hdnet", "k3", "eth0")
		if err := writeState(path, st); err != nil {
			t.Fatal(err)
		}
		l.ip("link", "set", "dev0", "alias", "dev0")
		l.ip("link", "set", "dev0", "down")
		l.ip("link", "set", "dev0", "netns", contPath)
		if travel != "dev0" {
			ipIn(t, cont, "link", "set", "dev0", "name", travel)
		}
		l.mustRun("DEL", conf, "k3", contPath, "eth0")
		l.restored(true)
	}

	// Killed before the rename of the record's write, before anything
	// else: DEL (and GC, for an attachment no DEL comes for) removes the
	// temporary.
	l.cniPath = testutil.OurBin(t) // the reference host-local has no GC
	for _, verb := range []string{"DEL", "GC"} {
		tmp := atomicfile.TempPath(statePath(l.dataDir, "hdnet", "k4", "eth0"))
		if err := os.WriteFile(tmp, []byte(`{"name":"dev0"}`), 0o600); err != nil {
			t.Fatal(err)
		}
		l.mustRun(verb, conf, "k4", contPath, "eth0")
		if _, err := os.Stat(tmp); err == nil {
			t.Errorf("%s left the record's temporary %s", verb, tmp)
		}
		l.restored(true)
	}
}

// GC puts back the devices of attachments not in the valid list and keeps
// the others.
func TestGC(t *testing.T) {
	l := newLab(t)
	l.cniPath = testutil.OurBin(t) // the reference host-local has no GC
	l.ip("link", "add", "dev1", "type", "veth", "peer", "name", "peer1")
	cont, contPath := testutil.NewNS(t, "hdc")
	l.mustAdd(l.conf("1.1.0", nil, "10.60.0.0/24"), "keep", contPath, "eth0")
	l.mustAdd(l.conf("1.1.0", map[string]any{"device": "dev1"}, "10.60.0.0/24"), "stale", contPath, "eth1")
	gcConf := l.conf("1.1.0", map[string]any{"cni.dev/valid-attachments": []map[string]string{{"containerID": "keep", "ifname": "eth0"}}}, "10.60.0.0/24")
	l.mustRun("GC", gcConf, "", "", "")
	if d := l.link(l.host, "dev1"); d.Name == "" {
		t.Errorf("GC did not put dev1 back")
	}
	if e := l.link(cont, "eth0"); e.Alias != "dev0" {
		t.Errorf("GC moved the valid attachment's device: %+v", e)
	}
	if m, _ := filepath.Glob(filepath.Join(l.ipamDir, "hdnet", "10.*")); len(m) != 1 {
		t.Errorf("allocations after GC: %v (want only keep's)", m)
	}
	if files, _ := listStates(l.dataDir, "hdnet"); len(files) != 1 {
		t.Errorf("records after GC: %v", files)
	}
	l.mustRun("DEL", l.conf("1.1.0", nil, "10.60.0.0/24"), "keep", contPath, "eth0")
	l.restored(true)
}

// Any container ID the spec allows works: the record of an ID too long for
// a file name gets a bounded name, and ADD, CHECK, GC and DEL (twice) work
// with it (issue 7: DEL failed with "file name too long" for ever).
func TestLongContainerID(t *testing.T) {
	l := newLab(t)
	l.cniPath = testutil.OurBin(t)
	_, contPath := testutil.NewNS(t, "hdc")
	conf := l.conf("1.1.0", nil, "10.60.0.0/24")
	for _, n := range []int{300, 5000} {
		id := "c" + strings.Repeat("x", n-1)
		_, out := l.mustAdd(conf, id, contPath, "eth0")
		l.mustRun("CHECK", withPrev(t, conf, out), id, contPath, "eth0")
		files, err := listStates(l.dataDir, "hdnet")
		if err != nil || len(files) != 1 || len(filepath.Base(files[0])) > 255 {
			t.Fatalf("ID of %d characters: records %v, %v (want one with a bounded name)", n, files, err)
		}
		gcConf := l.conf("1.1.0", map[string]any{"cni.dev/valid-attachments": []map[string]string{{"containerID": id, "ifname": "eth0"}}}, "10.60.0.0/24")
		l.mustRun("GC", gcConf, "", "", "")
		if files, _ := listStates(l.dataDir, "hdnet"); len(files) != 1 {
			t.Errorf("ID of %d characters: GC removed the live attachment's record", n)
		}
		l.mustRun("DEL", conf, id, contPath, "eth0")
		l.mustRun("DEL", conf, id, contPath, "eth0")
		l.restored(true)
		if files, _ := listStates(l.dataDir, "hdnet"); len(files) != 0 {
			t.Errorf("ID of %d characters: records left after DEL: %v", n, files)
		}
	}
}

// A device the reference's host-device moved (only its alias names it)
// comes back with our DEL, and one we moved comes back with the
// reference's DEL.
func TestReferenceInterop(t *testing.T) {
	l := newLab(t)
	_, contPath := testutil.NewNS(t, "hdc")
	conf := l.conf("1.0.0", nil)
	ref := filepath.Join(testutil.RefBin(t), "host-device")
	if out, err := l.runBin(ref, "ADD", conf, "r1", contPath, "eth0"); err != nil {
		t.Fatalf("reference ADD: %v: %s", err, out)
	}
	l.mustRun("DEL", conf, "r1", contPath, "eth0")
	if d := l.link(l.host, "dev0"); d.Name == "" || d.Alias != "" {
		t.Fatalf("our DEL of the reference's ADD: %+v (want dev0 back, its alias cleared as the reference's DEL does)", d)
	}
	l.ip("link", "set", "dev0", "alias", "uplink-a", "up")
	l.mustAdd(conf, "r2", contPath, "eth0")
	if out, err := l.runBin(ref, "DEL", conf, "r2", contPath, "eth0"); err != nil {
		t.Fatalf("reference DEL of our ADD: %v: %s", err, out)
	}
	if d := l.link(l.host, "dev0"); d.Name == "" {
		t.Fatalf("the reference's DEL did not bring dev0 back")
	}
}
