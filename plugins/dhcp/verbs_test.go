package dhcp

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/patchbay-cni/patchbay/internal/testutil"
	"github.com/patchbay-cni/patchbay/runtime"
	"github.com/patchbay-cni/patchbay/spec"
)

// TestEveryVersion: ADD answers in every spec version's format (0.1.0 and
// 0.2.0 with ip4, later ones with ips), and DEL releases.
func TestEveryVersion(t *testing.T) {
	t.Parallel()
	l := newLab(t, serverOpts{})
	l.startDaemon()
	for _, v := range spec.AllVersions {
		c := l.container("eth0")
		conf := l.ipamConf(v, nil)
		id := "ver-" + strings.ReplaceAll(v, ".", "")
		out, err := l.run(pluginCall{cmd: "ADD", id: id, netns: c.path, ifName: c.ifName}, conf)
		if err != nil {
			t.Fatalf("%s: %v", v, err)
		}
		var raw map[string]json.RawMessage
		if err := json.Unmarshal([]byte(out), &raw); err != nil {
			t.Fatalf("%s: %v: %s", v, err, out)
		}
		key := "ips"
		if spec.Compare(v, spec.V030) < 0 {
			key = "ip4"
		}
		if _, ok := raw[key]; !ok {
			t.Errorf("%s: result lacks %q: %s", v, key, out)
		}
		var cv string
		json.Unmarshal(raw["cniVersion"], &cv)
		if cv != v {
			t.Errorf("%s: result cniVersion %q", v, cv)
		}
		res, err := spec.ParseResult([]byte(out), v)
		if err != nil || len(res.IPs) != 1 {
			t.Fatalf("%s: %v %s", v, err, out)
		}
		c.configure(t, res.IPs[0].Address)
		if _, err := l.run(pluginCall{cmd: "DEL", id: id, netns: c.path, ifName: c.ifName}, conf); err != nil {
			t.Errorf("%s: DEL: %v", v, err)
		}
		addr := res.IPs[0].Address.Addr()
		l.waitFor(v+" release at the server", 5*time.Second, func() bool { return l.serverLease(addr) == "" })
	}
}

// TestBridgeChain: the runtime runs bridge with dhcp as IPAM (the IPAM
// runs in-process in the multi-call binary and asks the daemon): the
// container gets the leased address and the routes, reaches the server,
// CHECK passes, DEL releases the lease at the server and removes everything
// the daemon held.
func TestBridgeChain(t *testing.T) {
	t.Parallel()
	l := newLab(t, serverOpts{})
	l.startDaemon()
	cname, cpath := testutil.NewNS(t, "dhc")
	list := l.conflist(spec.Current)
	rt := &runtime.RuntimeConf{ContainerID: "chain1", NetNS: cpath, IfName: "eth0"}
	ctx := ctxT(t)
	var res *spec.Result
	if err := l.inHost(func() (err error) { res, err = l.cni.AddNetworkList(ctx, list, rt); return }); err != nil {
		t.Fatal(err)
	}
	addr := res.IPs[0].Address
	out, _ := exec.Command("ip", "-n", cname, "-4", "-o", "addr", "show", "eth0").CombinedOutput()
	if !strings.Contains(string(out), addr.String()) {
		t.Fatalf("container lacks %s: %s", addr, out)
	}
	out, _ = exec.Command("ip", "-n", cname, "route", "show", "default").CombinedOutput()
	if !strings.Contains(string(out), "via "+labServer) {
		t.Errorf("no default route via %s: %s", labServer, out)
	}
	if out, err := exec.Command("ip", "netns", "exec", cname, "ping", "-c1", "-W2", labServer).CombinedOutput(); err != nil {
		t.Errorf("ping %s from the container: %v: %s", labServer, err, out)
	}
	if l.serverLease(addr.Addr()) == "" {
		t.Errorf("dnsmasq holds no lease for %s", addr)
	}
	if err := l.inHost(func() error { return l.cni.CheckNetworkList(ctx, list, rt) }); err != nil {
		t.Errorf("CHECK: %v", err)
	}
	if err := l.inHost(func() error { return l.cni.DelNetworkList(ctx, list, rt) }); err != nil {
		t.Fatal(err)
	}
	if recs := stateRecords(t, l.state); len(recs) != 0 {
		t.Errorf("the daemon still holds %d lease(s) after DEL", len(recs))
	}
	// bridge calls IPAM DEL before it deletes the container interface, so
	// the daemon's DHCPRELEASE goes out on it and the server frees the
	// lease (the reference bridge deletes the interface first: its DHCP
	// leases stay at the server until they expire).
	l.waitFor("dnsmasq to drop the released lease", 5*time.Second, func() bool { return l.serverLease(addr.Addr()) == "" })
	if !strings.Contains(readFile(l.srvLog), "DHCPRELEASE(pbdhcp0) "+addr.Addr().String()) {
		t.Errorf("dnsmasq logged no DHCPRELEASE for %s", addr)
	}
}

