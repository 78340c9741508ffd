package main

import (
	"bytes"
	"crypto/rand"
	"crypto/sha512"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/patchbay-cni/patchbay/internal/testutil"
)

// cli runs the built bin/patchbay against the reference plugins, inside a
// test host netns (via `ip netns exec`) when host is set.
type cli struct {
	t                          *testing.T
	host                       string
	confDir, cacheDir, dataDir string
	bridge                     string
	extraEnv                   []string
}

func newCLI(t *testing.T, withHost bool) *cli {
	testutil.RequireRoot(t)
	d := t.TempDir()
	b := make([]byte, 4)
	rand.Read(b)
	c := &cli{t: t, confDir: filepath.Join(d, "net.d"), cacheDir: filepath.Join(d, "cache"),
		dataDir: filepath.Join(d, "ipam"), bridge: "pbc" + hex.EncodeToString(b)}
	if err := os.MkdirAll(c.confDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if withHost {
		c.host, _ = testutil.NewNS(t, "clih")
	}
	return c
}

func (c *cli) write(name, data string) {
	c.t.Helper()
	if err := os.WriteFile(filepath.Join(c.confDir, name), []byte(data), 0o644); err != nil {
		c.t.Fatal(err)
	}
}

// run returns stdout, stderr and the exit status.
func (c *cli) run(env []string, args ...string) (string, string, int) {
	c.t.Helper()
	bin := filepath.Join(testutil.OurBin(c.t), "patchbay")
	var cmd *exec.Cmd
	if c.host != "" {
		cmd = exec.Command("ip", append([]string{"netns", "exec", c.host, bin}, args...)...)
	} else {
		cmd = exec.Command(bin, args...)
	}
	cmd.Env = append(os.Environ(), "NETCONFPATH="+c.confDir, "CNI_PATH="+testutil.RefBin(c.t), "CNI_CACHE_DIR="+c.cacheDir)
	cmd.Env = append(append(cmd.Env, c.extraEnv...), env...)
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return so.String(), se.String(), 0
	case errors.As(err, &ee):
		return so.String(), se.String(), ee.ExitCode()
	}
	c.t.Fatalf("run patchbay %v: %v", args, err)
	return "", "", -1
}

// ok runs and fails the test on a non-zero exit.
func (c *cli) ok(env []string, args ...string) string {
	c.t.Helper()
	out, errOut, rc := c.run(env, args...)
	if rc != 0 {
		c.t.Fatalf("patchbay %v: exit %d: %s", args, rc, errOut)
	}
	return out
}

func (c *cli) allocations() []string {
	return c.allocationsOf("clinet")
}

func (c *cli) allocationsOf(network string) []string {
	ents, _ := os.ReadDir(filepath.Join(c.dataDir, network))
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "10.") {
			data, _ := os.ReadFile(filepath.Join(c.dataDir, network, e.Name()))
			out = append(out, e.Name()+"="+strings.Fields(string(data))[0])
		}
	}
	return out
}

// cnitoolID is cnitool v1.3.1's container ID, computed independently here.
func cnitoolID(netnsPath string) string {
	h := sha512.New()
	h.Write([]byte(netnsPath))
	return "cnitool-" + hex.EncodeToString(h.Sum(nil)[:10])
}

