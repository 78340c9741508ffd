package dhcp

import (
	"encoding/json"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/patchbay-cni/patchbay/internal/atomicfile"
	"github.com/patchbay-cni/patchbay/internal/testutil"
	"github.com/patchbay-cni/patchbay/spec"
)

// The server's timers drive these tests: dnsmasq's shortest lease is two
// minutes, but it sends whatever T1 (option 58) and T2 (option 59) it is
// told to, and the daemon follows the server's T1/T2 as RFC 2131 says. So
// renewal and rebinding happen within seconds with no test hook in the
// daemon.

const filterTable = `table inet dhcptest {
	chain input {
		type filter hook input priority 0; policy accept;
		udp dport 67 ip daddr 10.99.0.1 counter accept comment "unicast"
		udp dport 67 ip daddr 255.255.255.255 counter accept comment "broadcast"
	}
}`

// TestRenewThenRebind: at T1 the daemon renews by unicast to the server;
// when the server stops answering unicast, the renewal fails until T2 and
// the daemon rebinds by broadcast, which the server answers. Each time the
// server's lease is extended.
func TestRenewThenRebind(t *testing.T) {
	t.Parallel()
	l := newLab(t, serverOpts{t1: 2 * time.Second, t2: 5 * time.Second})
	l.nft(filterTable)
	l.startDaemon()
	c := l.container("eth0")
	res := l.add(c, "renew1", l.ipamConf(spec.Current, nil), "")
	addr := res.IPs[0].Address
	c.configure(t, addr)
	exp0 := l.serverExpiry(addr.Addr())
	unicast0 := l.nftCounter("unicast")

	l.waitFor("a renewal", 10*time.Second, func() bool {
		return count(readFile(l.dlog), `msg="lease extended".*state=renewing`) >= 1
	})
	if l.nftCounter("unicast") <= unicast0 {
		t.Errorf("the renewal did not reach the server by unicast")
	}
	if exp1 := l.serverExpiry(addr.Addr()); exp1 <= exp0 {
		t.Errorf("server expiry %d not extended by the renewal (was %d)", exp1, exp0)
	}

	// The server stops answering unicast.
	l.nft(`insert rule inet dhcptest input udp dport 67 ip daddr 10.99.0.1 counter drop comment "dropped"`)
	rebinds := count(readFile(l.dlog), `msg="lease extended".*state=rebinding`)
	exp1 := l.serverExpiry(addr.Addr())
	l.waitFor("a rebinding", 15*time.Second, func() bool {
		return count(readFile(l.dlog), `msg="lease extended".*state=rebinding`) > rebinds
	})
	if l.nftCounter("dropped") == 0 {
		t.Errorf("no unicast renewal was attempted before rebinding")
	}
	if exp2 := l.serverExpiry(addr.Addr()); exp2 <= exp1 {
		t.Errorf("server expiry %d not extended by rebinding (was %d)", exp2, exp1)
	}
	if recs := stateRecords(t, l.state); len(recs) != 1 || recs[0].Lost != "" {
		t.Errorf("state after rebinding: %+v", recs)
	}
	out, err := exec.Command("ip", "-n", c.name, "-o", "link", "show", c.ifName).CombinedOutput()
	if err != nil || !strings.Contains(string(out), ",UP") {
		t.Errorf("interface not up after rebinding: %s %v", out, err)
	}
}

