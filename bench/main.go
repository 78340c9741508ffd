// Command bench (run by `make bench`, as root) measures our plugins against
// the reference plugins v1.9.1 and Debian's containernetworking-plugins
// 1.1.1, all driven by the same runtime (our runtime library) in test
// namespaces created for the run, interleaved so machine noise hits all of
// them alike. It prints a table of medians, ratios and PASS/MISS against
// the performance targets, and writes it to bench/results.md.
//
// Nothing runs under `go test`: this is a program, not a test.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/patchbay-cni/patchbay/internal/rundir"
	"github.com/patchbay-cni/patchbay/internal/vmtest"
)

type options struct {
	n, conc, rounds, prefill int
	ours, ref, deb, out      string
	only                     map[string]bool
	cipam                    cipamOptions
	multus                   string // Multus v4.3.0 binaries (node workload)
	nodeBurst, nodeN         int
}

var workloads = []string{"bhl", "seed", "masq", "steps", "hostlocal", "conc", "bytes", "loopback", "macvlan", "ipvlan", "firewall", "bw", "cipam", "node"}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func envStr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func parseFlags(args []string) (*options, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	o := &options{}
	fs.IntVar(&o.n, "n", envInt("PATCHBAY_BENCH_N", 20), "runs per workload and plugin set (env PATCHBAY_BENCH_N)")
	fs.IntVar(&o.conc, "concurrency", 100, "concurrent ADDs in the concurrency workload")
	fs.IntVar(&o.rounds, "rounds", envInt("PATCHBAY_BENCH_ROUNDS", 3), "rounds of the concurrency workload (env PATCHBAY_BENCH_ROUNDS)")
	fs.IntVar(&o.prefill, "prefill", 10000, "allocations on disk for the full-pool host-local runs")
	fs.StringVar(&o.ours, "ours", envStr("PATCHBAY_BIN", "bin"), "our plugins (env PATCHBAY_BIN)")
	fs.StringVar(&o.ref, "ref", os.Getenv("PATCHBAY_REF_BIN"), "reference plugins v1.9.1 (env PATCHBAY_REF_BIN)")
	fs.StringVar(&o.deb, "debian", "/usr/lib/cni", "Debian's containernetworking-plugins")
	fs.StringVar(&o.out, "out", "bench/results.md", "where to write the table too (empty: stdout only)")
	fs.StringVar(&o.multus, "multus", envStr("PATCHBAY_MULTUS_BIN", filepath.Join(os.Getenv("HOME"), ".cache/patchbay/multus-v4.3.0")), "Multus v4.3.0 binaries for the node workload (env PATCHBAY_MULTUS_BIN)")
	fs.IntVar(&o.nodeBurst, "node-burst", 100, "pods created at once in the node workload's memory burst")
	fs.IntVar(&o.nodeN, "node-n", 10, "pods per meta plugin in the node workload (each one a pod created, run and deleted through kubelet: seconds each)")
	only := fs.String("only", "", "comma-separated workloads to run, of: "+strings.Join(workloads, ","))
	home, _ := os.UserHomeDir()
	fs.StringVar(&o.cipam.whereabouts, "whereabouts", envStr("PATCHBAY_WHEREABOUTS", filepath.Join(home, ".cache", "patchbay", "whereabouts-v0.9.4")),
		"directory with whereabouts v0.9.4 and its crds/ (scripts/bench-deps.sh; env PATCHBAY_WHEREABOUTS)")
	fs.IntVar(&o.cipam.conc, "cipam-concurrency", 50, "concurrent ADDs in the cluster-IPAM section")
	fs.IntVar(&o.cipam.prefill, "cipam-prefill", 1000, "allocations in the pool for the cluster-IPAM full-pool runs")
	steps := fs.String("cipam-steps", "", "comma-separated parts of the cluster-IPAM section to run (default all): floor,single,concurrent,full,many")
	many := fs.String("cipam-many", "", "PODSxNETWORKS: also run that many pods, each attached to that many networks, all at once (e.g. 128x16; slow for whereabouts)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	o.cipam.steps = map[string]bool{}
	for _, st := range strings.Split(*steps, ",") {
		if st = strings.TrimSpace(st); st != "" {
			o.cipam.steps[st] = true
		}
	}
	if *many != "" {
		if _, err := fmt.Sscanf(*many, "%dx%d", &o.cipam.pods, &o.cipam.nets); err != nil || o.cipam.pods < 1 || o.cipam.nets < 1 {
			return nil, fmt.Errorf("-cipam-many %q: want PODSxNETWORKS, e.g. 128x16", *many)
		}
	}
	if o.n < 1 || o.conc < 1 || o.rounds < 1 || o.prefill < 1 {
		return nil, fmt.Errorf("-n, -concurrency, -rounds and -prefill must be at least 1")
	}
	if o.ref == "" {
		return nil, fmt.Errorf("PATCHBAY_REF_BIN (or -ref) must name the reference plugins v1.9.1 (make test-deps installs them)")
	}
	o.only = map[string]bool{}
	for _, w := range strings.Split(*only, ",") {
		if w = strings.TrimSpace(w); w == "" {
			continue
		}
		known := false
		for _, k := range workloads {
			known = known || k == w
		}
		if !known {
			return nil, fmt.Errorf("-only: unknown workload %q (have %s)", w, strings.Join(workloads, ","))
		}
		o.only[w] = true
	}
	return o, nil
}

func (o *options) want(w string) bool { return len(o.only) == 0 || o.only[w] }

func main() {
	vmtest.AgentMain() // the ipvlan workload runs this program inside the test VM
	o, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "bench: must run as root (it creates network namespaces); use `make bench`")
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o *options, stdout io.Writer) (err error) {
	ns := newNSManager()
	defer ns.cleanup() // every namespace we made goes, whatever happened
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v", p)
		}
	}()
	work, err := os.MkdirTemp("", "patchbay-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	isolate(work)
	e := &env{ns: ns, work: work, n: o.n, tbl: &table{}}
	for _, im := range []*impl{{"ours", "ours", o.ours}, {"ref", "ref v1.9.1", o.ref}, {"deb", "Debian 1.1.1", o.deb}} {
		abs, err := filepath.Abs(im.dir)
		if err != nil {
			return err
		}
		im.dir = abs
		e.impls = append(e.impls, im)
	}
	start, load0 := time.Now(), loadAvg()
	var extra bytes.Buffer // sections with their own table
	steps := []struct {
		name string
		f    func() error
	}{
		{"bhl", func() error { return e.bridgeWorkload(ctx, false, !o.want("seed")) }},
		{"seed", func() error { return e.bridgeWorkload(ctx, true, true) }},
		{"masq", func() error { return e.masqWorkload(ctx) }},
		{"steps", func() error { return e.stepsWorkload(ctx) }},
		{"hostlocal", func() error { return e.hostLocalWorkload(ctx, o.prefill) }},
		{"conc", func() error { return e.concurrentWorkload(ctx, o.conc, o.rounds) }},
		{"bytes", func() error { e.bytesWorkload(); return nil }},
		{"loopback", func() error { return e.loopbackWorkload(ctx) }},
		{"macvlan", func() error { return e.macvlanWorkload(ctx) }},  // iface.go
		{"ipvlan", func() error { return e.ipvlanWorkload(ctx, o) }}, // iface.go, in the test VM
		{"firewall", func() error { return e.firewallWorkload(ctx) }},
		{"bw", func() error { return e.bandwidthWorkload(ctx) }}, // bandwidth.go
		{"cipam", func() error { return e.cipamSection(ctx, o.cipam, &extra) }},
		{"node", func() error { return e.nodeWorkload(ctx, o) }},
	}
	for _, s := range steps {
		if !o.want(s.name) {
			continue
		}
		t0 := time.Now()
		fmt.Fprintf(os.Stderr, "bench: %s ...", s.name)
		err := s.f()
		if err == nil {
			err = ctx.Err() // interrupted: a partial table would mislead
		}
		if err != nil {
			fmt.Fprintln(os.Stderr)
			return fmt.Errorf("%s: %w", s.name, err)
		}
		fmt.Fprintf(os.Stderr, " %.1fs\n", time.Since(t0).Seconds())
	}
	e.tbl.note("times are of the runtime call (AddNetworkList/DelNetworkList, plugin execs and result cache included) inside the host netns; creating and removing namespaces is not timed; each plugin set first did one untimed warm-up ADD+DEL")
	e.tbl.note("targets: ADD bridge+host-local ≤ 0.35×, ADD seed chain ≤ 0.30× and DEL seed chain ≤ 0.40× the fastest reference; DEL ≤ 1.2× the kernel's veth teardown, host-local flat within 1.1×, concurrent ADDs without failure or duplicate")
	e.tbl.note("PASS/MISS compares ours with the fastest of ref v1.9.1 and Debian 1.1.1 measured in this run (ours/fastest ref); a run with failures never passes")
	var buf bytes.Buffer
	e.tbl.write(&buf, header(o, time.Since(start), load0, loadAvg()))
	buf.Write(extra.Bytes())
	e.writeNode(&buf)
	stdout.Write(buf.Bytes())
	if o.out != "" {
		if err := os.WriteFile(o.out, buf.Bytes(), 0o644); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "bench: table written to %s\n", o.out)
	}
	return nil
}