// TestCheck: CHECK passes with the lease held and its address on the
// interface; fails when the address is gone, when prevResult lacks it, and
// when the daemon holds no lease.
func TestCheck(t *testing.T) {
	t.Parallel()
	l := newLab(t, serverOpts{})
	l.startDaemon()
	c := l.container("eth0")
	conf := l.ipamConf(spec.Current, nil)
	res := l.add(c, "check1", conf, "")
	call := pluginCall{cmd: "CHECK", id: "check1", netns: c.path, ifName: c.ifName}
	l.want(call, withPrev(t, conf, res), spec.ErrInternal, "is not configured on eth0")
	c.configure(t, res.IPs[0].Address)
	if _, err := l.run(call, withPrev(t, conf, res)); err != nil {
		t.Fatalf("CHECK: %v", err)
	}
	other := res.Clone()
	other.IPs[0].Address = netip.MustParsePrefix("10.99.0.250/24")
	l.want(call, withPrev(t, conf, other), spec.ErrInternal, "missing from prevResult")
	if _, err := l.run(pluginCall{cmd: "DEL", id: "check1", netns: c.path, ifName: c.ifName}, conf); err != nil {
		t.Fatal(err)
	}
	l.want(call, withPrev(t, conf, res), spec.ErrInternal, "holds no lease")
}

// TestGC: GC releases the leases of attachments not in the valid list (at
// the server) and keeps the others.
func TestGC(t *testing.T) {
	t.Parallel()
	l := newLab(t, serverOpts{})
	l.startDaemon()
	conf := l.ipamConf(spec.Current, nil)
	keep, drop := l.container("eth0"), l.container("eth0")
	kres, dres := l.add(keep, "keep1", conf, ""), l.add(drop, "drop1", conf, "")
	keep.configure(t, kres.IPs[0].Address)
	drop.configure(t, dres.IPs[0].Address)

	var m map[string]any
	json.Unmarshal([]byte(conf), &m)
	m["cni.dev/valid-attachments"] = []map[string]string{{"containerID": "keep1", "ifname": "eth0"}}
	gcConf, _ := json.Marshal(m)
	if _, err := l.run(pluginCall{cmd: "GC"}, string(gcConf)); err != nil {
		t.Fatal(err)
	}
	l.waitFor("the stale lease released at the server", 5*time.Second, func() bool { return l.serverLease(dres.IPs[0].Address.Addr()) == "" })
	if l.serverLease(kres.IPs[0].Address.Addr()) == "" {
		t.Errorf("GC released the valid attachment's lease")
	}
	if recs := stateRecords(t, l.state); len(recs) != 1 || recs[0].ContainerID != "keep1" {
		t.Errorf("records after GC: %+v", recs)
	}
}

// TestStatus: STATUS succeeds while the daemon serves, code 50 when it is
// gone; DEL with the daemon stopped cleanly (socket removed) succeeds.
func TestStatus(t *testing.T) {
	t.Parallel()
	l := newLab(t, serverOpts{})
	l.startDaemon()
	conf := l.ipamConf(spec.Current, nil)
	if _, err := l.run(pluginCall{cmd: "STATUS"}, conf); err != nil {
		t.Fatalf("STATUS: %v", err)
	}
	l.daemon.stop(t, 15)
	if fileExists(l.sock) {
		t.Errorf("socket left after SIGTERM")
	}
	l.want(pluginCall{cmd: "STATUS"}, conf, spec.ErrPluginNotAvailable, "socket absent")
	if _, err := l.run(pluginCall{cmd: "DEL", id: "nothing1", ifName: "eth0"}, conf); err != nil {
		t.Errorf("DEL with no daemon socket: %v", err)
	}
	l.want(pluginCall{cmd: "ADD", id: "nothing1", netns: "/run/netns/x", ifName: "eth0"}, conf, spec.ErrTryAgainLater, "is socket absent")
}

