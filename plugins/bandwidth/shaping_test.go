package bandwidth

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/patchbay-cni/patchbay/internal/netns"
	"github.com/patchbay-cni/patchbay/internal/testutil"
)

// Shaping is measured, not assumed: TCP goodput between the host and the
// container namespace must land near each configured rate, per direction
// and per address family, and far above it without the plugin.
//
// The tbf counts whole frames (headers included), so TCP's goodput stays a
// few percent under the rate (about 96% over IPv4, 94% over IPv6 here) and
// must never exceed it. The lower bound is loose because this machine's two
// CPUs are shared with other work.
func TestShapingMeasured(t *testing.T) {
	const (
		ingressBits = 4_000_000               // host -> container
		egressBits  = 12_000_000              // container -> host
		burstBits   = 16 * 1024 * 8           // smaller than TCP's 64 KiB segments: tbf splits them, so data arrives in MTU-sized steps
		skip        = 1500 * time.Millisecond // the bucket drains in < 0.2 s
		window      = 2 * time.Second
		low, high   = 0.70, 1.01
	)
	f := newFixture(t)
	h4, c4 := netip.MustParseAddr(hostIP4), netip.MustParseAddr(contIP4)
	h6, c6 := netip.MustParseAddr(hostIP6), netip.MustParseAddr(contIP6)

	// Unshaped, a veth pair moves far more than either limit: the
	// measurement can tell shaped from unshaped.
	base := testutil.Throughput(t, f.hostPath, f.contPath, netip.AddrPortFrom(c4, 5201), 200*time.Millisecond, 500*time.Millisecond)
	t.Logf("unshaped host->container: %.1f Mbit/s", base/1e6)
	if base < 5*egressBits {
		t.Fatalf("unshaped goodput %.1f Mbit/s is too low to tell shaping apart (want > %d Mbit/s)", base/1e6, 5*egressBits/1_000_000)
	}

	keys := fmt.Sprintf(`"ingressRate":%d,"ingressBurst":%d,"egressRate":%d,"egressBurst":%d`, ingressBits, burstBits, egressBits, burstBits)
	cfg := conf("1.1.0", keys, f.prevResult("1.1.0"))
	f.mustRun("ADD", cfg)

	for _, m := range []struct {
		what     string
		from, to string
		dst      netip.Addr
		limit    float64
	}{
		{"ingress (host->container) IPv4", f.hostPath, f.contPath, c4, ingressBits},
		{"egress (container->host) IPv4", f.contPath, f.hostPath, h4, egressBits},
		{"ingress (host->container) IPv6", f.hostPath, f.contPath, c6, ingressBits},
		{"egress (container->host) IPv6", f.contPath, f.hostPath, h6, egressBits},
	} {
		got := testutil.Throughput(t, m.from, m.to, netip.AddrPortFrom(m.dst, 5202), skip, window)
		t.Logf("%s: %.2f Mbit/s, limit %.2f (%.0f%%)", m.what, got/1e6, m.limit/1e6, 100*got/m.limit)
		if got < low*m.limit || got > high*m.limit {
			t.Errorf("%s: %.2f Mbit/s, want %.0f%%..%.0f%% of %.2f Mbit/s", m.what, got/1e6, 100*low, 100*high, m.limit/1e6)
		}
	}

	f.mustRun("DEL", cfg)
	after := testutil.Throughput(t, f.hostPath, f.contPath, netip.AddrPortFrom(c4, 5203), 200*time.Millisecond, 500*time.Millisecond)
	if after < 5*egressBits {
		t.Errorf("after DEL the container still gets only %.1f Mbit/s", after/1e6)
	}
}

