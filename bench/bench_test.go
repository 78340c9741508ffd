package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/patchbay-cni/patchbay/internal/rundir"
)

// These tests cover the harness's arithmetic and formatting only; the
// measurements themselves run under `make bench`, never under `go test`.

func TestMedian(t *testing.T) {
	ms := time.Millisecond
	for _, c := range []struct {
		in   []time.Duration
		want time.Duration
		ok   bool
	}{
		{nil, 0, false},
		{[]time.Duration{3 * ms}, 3 * ms, true},
		{[]time.Duration{9 * ms, 1 * ms, 5 * ms}, 5 * ms, true},
		{[]time.Duration{4 * ms, 1 * ms, 2 * ms, 100 * ms}, 3 * ms, true},
	} {
		got, ok := median(c.in)
		if got != c.want || ok != c.ok {
			t.Errorf("median(%v) = %v, %v; want %v, %v", c.in, got, ok, c.want, c.ok)
		}
	}
	in := []time.Duration{3, 1, 2}
	median(in)
	if in[0] != 3 {
		t.Errorf("median sorted its input in place: %v", in)
	}
}

func TestCompareRow(t *testing.T) {
	tg := target{0.35, "≤ 0.35×"}
	for _, c := range []struct {
		name            string
		ours, ref, deb  cell
		wantB, wantVerd string
	}{
		{"pass against the faster reference", cell{v: 3}, cell{v: 20}, cell{v: 10}, "0.30×", "PASS"},
		{"miss", cell{v: 4}, cell{v: 20}, cell{v: 10}, "0.40×", "MISS"},
		{"failures never pass", cell{v: 1, fails: 1}, cell{v: 20}, cell{v: 10}, "0.10×", "MISS"},
		{"no reference data", cell{v: 1}, cell{text: "n/a"}, cell{text: "n/a"}, "-", "no data"},
		{"one reference missing", cell{v: 3}, cell{text: "n/a"}, cell{v: 10}, "0.30×", "PASS"},
	} {
		r := compareRow("w", c.ours, c.ref, c.deb, tg)
		if r.ratioB != c.wantB || r.verdict != c.wantVerd {
			t.Errorf("%s: ratio %q verdict %q, want %q %q", c.name, r.ratioB, r.verdict, c.wantB, c.wantVerd)
		}
	}
	if r := compareRow("w", cell{v: 1}, cell{v: 2}, cell{v: 4}, target{}); r.verdict != "-" || r.ratioDeb != "0.25×" {
		t.Errorf("no target: %+v", r)
	}
}

func TestTableWrite(t *testing.T) {
	tb := &table{}
	tb.add(row{workload: "ADD x", ours: "1.00 ms", ref: "10.0 ms", deb: "n/a", ratioDeb: "-", ratioB: "0.10×", target: "≤ 0.35×", verdict: "PASS"})
	tb.note("a note")
	var b bytes.Buffer
	tb.write(&b, []string{"# title"})
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	var rows []string
	for _, l := range lines {
		if strings.HasPrefix(l, "|") {
			rows = append(rows, l)
		}
	}
	if len(rows) != 3 {
		t.Fatalf("want header, separator and one row, got:\n%s", b.String())
	}
	for _, r := range rows[1:] {
		if len([]rune(r)) != len([]rune(rows[0])) {
			t.Errorf("misaligned table:\n%s", b.String())
		}
	}
	if !strings.Contains(b.String(), "- a note") || !strings.HasPrefix(b.String(), "# title") {
		t.Errorf("missing title or notes:\n%s", b.String())
	}
}

func TestParseFlags(t *testing.T) {
	t.Setenv("PATCHBAY_REF_BIN", "/ref")
	t.Setenv("PATCHBAY_BENCH_N", "7")
	o, err := parseFlags([]string{"-only", "bhl,bytes"})
	if err != nil {
		t.Fatal(err)
	}
	if o.n != 7 || !o.want("bhl") || o.want("seed") {
		t.Errorf("options %+v", o)
	}
	if _, err := parseFlags([]string{"-only", "nope"}); err == nil {
		t.Error("unknown workload accepted")
	}
	if _, err := parseFlags([]string{"-n", "0"}); err == nil {
		t.Error("-n 0 accepted")
	}
}

func TestIsolate(t *testing.T) {
	t.Setenv("DBUS_SYSTEM_BUS_ADDRESS", "")
	t.Setenv(rundir.Env, "")
	isolate("/w")
	if got := os.Getenv(rundir.Env); got != "/w/run" {
		t.Errorf("%s=%q, want the bench's own run directory", rundir.Env, got)
	}
	if got := os.Getenv("DBUS_SYSTEM_BUS_ADDRESS"); !strings.HasPrefix(got, "unix:path=/nonexistent/") {
		t.Errorf("DBUS_SYSTEM_BUS_ADDRESS=%q: the machine's bus stays reachable", got)
	}
}