// TestOptions: provide (value and fromArg, incl. host-name from CNI_ARGS and
// a vendor class) reaches the server; request with skipDefault sends just
// what is listed; a provided client identifier is used for the lease and
// for its release.
func TestOptions(t *testing.T) {
	t.Parallel()
	l := newLab(t, serverOpts{})
	l.startDaemon()
	c := l.container("eth0")
	conf := l.ipamConf(spec.Current, map[string]any{
		"provide": []map[string]any{
			{"option": "host-name", "fromArg": "K8S_POD_NAME"},
			{"option": "vendor-class-identifier", "value": "patchbay-test"},
			{"option": "dhcp-client-identifier", "value": "my-client-id"},
		},
		"request": []map[string]any{{"skipDefault": true}, {"option": "subnet-mask"}, {"option": "42"}},
	})
	res := l.add(c, "opts1", conf, "IgnoreUnknown=1;K8S_POD_NAME=web-1")
	addr := res.IPs[0].Address
	lease := l.serverLease(addr.Addr())
	if f := strings.Fields(lease); len(f) < 5 || f[3] != "web-1" || f[4] != hexColon([]byte("my-client-id")) {
		t.Errorf("server lease %q, want host name web-1 and client id my-client-id", lease)
	}
	log := readFile(l.srvLog)
	if !strings.Contains(log, "vendor class: patchbay-test") {
		t.Errorf("vendor class not seen by the server")
	}
	if !strings.Contains(log, "requested options: 1:netmask, 42:ntp-server\n") {
		t.Errorf("requested options not exactly 1 and 42:\n%s", log)
	}
	// Only what was requested came back: no router, so no gateway.
	if res.IPs[0].Gateway.IsValid() || len(res.Routes) != 0 {
		t.Errorf("result has gateway/routes without requesting them: %v", res)
	}
	c.configure(t, addr)
	if _, err := l.run(pluginCall{cmd: "DEL", id: "opts1", netns: c.path, ifName: c.ifName}, conf); err != nil {
		t.Fatal(err)
	}
	l.waitFor("release under the provided client id", 5*time.Second, func() bool { return l.serverLease(addr.Addr()) == "" })
}

// TestBadConfig: bad keys get code 7 naming the key, without a daemon.
func TestBadConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l := &lab{t: t, sock: dir + "/none.sock"}
	for _, c := range []struct {
		ipam  map[string]any
		parts []string
	}{
		{map[string]any{"daemonSocketPath": "relative.sock"}, []string{"ipam.daemonSocketPath", "relative.sock"}},
		{map[string]any{"provide": []map[string]any{{"option": "no-such-option", "value": "x"}}}, []string{"ipam.provide[0].option", "no-such-option"}},
		{map[string]any{"provide": []map[string]any{{"option": "300", "value": "x"}}}, []string{"ipam.provide[0].option", "300"}},
		{map[string]any{"provide": []map[string]any{{"option": "53", "value": "x"}}}, []string{"ipam.provide[0].option", "message type"}},
		{map[string]any{"provide": []map[string]any{{"option": "host-name"}}}, []string{"ipam.provide[0]", "needs \"value\" or \"fromArg\""}},
		{map[string]any{"provide": []map[string]any{{"option": "host-name", "value": strings.Repeat("x", 256)}}}, []string{"ipam.provide[0].value", "256 bytes"}},
		{map[string]any{"request": []map[string]any{{"option": "55"}}}, []string{"ipam.request[0].option", "parameter request list"}},
		{map[string]any{"priority": -1}, []string{"ipam.priority", "-1"}},
	} {
		conf := l.ipamConf(spec.Current, c.ipam)
		l.want(pluginCall{cmd: "ADD", id: "bad1", netns: "/run/netns/x", ifName: "eth0"}, conf, spec.ErrInvalidNetworkConfig, c.parts...)
	}
	l.want(pluginCall{cmd: "ADD", id: "bad1", netns: "/run/netns/x", ifName: "eth0"},
		`{"cniVersion":"1.0.0","name":"n","type":"dhcp"}`, spec.ErrInvalidNetworkConfig, "ipam")
	// fromArg longer than an option holds.
	conf := l.ipamConf(spec.Current, map[string]any{"provide": []map[string]any{{"option": "host-name", "fromArg": "K8S_POD_NAME"}}})
	l.want(pluginCall{cmd: "ADD", id: "bad1", netns: "/run/netns/x", ifName: "eth0", args: "IgnoreUnknown=1;K8S_POD_NAME=" + strings.Repeat("y", 300)},
		conf, spec.ErrInvalidNetworkConfig, "K8S_POD_NAME", "300 bytes")
}