// isolate keeps what the bench runs away from the machine's state: our
// plugins' locks and records go to a run directory under work
// (internal/rundir; exec'd plugins inherit the variable), and the D-Bus
// system bus is one that does not exist, so that no firewall plugin (ours
// or a reference's, left to pick its backend) finds a firewalld of the
// machine's and programs the machine's firewall.
func isolate(work string) {
	os.Setenv(rundir.Env, filepath.Join(work, "run"))
	os.Setenv("DBUS_SYSTEM_BUS_ADDRESS", "unix:path=/nonexistent/patchbay-bench-no-system-bus")
}

// loadAvg is the 1-minute load average: a busy machine makes every number
// noisier, so the header shows it.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) > 0 {
		return f[0]
	}
	return "?"
}

func header(o *options, took time.Duration, load0, load1 string) []string {
	kernel, _ := exec.Command("uname", "-r").Output()
	return []string{
		"# make bench: ours vs reference plugins",
		"",
		fmt.Sprintf("%s, kernel %s, %d CPUs, load average %s at start and %s at end; medians of %d runs per plugin set (interleaved), total %.0fs.",
			time.Now().Format("2006-01-02 15:04 MST"), strings.TrimSpace(string(kernel)), runtime.NumCPU(), load0, load1, o.n, took.Seconds()),
		fmt.Sprintf("ours: %s; ref v1.9.1: %s; Debian 1.1.1: %s; runtime: our runtime library for all three.", o.ours, o.ref, o.deb),
	}
}