func TestCLIAttachmentLifecycle(t *testing.T) {
	c := newCLI(t, true)
	ctr, ctrPath := testutil.NewNS(t, "clic")
	c.write("10-clinet.conflist", fmt.Sprintf(`{"cniVersion":"1.1.0","name":"clinet","plugins":[
	  {"type":"bridge","bridge":%q,"isGateway":true,"ipam":{"type":"host-local","dataDir":%q,"subnet":"10.251.7.0/24"}},
	  {"type":"tuning","capabilities":{"mac":true}}]}`, c.bridge, c.dataDir))
	env := []string{"CAP_ARGS={\"mac\":\"0a:58:0a:fb:07:09\"}", "CNI_ARGS=IgnoreUnknown=1;FOO=bar"}

	out := c.ok(env, "add", "clinet", ctrPath)
	var res struct {
		CNIVersion string `json:"cniVersion"`
		IPs        []struct {
			Address string `json:"address"`
		} `json:"ips"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || res.CNIVersion != "1.1.0" || len(res.IPs) != 1 {
		t.Fatalf("add output %q: %v", out, err)
	}
	ip := strings.Split(res.IPs[0].Address, "/")[0]
	if got, _ := testutil.InNS(t, ctr, "ip", "-o", "addr", "show", "dev", "eth0"); !strings.Contains(got, ip) {
		t.Errorf("container eth0: %s, want %s", got, ip)
	}
	if got, _ := testutil.InNS(t, ctr, "ip", "-o", "link", "show", "dev", "eth0"); !strings.Contains(got, "0a:58:0a:fb:07:09") {
		t.Errorf("CAP_ARGS mac not applied: %s", got)
	}
	id := cnitoolID(ctrPath)
	if got := c.allocations(); len(got) != 1 || got[0] != ip+"="+id {
		t.Errorf("host-local allocations %v, want %s held by %s (cnitool's container ID)", got, ip, id)
	}
	if out := c.ok(nil, "cache", "clinet"); !strings.Contains(out, id) || !strings.Contains(out, res.IPs[0].Address) || !strings.Contains(out, ctrPath) {
		t.Errorf("cache listing:\n%s", out)
	}
	c.ok(env, "check", "clinet", ctrPath)
	c.ok(nil, "status", "clinet", ctrPath)
	c.ok(nil, "status", "clinet")

	// gc without a netns keeps every cached attachment.
	c.ok(nil, "gc", "clinet")
	if got := c.allocations(); len(got) != 1 {
		t.Errorf("gc without netns released %v", got)
	}
	// gc with the container's netns collects it.
	c.ok(nil, "gc", "clinet", ctrPath)
	if got := c.allocations(); len(got) != 0 {
		t.Errorf("gc with netns left %v", got)
	}
	if got, err := testutil.InNS(t, ctr, "ip", "link", "show", "eth0"); err == nil {
		t.Errorf("eth0 survived gc: %s", got)
	}
	if out := c.ok(nil, "cache"); strings.Contains(out, id) {
		t.Errorf("cache after gc:\n%s", out)
	}

	// add, del, del again; CNI_CONTAINERID overrides the derived ID.
	envID := append(env, "CNI_CONTAINERID=explicit-id", "CNI_IFNAME=net1")
	c.ok(envID, "add", "clinet", ctrPath)
	if got := c.allocations(); len(got) != 1 || !strings.HasSuffix(got[0], "=explicit-id") {
		t.Errorf("allocations %v, want one held by explicit-id", got)
	}
	if got, err := testutil.InNS(t, ctr, "ip", "link", "show", "net1"); err != nil {
		t.Errorf("CNI_IFNAME ignored: %s", got)
	}
	c.ok(envID, "del", "clinet", ctrPath)
	c.ok(envID, "del", "clinet", ctrPath)
	if got := c.allocations(); len(got) != 0 {
		t.Errorf("allocations after del: %v", got)
	}
	if ents, _ := os.ReadDir(filepath.Join(c.cacheDir, "results")); len(ents) != 0 {
		t.Errorf("cache files left: %v", ents)
	}
	// check after del: unknown container (code 3).
	_, errOut, rc := c.run(envID, "check", "clinet", ctrPath)
	if rc != 1 || !strings.HasPrefix(lastLine(errOut), "error (code 3): ") {
		t.Errorf("check after del: exit %d, stderr %q", rc, errOut)
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

func TestCLIErrors(t *testing.T) {
	c := newCLI(t, true)
	_, ctrPath := testutil.NewNS(t, "clie")
	c.write("10-missing.conflist", `{"cniVersion":"1.1.0","name":"missing","plugins":[{"type":"nosuch"}]}`)
	c.write("20-noipam.conflist", fmt.Sprintf(`{"cniVersion":"1.1.0","name":"noipam","plugins":[
	  {"type":"bridge","bridge":%q,"ipam":{"type":"host-local","dataDir":%q}}]}`, c.bridge, c.dataDir))

	for _, tc := range []struct {
		name   string
		env    []string
		args   []string
		rc     int
		prefix string // of the last stderr line
	}{
		{"missing plugin", nil, []string{"add", "missing", ctrPath}, 1,
			fmt.Sprintf(`error (code 7): network "missing": plugin nosuch (ADD): failed to find plugin "nosuch" in path [%s]`, testutil.RefBin(t))},
		{"plugin error", nil, []string{"add", "noipam", ctrPath}, 1, `error (code `},
		{"unknown network", nil, []string{"del", "nonet", ctrPath}, 1, `error (code 7): no network "nonet" in `},
		{"bad CAP_ARGS", []string{"CAP_ARGS=[1"}, []string{"add", "missing", ctrPath}, 1, `error (code 4): CAP_ARGS is not valid JSON`},
		{"CAP_ARGS array", []string{"CAP_ARGS=[1]"}, []string{"add", "missing", ctrPath}, 1, `error (code 4): CAP_ARGS must be a JSON object, got an array: [1]`},
		{"CAP_ARGS null", []string{"CAP_ARGS=null"}, []string{"add", "missing", ctrPath}, 1, `error (code 4): CAP_ARGS must be a JSON object, got null`},
		{"bad CNI_ARGS", []string{"CNI_ARGS=novalue"}, []string{"add", "missing", ctrPath}, 1, `error (code 4): CNI_ARGS: invalid pair "novalue"`},
		{"bad ifname", []string{"CNI_IFNAME=this-is-way-too-long"}, []string{"add", "missing", ctrPath}, 1, `error (code 4): CNI_IFNAME`},
		{"missing args", nil, []string{"add", "missing"}, 2, "Run 'patchbay help'"},
		{"unknown command", nil, []string{"frobnicate"}, 2, "Run 'patchbay help'"},
		{"no command", nil, nil, 2, "Run 'patchbay help'"},
	} {
		_, errOut, rc := c.run(tc.env, tc.args...)
		if rc != tc.rc || !strings.HasPrefix(lastLine(errOut), tc.prefix) {
			t.Errorf("%s: exit %d, stderr %q; want exit %d and last line starting %q", tc.name, rc, errOut, tc.rc, tc.prefix)
		}
	}
	// The reference bridge's own error is reported with the plugin named.
	_, errOut, _ := c.run(nil, "add", "noipam", ctrPath)
	if !strings.Contains(lastLine(errOut), `network "noipam": plugin bridge (ADD): `) {
		t.Errorf("plugin error line %q", lastLine(errOut))
	}
	// A failed ADD leaves no cache entry.
	if ents, _ := os.ReadDir(filepath.Join(c.cacheDir, "results")); len(ents) != 0 {
		t.Errorf("cache after failed ADDs: %v", ents)
	}
}

func TestCLIListVersionHelp(t *testing.T) {
	c := newCLI(t, false)
	c.write("10-good.conflist", `{"cniVersion":"1.0.0","cniVersions":["1.1.0"],"name":"good","plugins":[{"type":"bridge"},{"type":"portmap"}]}`)
	c.write("20-broken.conflist", `{"cniVersion":"1.0.0","name":"broken","plugins":[{"type":"a/b"}]}`)
	c.write("30-good.conf", `{"cniVersion":"0.3.1","name":"good","type":"ptp"}`)
	c.write("40-legacy.json", `{"cniVersion":"0.4.0","name":"legacy","type":"ptp"}`)
	out := c.ok(nil, "list")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 5 {
		t.Fatalf("list output:\n%s", out)
	}
	for i, want := range [][]string{
		{"NAME", "VERSION", "PLUGINS", "FILE"},
		{"good", "1.1.0", "bridge,portmap", "10-good.conflist"},
		{"BROKEN:", `"a/b"`, "20-broken.conflist"},
		{"good", "0.3.1", "ptp", "30-good.conf", "shadowed"},
		{"legacy", "0.4.0", "ptp", "40-legacy.json"},
	} {
		for _, w := range want {
			if !strings.Contains(lines[i], w) {
				t.Errorf("list line %d %q lacks %q", i, lines[i], w)
			}
		}
	}
	if _, errOut, rc := c.run([]string{"NETCONFPATH=/nonexistent/patchbay"}, "list"); rc != 1 || !strings.HasPrefix(errOut, "error (code 5): ") {
		t.Errorf("list of a missing dir: exit %d, %q", rc, errOut)
	}
	if out := c.ok(nil, "version"); !strings.HasPrefix(out, "patchbay ") || !strings.Contains(out, "0.1.0, 0.2.0, 0.3.0, 0.3.1, 0.4.0, 1.0.0, 1.1.0") {
		t.Errorf("version: %q", out)
	}
	if out := c.ok(nil, "help"); !strings.Contains(out, "NETCONFPATH") || !strings.Contains(out, "error (code N): message") {
		t.Errorf("help: %q", out)
	}
	// A corrupt cache file is a warning in the cache listing, not a failure.
	if err := os.MkdirAll(filepath.Join(c.cacheDir, "results"), 0o700); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(c.cacheDir, "results", "good-x-eth0"), []byte("{"), 0o600)
	out, errOut, rc := c.run(nil, "cache")
	if rc != 0 || !strings.Contains(errOut, "good-x-eth0") || !strings.HasPrefix(out, "NETWORK") {
		t.Errorf("cache with a corrupt file: exit %d, stdout %q, stderr %q", rc, out, errOut)
	}
}

// cnitool runs the reference cnitool v1.3.1 in the host netns with libcni's
// fixed cache dir redirected to c.cacheDir (see testutil.Cnitool).
func (c *cli) cnitool(args ...string) {
	c.t.Helper()
	varlib := filepath.Dir(c.cacheDir) // holds "cache"; exposed as /var/lib
	if err := os.Symlink("cache", filepath.Join(varlib, "cni")); err != nil && !errors.Is(err, os.ErrExist) {
		c.t.Fatal(err)
	}
	env := []string{"NETCONFPATH=" + c.confDir, "CNI_PATH=" + testutil.RefBin(c.t)}
	if out, err := testutil.Cnitool(c.t, c.host, varlib, env, args...); err != nil {
		c.t.Fatalf("cnitool %v: %v: %s", args, err, out)
	}
}

func TestCLICnitoolInterop(t *testing.T) {
	c := newCLI(t, true)
	_, ctrPath := testutil.NewNS(t, "clii")
	c.write("10-clinet.conflist", fmt.Sprintf(`{"cniVersion":"1.1.0","name":"clinet","plugins":[
	  {"type":"bridge","bridge":%q,"ipam":{"type":"host-local","dataDir":%q,"subnet":"10.251.8.0/24"}}]}`, c.bridge, c.dataDir))
	results := filepath.Join(c.cacheDir, "results")
	count := func() int { ents, _ := os.ReadDir(results); return len(ents) }

	// patchbay ADD; cnitool CHECK and DEL read our cache entry.
	c.ok(nil, "add", "clinet", ctrPath)
	c.cnitool("check", "clinet", ctrPath)
	c.cnitool("del", "clinet", ctrPath)
	if got := c.allocations(); len(got) != 0 || count() != 0 {
		t.Errorf("after cnitool del of a patchbay add: allocations %v, %d cache files", got, count())
	}
	// cnitool ADD; patchbay CHECK and DEL read libcni's entry (same container ID).
	c.cnitool("add", "clinet", ctrPath)
	if count() != 1 {
		t.Fatalf("cnitool wrote %d cache files under the redirected dir", count())
	}
	c.ok(nil, "check", "clinet", ctrPath)
	c.ok(nil, "del", "clinet", ctrPath)
	if got := c.allocations(); len(got) != 0 || count() != 0 {
		t.Errorf("after patchbay del of a cnitool add: allocations %v, %d cache files", got, count())
	}
}

// cnitoolEnv is cnitool with extra environment (later entries win).
func (c *cli) cnitoolEnv(extra []string, args ...string) {
	c.t.Helper()
	varlib := filepath.Dir(c.cacheDir)
	if err := os.MkdirAll(c.cacheDir, 0o700); err != nil {
		c.t.Fatal(err)
	}
	if err := os.Symlink("cache", filepath.Join(varlib, "cni")); err != nil && !errors.Is(err, os.ErrExist) {
		c.t.Fatal(err)
	}
	env := append([]string{"NETCONFPATH=" + c.confDir, "CNI_PATH=" + testutil.RefBin(c.t)}, extra...)
	if out, err := testutil.Cnitool(c.t, c.host, varlib, env, args...); err != nil {
		c.t.Fatalf("cnitool %v: %v: %s", args, err, out)
	}
}

// The cache's cniArgs and capabilityArgs cross over both ways: GC of an
// attachment the other tool added sends its DEL with the CNI_ARGS and
// runtimeConfig of the ADD. A recording plugin shows exactly what DEL got.
func TestCLICnitoolGCCacheArgs(t *testing.T) {
	c := newCLI(t, true)
	_, ctrPath := testutil.NewNS(t, "cliga")
	bin, log := recorder(t)
	c.write("10-ga.conflist", `{"cniVersion":"1.1.0","name":"ga","plugins":[{"type":"rec","capabilities":{"mac":true}}]}`)
	env := []string{"CNI_PATH=" + bin, "CNI_ARGS=K8S_POD_NAME=p1", `CAP_ARGS={"mac":"0a:58:00:00:00:01"}`}
	checkDel := func(who string) {
		t.Helper()
		data, err := os.ReadFile(filepath.Join(log, "DEL"))
		if err != nil {
			t.Fatalf("%s: no DEL: %v", who, err)
		}
		args, stdin, _ := strings.Cut(string(data), "\n")
		var req map[string]any
		json.Unmarshal([]byte(stdin), &req)
		rc, _ := req["runtimeConfig"].(map[string]any)
		pr, _ := req["prevResult"].(map[string]any)
		if args != "K8S_POD_NAME=p1" || rc["mac"] != "0a:58:00:00:00:01" || pr == nil {
			t.Errorf("%s: DEL got CNI_ARGS %q, stdin %s", who, args, stdin)
		}
		os.Remove(filepath.Join(log, "DEL"))
		if ents, _ := os.ReadDir(filepath.Join(c.cacheDir, "results")); len(ents) != 0 {
			t.Errorf("%s: cache entry left after GC", who)
		}
	}
	// cnitool ADD, patchbay GC (of that container).
	c.cnitoolEnv(env, "add", "ga", ctrPath)
	c.ok([]string{"CNI_PATH=" + bin}, "gc", "ga", ctrPath)
	checkDel("patchbay gc of a cnitool add")
	// patchbay ADD, cnitool GC (every attachment is stale to cnitool).
	c.ok(env, "add", "ga", ctrPath)
	c.cnitoolEnv([]string{"CNI_PATH=" + bin}, "gc", "ga", ctrPath)
	checkDel("cnitool gc of a patchbay add")
}

// recorder installs a plugin "rec" that writes CNI_ARGS and its stdin to
// <log>/<verb> and answers ADD with a fixed result; it returns the plugin
// directory and the log directory.
func recorder(t *testing.T) (bin, log string) {
	bin, log = t.TempDir(), t.TempDir()
	rec := fmt.Sprintf(`#!/bin/sh
stdin=$(cat)
[ "$CNI_COMMAND" = VERSION ] && { echo '{"cniVersion":"1.1.0","supportedVersions":["1.1.0"]}'; exit 0; }
printf '%%s\n%%s\n' "$CNI_ARGS" "$stdin" > %q/"$CNI_COMMAND"
[ "$CNI_COMMAND" = ADD ] && echo '{"cniVersion":"1.1.0","ips":[{"address":"10.251.9.2/24"}]}'
exit 0
`, log)
	if err := os.WriteFile(filepath.Join(bin, "rec"), []byte(rec), 0o755); err != nil {
		t.Fatal(err)
	}
	return bin, log
}

// del after the network's file was removed (or broke) tears down with the
// configuration cached at ADD, with a warning; without a cache entry it is
// still an error.
func TestCLIDelWithCachedConfig(t *testing.T) {
	c := newCLI(t, true)
	bin, log := recorder(t)
	env := []string{"CNI_PATH=" + bin}
	c.write("10-gone.conflist", `{"cniVersion":"1.1.0","name":"gone","plugins":[{"type":"rec","custom":"kept"}]}`)
	c.ok(env, "add", "gone", "/run/netns/cli-gone")
	if err := os.Remove(filepath.Join(c.confDir, "10-gone.conflist")); err != nil {
		t.Fatal(err)
	}
	c.write("20-broken.conflist", `{"name":"gone","plugins":[`)
	_, errOut, rc := c.run(env, "del", "gone", "/run/netns/cli-gone")
	if rc != 0 || !strings.Contains(errOut, "configuration cached at ADD") {
		t.Fatalf("del: exit %d, stderr %q", rc, errOut)
	}
	data, err := os.ReadFile(filepath.Join(log, "DEL"))
	if err != nil || !strings.Contains(string(data), `"custom":"kept"`) || !strings.Contains(string(data), `"prevResult"`) {
		t.Errorf("DEL stdin %q (%v)", data, err)
	}
	if ents, _ := os.ReadDir(filepath.Join(c.cacheDir, "results")); len(ents) != 0 {
		t.Errorf("cache entry left: %v", ents)
	}
	// Nothing cached any more: the load error stands.
	if _, errOut, rc := c.run(env, "del", "gone", "/run/netns/cli-gone"); rc != 1 || !strings.Contains(errOut, "20-broken.conflist") {
		t.Errorf("second del: exit %d, stderr %q", rc, errOut)
	}
}
