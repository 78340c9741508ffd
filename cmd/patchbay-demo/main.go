// Command patchbay-demo is `make demo`: it attaches two containers to the
// CNI spec's example network (bridge + host-local + tuning + portmap) with
// the patchbay CLI and our plugins, shows traffic between them and through a
// port mapping, and removes everything again. It runs in namespaces it
// creates (a demo "host" and two containers), never in the machine's own.
package main

import (
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/patchbay-cni/patchbay/internal/probe"
	"github.com/patchbay-cni/patchbay/internal/seed"
	"github.com/patchbay-cni/patchbay/spec"
)

type demo struct {
	bin, work, confDir, cacheDir string
	host                         string // demo host netns name
	failed                       bool
}

func main() {
	bin := flag.String("bin", "bin", "directory with patchbay and the plugin links")
	flag.Parse()
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "patchbay-demo: run as root (it creates network namespaces)")
		os.Exit(1)
	}
	abs, _ := filepath.Abs(*bin)
	d := &demo{bin: abs}
	code := d.run()
	if d.failed { // a deferred DEL or cleanup step may fail after run returns
		code = 1
	}
	if code == 0 {
		fmt.Println("\ndemo finished: every step passed and everything was removed")
	}
	os.Exit(code)
}

func suffix() string {
	b := make([]byte, 3)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func (d *demo) step(format string, a ...any) { fmt.Printf("\n== "+format+"\n", a...) }

// sh prints a command the way a user would type it, runs it, and returns stdout.
func (d *demo) sh(env []string, args ...string) (string, error) {
	shown := append(append([]string{}, env...), args...)
	fmt.Printf("$ %s\n", strings.Join(shown, " "))
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.Output()
	if ee, ok := err.(*exec.ExitError); ok {
		os.Stderr.Write(ee.Stderr)
	}
	return string(out), err
}

func (d *demo) run() int {
	var err error
	d.work, err = os.MkdirTemp("", "patchbay-demo-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(d.work)
	d.confDir = filepath.Join(d.work, "net.d")
	d.cacheDir = filepath.Join(d.work, "cache")
	os.MkdirAll(d.confDir, 0o755)
	conf := seed.Conflist(filepath.Join(d.work, "ipam"), filepath.Join(d.work, "tuning"))
	if err := os.WriteFile(filepath.Join(d.confDir, "10-dbnet.conflist"), []byte(conf), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}

	sfx := suffix()
	d.host = "pbdemo-host-" + sfx
	ctrs := []string{"pbdemo-c1-" + sfx, "pbdemo-c2-" + sfx}
	created := []string{}
	defer func() {
		d.step("cleanup: delete the namespaces")
		for i := len(created) - 1; i >= 0; i-- {
			if _, err := d.sh(nil, "ip", "netns", "del", created[i]); err != nil {
				d.failed = true
			}
		}
	}()
	d.step("create a demo host namespace and two container namespaces")
	for _, ns := range append([]string{d.host}, ctrs...) {
		if _, err := d.sh(nil, "ip", "netns", "add", ns); err != nil {
			return 1
		}
		created = append(created, ns)
	}
	if _, err := d.sh(nil, "ip", "-n", d.host, "link", "set", "lo", "up"); err != nil {
		return 1
	}
	fmt.Printf("network configuration %s:\n%s\n", filepath.Join(d.confDir, "10-dbnet.conflist"), conf)

	macs := []string{"0a:58:0a:01:00:66", "0a:58:0a:01:00:67"}
	ports := []int{8080, 8081}
	var ips []netAddr
	for i, c := range ctrs {
		d.step("attach %s through bridge + host-local + tuning + portmap", c)
		capArgs := fmt.Sprintf(`{"mac":%q,"portMappings":[{"hostPort":%d,"containerPort":80,"protocol":"tcp"}]}`, macs[i], ports[i])
		out, err := d.cli("add", c, capArgs)
		if err != nil {
			return d.fail("ADD %s: %v", c, err)
		}
		fmt.Print(out)
		defer func(c, capArgs string) {
			d.step("detach %s", c)
			if _, err := d.cli("del", c, capArgs); err != nil {
				d.fail("DEL %s: %v", c, err)
			}
		}(c, capArgs)
		r, err := spec.ParseResult([]byte(out), "")
		if err != nil || len(r.IPs) == 0 {
			return d.fail("ADD %s printed no usable result: %v", c, err)
		}
		ctrMac := ""
		for _, in := range r.Interfaces {
			if in.Sandbox != "" {
				ctrMac = in.Mac
			}
		}
		if ctrMac != macs[i] {
			return d.fail("container mac is %q, want %q (tuning's mac capability)", ctrMac, macs[i])
		}
		fmt.Printf("-> %s got %s, mac %s (set by tuning from CAP_ARGS)\n", c, r.IPs[0].Address, ctrMac)
		ips = append(ips, netAddr{ns: c, ip: r.IPs[0].Address.Addr().String()})

		d.step("CHECK %s", c)
		if _, err := d.cli("check", c, capArgs); err != nil {
			return d.fail("CHECK %s: %v", c, err)
		}
		fmt.Println("-> ok")
	}

	d.step("container-to-container traffic: %s -> %s:80", ips[0].ns, ips[1].ip)
	for _, a := range ips {
		stop, err := probe.Serve("/run/netns/"+a.ns, ":80", "hello from "+a.ns)
		if err != nil {
			return d.fail("listen in %s: %v", a.ns, err)
		}
		defer stop()
	}
	if err := d.expect(ips[0].ns, ips[1].ip+":80", "hello from "+ips[1].ns); err != nil {
		return d.fail("%v", err)
	}

	d.step("port mapping: host port %d -> %s:80", ports[0], ips[0].ns)
	if err := d.expect(d.host, "10.1.0.1:8080", "hello from "+ips[0].ns); err != nil {
		return d.fail("from the host: %v", err)
	}
	if err := d.expect(ips[1].ns, "10.1.0.1:8080", "hello from "+ips[0].ns); err != nil {
		return d.fail("from the other container: %v", err)
	}
	if err := d.expect(ips[0].ns, "10.1.0.1:8080", "hello from "+ips[0].ns); err != nil {
		return d.fail("hairpin from the container itself: %v", err)
	}

	d.step("cached attachments")
	if out, err := d.cli("cache", "", ""); err == nil {
		fmt.Print(out)
	}
	if d.failed {
		return 1
	}
	return 0
}

type netAddr struct{ ns, ip string }

func (d *demo) fail(format string, a ...any) int {
	fmt.Fprintf(os.Stderr, "DEMO FAILED: "+format+"\n", a...)
	d.failed = true
	return 1
}

// cli runs the patchbay CLI inside the demo host namespace.
func (d *demo) cli(verb, ctr, capArgs string) (string, error) {
	env := []string{"NETCONFPATH=" + d.confDir, "CNI_PATH=" + d.bin, "CNI_CACHE_DIR=" + d.cacheDir}
	args := []string{"ip", "netns", "exec", d.host, filepath.Join(d.bin, "patchbay"), verb}
	if verb == "cache" {
		return d.sh(env, args...)
	}
	if capArgs != "" {
		env = append(env, "CAP_ARGS="+capArgs)
	}
	return d.sh(env, append(args, seed.NetworkName, "/run/netns/"+ctr)...)
}

// expect connects from inside ns to addr and checks the greeting.
func (d *demo) expect(ns, addr, want string) error {
	fmt.Printf("$ ip netns exec %s <connect to %s>\n", ns, addr)
	got, err := probe.Greeting("/run/netns/"+ns, addr)
	if err != nil {
		return err
	}
	fmt.Printf("-> %q\n", got)
	if got != want {
		return fmt.Errorf("from %s to %s: got %q, want %q", ns, addr, got, want)
	}
	return nil
}