// TestServerSilentAdd: with no server answering, ADD fails with code 11
// (try again later) after -resendtimeout, naming the interface, and leaves
// no lease behind.
func TestServerSilentAdd(t *testing.T) {
	t.Parallel()
	l := newLab(t, serverOpts{})
	l.nft(filterTable + "\n" + `insert rule inet dhcptest input udp dport 67 counter drop comment "dropped"`)
	l.startDaemon("-resendtimeout", "3s", "-timeout", "500ms")
	c := l.container("eth0")
	start := time.Now()
	out, rc := l.exec(pluginCall{cmd: "ADD", id: "silent1", netns: c.path, ifName: c.ifName}, l.ipamConf(spec.Current, nil))
	testutil.ExpectCNIError(t, out, rc, int(spec.ErrTryAgainLater), "no lease for eth0", "no DHCP server answered within 3s")
	if took := time.Since(start); took > 60*time.Second {
		t.Errorf("ADD took %v with -resendtimeout 3s", took)
	}
	// The daemon says how many DISCOVERs it sent: there was at least one
	// retransmission (due 0.3 s after the first on a link just up, a tenth
	// of the 3 s), and the server's filter saw them (all but, at most, the
	// first: a link just up may not forward yet).
	if m := regexp.MustCompile(`after (\d+) transmission`).FindStringSubmatch(out); m == nil {
		t.Errorf("the error does not say how many DISCOVERs were sent: %s", out)
	} else if sent, _ := strconv.Atoi(m[1]); sent < 2 || l.nftCounter("dropped") < sent-1 || l.nftCounter("dropped") > sent {
		t.Errorf("%d DISCOVERs sent, %d seen by the server's filter: want 2 or more sent, all or all but the first seen", sent, l.nftCounter("dropped"))
	}
	if recs := stateRecords(t, l.state); len(recs) != 0 {
		t.Errorf("failed ADD left records: %+v", recs)
	}
}

// TestServerSilentExpiry: a lease whose server stops answering entirely is
// renewed, then rebound, in vain; at expiry the daemon sets the interface
// down (as the reference does: the address may be given to someone else),
// CHECK reports the loss, and DEL clears it. dnsmasq's shortest lease is
// two minutes, so the test stops the daemon and moves the persisted lease's
// times back by that much, as if the daemon had been down for two minutes:
// the restarted daemon finds the lease due to expire in a few seconds.
func TestServerSilentExpiry(t *testing.T) {
	t.Parallel()
	l := newLab(t, serverOpts{})
	l.startDaemon()
	c := l.container("eth0")
	conf := l.ipamConf(spec.Current, nil)
	res := l.add(c, "expire1", conf, "")
	c.configure(t, res.IPs[0].Address)
	l.daemon.stop(t, 15) // SIGTERM: leases stay persisted

	recs := stateRecords(t, l.state)
	if len(recs) != 1 {
		t.Fatalf("records after stop: %d", len(recs))
	}
	r := recs[0]
	shift := time.Until(r.Expire) - 4*time.Second
	r.Renew, r.Rebind, r.Expire = r.Renew.Add(-shift), r.Rebind.Add(-shift), r.Expire.Add(-shift)
	b, _ := json.Marshal(r)
	d := &daemon{dir: l.state}
	if err := atomicfile.Write(d.file(r.key()), b, 0o600, false); err != nil {
		t.Fatal(err)
	}

	l.nft(filterTable + "\n" + `insert rule inet dhcptest input udp dport 67 counter drop comment "dropped"`)
	l.startDaemon()
	l.waitFor("the lease to expire", 15*time.Second, func() bool {
		return strings.Contains(readFile(l.dlog), `msg="lease lost: setting the interface down"`)
	})
	if l.nftCounter("dropped") == 0 {
		t.Errorf("the daemon did not try to rebind before expiry")
	}
	out, _ := exec.Command("ip", "-n", c.name, "-o", "link", "show", c.ifName).CombinedOutput()
	if strings.Contains(string(out), ",UP") {
		t.Errorf("interface still up after expiry: %s", out)
	}
	l.want(pluginCall{cmd: "CHECK", id: "expire1", netns: c.path, ifName: c.ifName},
		withPrev(t, conf, res), spec.ErrInternal, "lost", "expired")
	if _, err := l.run(pluginCall{cmd: "DEL", id: "expire1", netns: c.path, ifName: c.ifName}, conf); err != nil {
		t.Fatal(err)
	}
	if recs := stateRecords(t, l.state); len(recs) != 0 {
		t.Errorf("DEL left records: %+v", recs)
	}
}