// TestConcurrent: parallel ADDs of many attachments each get their own
// lease, and parallel DELs release them all at the server.
func TestConcurrent(t *testing.T) {
	t.Parallel()
	l := newLab(t, serverOpts{})
	l.startDaemon()
	conf := l.ipamConf(spec.Current, nil)
	const n = 12
	conts := make([]*container, n)
	for i := range conts {
		conts[i] = l.container("eth0")
	}
	results := make([]*spec.Result, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, c := range conts {
		wg.Go(func() {
			out, err := l.run(pluginCall{cmd: "ADD", id: fmt.Sprintf("conc%d", i), netns: c.path, ifName: c.ifName}, conf)
			if err == nil {
				results[i], err = spec.ParseResult([]byte(out), spec.Current)
			}
			errs[i] = err
		})
	}
	wg.Wait()
	seen := map[netip.Addr]bool{}
	for i, r := range results {
		if errs[i] != nil {
			t.Fatalf("ADD %d: %v", i, errs[i])
		}
		a := r.IPs[0].Address
		if seen[a.Addr()] {
			t.Errorf("address %v handed out twice", a)
		}
		seen[a.Addr()] = true
		conts[i].configure(t, a)
	}
	for i, c := range conts {
		wg.Go(func() {
			_, errs[i] = l.run(pluginCall{cmd: "DEL", id: fmt.Sprintf("conc%d", i), netns: c.path, ifName: c.ifName}, conf)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("DEL %d: %v", i, err)
		}
	}
	l.waitFor("every lease released at the server", 5*time.Second, func() bool {
		return strings.TrimSpace(readFile(l.leases)) == ""
	})
}

// TestDelCancelsAdd: a DEL of an attachment whose ADD is still waiting for
// a server ends that ADD at once (code 11) instead of waiting out
// -resendtimeout, and succeeds.
func TestDelCancelsAdd(t *testing.T) {
	t.Parallel()
	l := newLab(t, serverOpts{})
	l.nft(filterTable + "\n" + `insert rule inet dhcptest input udp dport 67 counter drop comment "dropped"`)
	l.startDaemon("-resendtimeout", "60s")
	c := l.container("eth0")
	conf := l.ipamConf(spec.Current, nil)
	type outcome struct {
		out string
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		out, err := l.run(pluginCall{cmd: "ADD", id: "cancel1", netns: c.path, ifName: c.ifName}, conf)
		done <- outcome{out, err}
	}()
	l.waitFor("the ADD to start", 10*time.Second, func() bool { return strings.Contains(readFile(l.dlog), `msg="acquiring lease"`) })
	start := time.Now()
	if _, err := l.run(pluginCall{cmd: "DEL", id: "cancel1", netns: c.path, ifName: c.ifName}, conf); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	select {
	case o := <-done:
		e, ok := spec.ParseError([]byte(o.out))
		if o.err == nil || !ok || e.Code != spec.ErrTryAgainLater || !strings.Contains(e.Msg, "cancelled by a DEL") {
			t.Errorf("ADD: %v %s", o.err, o.out)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("ADD still running 10 s after DEL")
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("DEL took %v", took)
	}
	if recs := stateRecords(t, l.state); len(recs) != 0 {
		t.Errorf("records left: %+v", recs)
	}
}

// TestHostPrefix: with -hostprefix the daemon finds namespaces, its socket
// and its state under the prefix (a daemon in a container with the host's
// root mounted there). The prefix here holds a link to /run/netns.
func TestHostPrefix(t *testing.T) {
	t.Parallel()
	l := newLab(t, serverOpts{})
	prefix := filepath.Join(l.dir, "host")
	if err := os.MkdirAll(filepath.Join(prefix, "run"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/run/netns", filepath.Join(prefix, "run", "netns")); err != nil {
		t.Fatal(err)
	}
	argv := []string{filepath.Join(testutil.OurBin(t), "dhcp"), "daemon", "-hostprefix", prefix,
		"-socketpath", "/run/cni/dhcp.sock", "-statedir", "/var/lib/cni/dhcp", "-timeout", "1s"}
	l.start("dhcp daemon", l.dlog, argv...)
	l.sock = filepath.Join(prefix, "run", "cni", "dhcp.sock") // where the plugin (on the host) finds it
	l.waitFor("the daemon's socket under the prefix", 10*time.Second, func() bool { return fileExists(l.sock) })
	c := l.container("eth0")
	conf := l.ipamConf(spec.Current, nil)
	res := l.add(c, "prefix1", conf, "")
	if recs := stateRecords(t, filepath.Join(prefix, "var", "lib", "cni", "dhcp")); len(recs) != 1 || recs[0].Netns != c.path {
		t.Errorf("records under the prefix: %+v", recs)
	}
	c.configure(t, res.IPs[0].Address)
	if _, err := l.run(pluginCall{cmd: "DEL", id: "prefix1", netns: c.path, ifName: c.ifName}, conf); err != nil {
		t.Fatal(err)
	}
	l.waitFor("the release", 5*time.Second, func() bool { return l.serverLease(res.IPs[0].Address.Addr()) == "" })
}