// transfer sends n bytes over TCP from the namespace at fromPath to a
// receiver on addr in the namespace at toPath and reports whether all
// arrived within timeout.
func transfer(t *testing.T, fromPath, toPath string, addr netip.AddrPort, n int64, timeout time.Duration) (time.Duration, bool) {
	t.Helper()
	var ln net.Listener
	if err := netns.Do(toPath, func() (err error) { ln, err = net.Listen("tcp", addr.String()); return err }); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan int64, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- 0
			return
		}
		defer c.Close()
		c.SetReadDeadline(time.Now().Add(timeout))
		m, _ := io.Copy(io.Discard, c)
		got <- m
	}()
	var conn net.Conn
	if err := netns.Do(fromPath, func() (err error) { conn, err = net.DialTimeout("tcp", addr.String(), 5*time.Second); return err }); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	conn.SetWriteDeadline(t0.Add(timeout))
	_, err := io.CopyN(conn, zeros{}, n)
	conn.Close()
	m := <-got
	return time.Since(t0), err == nil && m == n
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// Kubelet's "no limit" burst (2^31-1 bits, 256 MiB) at 1 Mbit/s is 2147 s
// of sending: more than the 32 bits of ticks a tbf's buffer field holds.
// The reference wraps it to 218 s (27 MB); here the kernel gets the whole
// bucket in bytes, so 64 MiB pass at once before the rate applies. The
// evidence is the tbf's own counters, not the time taken: a tbf that runs
// out of tokens counts an overlimit.
func TestWideBurstIsWhole(t *testing.T) {
	f := newFixture(t)
	cfg := conf("1.0.0", `"ingressRate":1000000,"ingressBurst":2147483647`, f.prevResult("1.0.0"))
	out := f.mustRun("ADD", cfg)
	f.mustRun("CHECK", conf("1.0.0", `"ingressRate":1000000,"ingressBurst":2147483647`, out))
	// At 1 Mbit/s without the whole bucket, 64 MiB would take 9 minutes.
	d, ok := transfer(t, f.hostPath, f.contPath, netip.AddrPortFrom(netip.MustParseAddr(contIP4), 5210), 64<<20, 120*time.Second)
	if !ok {
		t.Fatalf("64 MiB did not pass within %v: the bucket is smaller than configured", d)
	}
	if sent, over := f.tbfStats(f.hostIf); over != 0 || sent < 64<<20 {
		t.Errorf("after 64 MiB our tbf counts %d bytes sent and %d overlimits: want all of it sent and no overlimit (the bucket never ran out)", sent, over)
	}
	t.Logf("64 MiB through a 1 Mbit/s tbf with a 256 MiB bucket in %v", d.Round(time.Millisecond))

	// The reference's bucket for the same configuration holds 27 MB: a
	// sender that does not stop empties it before 64 MiB have passed.
	r := newFixture(t)
	if o, rc := r.runRef("ADD", cfg); rc != 0 {
		t.Fatalf("reference ADD: %s", o)
	}
	stop := stream(t, r.hostPath, r.contPath, netip.AddrPortFrom(netip.MustParseAddr(contIP4), 5211))
	defer stop()
	var sent, over uint64
	for end := time.Now().Add(120 * time.Second); over == 0 && sent < 64<<20 && time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		sent, over = r.tbfStats(r.hostIf)
	}
	if over == 0 || sent >= 64<<20 {
		t.Errorf("the reference's tbf counts %d bytes sent and %d overlimits: its bucket is not the wrapped one this test expects", sent, over)
	}
	t.Logf("the reference's tbf ran out of tokens after %d bytes", sent)
}

// tbfStats reads the bytes sent and the overlimits of dev's root tbf in
// the host namespace.
func (f *fixture) tbfStats(dev string) (sent, overlimits uint64) {
	f.t.Helper()
	for _, q := range f.jsonOut(f.host, "tc -s -j qdisc show dev "+dev) {
		if q["kind"] == "tbf" {
			b, _ := q["bytes"].(float64)
			o, _ := q["overlimits"].(float64)
			return uint64(b), uint64(o)
		}
	}
	f.t.Fatalf("no tbf on %s", dev)
	return 0, 0
}

// stream sends zeros over TCP from the namespace at fromPath to a receiver
// on addr in the namespace at toPath that discards them, until stop.
func stream(t *testing.T, fromPath, toPath string, addr netip.AddrPort) (stop func()) {
	t.Helper()
	var ln net.Listener
	if err := netns.Do(toPath, func() (err error) { ln, err = net.Listen("tcp", addr.String()); return err }); err != nil {
		t.Fatal(err)
	}
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		io.Copy(io.Discard, c)
	}()
	var conn net.Conn
	if err := netns.Do(fromPath, func() (err error) { conn, err = net.DialTimeout("tcp", addr.String(), 5*time.Second); return err }); err != nil {
		ln.Close()
		t.Fatal(err)
	}
	go io.Copy(conn, zeros{})
	return func() { conn.Close(); ln.Close() }
}