// withPrev adds prevResult (in the config's version) to a config.
func withPrev(t *testing.T, conf string, prev *spec.Result) string {
	t.Helper()
	var m map[string]any
	json.Unmarshal([]byte(conf), &m)
	out, err := prev.Encode(m["cniVersion"].(string))
	if err != nil {
		t.Fatal(err)
	}
	m["prevResult"] = json.RawMessage(out)
	b, _ := json.Marshal(m)
	return string(b)
}

// TestRestartKeepsLeases: a daemon killed outright (SIGKILL: stale socket,
// no chance to save anything) and started again resumes the lease from its
// state: it renews it at T1 and DEL releases it at the server. (A DEL
// while it is down: TestDelWhileDaemonDown.)
func TestRestartKeepsLeases(t *testing.T) {
	t.Parallel()
	l := newLab(t, serverOpts{t1: 3 * time.Second, t2: 100 * time.Second})
	l.startDaemon()
	c := l.container("eth0")
	conf := l.ipamConf(spec.Current, nil)
	res := l.add(c, "restart1", conf, "")
	addr := res.IPs[0].Address
	c.configure(t, addr)
	l.daemon.stop(t, 9)
	if !fileExists(l.sock) {
		t.Fatalf("expected a stale socket after SIGKILL")
	}
	logBefore := len(readFile(l.dlog))
	l.startDaemon()
	l.waitFor("the restarted daemon to renew", 15*time.Second, func() bool {
		return strings.Contains(readFile(l.dlog)[logBefore:], `msg="lease extended"`)
	})
	if !strings.Contains(readFile(l.dlog)[logBefore:], `msg="resuming lease"`) {
		t.Errorf("no resume logged")
	}
	// The restarted daemon answers CHECK and a repeated ADD from its state.
	if _, err := l.run(pluginCall{cmd: "CHECK", id: "restart1", netns: c.path, ifName: c.ifName}, withPrev(t, conf, res)); err != nil {
		t.Errorf("CHECK after restart: %v", err)
	}
	if again := l.add(c, "restart1", conf, ""); again.IPs[0].Address != addr {
		t.Errorf("ADD after restart gave %v, want %v", again.IPs[0].Address, addr)
	}
	if _, err := l.run(pluginCall{cmd: "DEL", id: "restart1", netns: c.path, ifName: c.ifName}, conf); err != nil {
		t.Fatal(err)
	}
	l.waitFor("dnsmasq to drop the released lease", 5*time.Second, func() bool { return l.serverLease(addr.Addr()) == "" })
}

// TestRestoreDropsVanishedNamespaces: a record whose namespace is gone is
// dropped on start; an unreadable record is removed, not fatal.
func TestRestoreDropsVanishedNamespaces(t *testing.T) {
	t.Parallel()
	l := newLab(t, serverOpts{})
	if err := os.MkdirAll(l.state, 0o700); err != nil {
		t.Fatal(err)
	}
	d := &daemon{dir: l.state}
	r := record{Version: recordVersion, Network: labNet, ContainerID: "gone1", IfName: "eth0", Netns: "/run/netns/pbt-no-such-ns"}
	ack, err := newTestACK(netip.MustParseAddr("10.99.0.50"))
	if err != nil {
		t.Fatal(err)
	}
	r.ACK = ack
	b, _ := json.Marshal(r)
	os.WriteFile(d.file(r.key()), b, 0o600)
	os.WriteFile(filepath.Join(l.state, "garbage.json"), []byte("{not json"), 0o600)
	l.startDaemon()
	if ents, _ := os.ReadDir(l.state); len(ents) != 0 {
		t.Errorf("state holds %d file(s) after start, want none", len(ents))
	}
	if !strings.Contains(readFile(l.dlog), "dropping lease of a namespace that is gone") {
		t.Errorf("no drop logged")
	}
}
