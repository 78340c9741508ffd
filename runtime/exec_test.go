package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/patchbay-cni/patchbay/spec"
)

var ctx = context.Background()

func mustList(t *testing.T, s string) *spec.ConfList {
	t.Helper()
	l, err := spec.ParseConfList([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func code(err error) uint {
	if ce := spec.AsError(err, 0); ce != nil {
		return ce.Code
	}
	return 0
}

const resA = `{"cniVersion":"1.0.0","interfaces":[{"name":"eth0","sandbox":"/x"}],"ips":[{"interface":0,"address":"10.99.0.2/24"}]}`
const resB = `{"cniVersion":"1.0.0","interfaces":[{"name":"eth0","sandbox":"/x"}],"ips":[{"interface":0,"address":"10.99.0.3/24"}]}`

func prevIP(t *testing.T, c call) string {
	t.Helper()
	pr, ok := c.Stdin["prevResult"].(map[string]any)
	if !ok {
		return ""
	}
	ips := pr["ips"].([]any)
	return ips[0].(map[string]any)["address"].(string)
}

func TestChainAddCheckDel(t *testing.T) {
	e := newFakeEnv(t)
	e.plugin(t, "fa", fake{result: resA})
	e.plugin(t, "fb", fake{result: resB})
	// cniVersions picks the highest we support: 1.0.0 ("9.9.9" is unknown).
	l := mustList(t, `{"cniVersion":"0.4.0","cniVersions":["1.0.0","9.9.9"],"name":"chain","plugins":[
		{"type":"fa","custom":{"deep":[1,2]},"capabilities":{"portMappings":true,"mac":false,"bandwidth":true}},
		{"type":"fb","runtimeConfig":{"stale":1},"cni.dev/x":1}]}`)
	c := e.cni()
	rt := &RuntimeConf{ContainerID: "ctr1", NetNS: "/run/netns/x", IfName: "eth0",
		Args: [][2]string{{"K8S_POD_NAME", "p"}, {"IgnoreUnknown", "1"}},
		CapabilityArgs: map[string]any{
			"portMappings": []any{map[string]any{"hostPort": 8080.0, "containerPort": 80.0, "protocol": "tcp"}},
			"mac":          "0a:58:00:00:00:01", // declared false: never passed
			"ips":          []any{"10.0.0.1"},   // not declared: never passed
		}}
	res, err := c.AddNetworkList(ctx, l, rt)
	if err != nil {
		t.Fatal(err)
	}
	if res.CNIVersion != "1.0.0" || res.IPs[0].Address.String() != "10.99.0.3/24" {
		t.Errorf("ADD result %s, want fb's in 1.0.0", res)
	}
	cs := e.calls(t)
	if seq(cs) != "fa:ADD fb:ADD" {
		t.Fatalf("calls %s", seq(cs))
	}
	// Request derivation.
	a, b := cs[0], cs[1]
	if a.Stdin["name"] != "chain" || a.Stdin["cniVersion"] != "1.0.0" || b.Stdin["cniVersion"] != "1.0.0" {
		t.Errorf("name/cniVersion not injected: %s", a.StdinRaw)
	}
	if _, ok := a.Stdin["prevResult"]; ok {
		t.Errorf("first plugin got a prevResult: %s", a.StdinRaw)
	}
	if got := prevIP(t, b); got != "10.99.0.2/24" {
		t.Errorf("second plugin prevResult address %q, want fa's", got)
	}
	if _, ok := a.Stdin["capabilities"]; ok {
		t.Errorf("capabilities passed to the plugin: %s", a.StdinRaw)
	}
	wantRC := map[string]any{"portMappings": rt.CapabilityArgs["portMappings"]}
	if !reflect.DeepEqual(a.Stdin["runtimeConfig"], wantRC) {
		t.Errorf("runtimeConfig %v, want only portMappings (declared and supplied)", a.Stdin["runtimeConfig"])
	}
	if _, ok := b.Stdin["runtimeConfig"]; ok {
		t.Errorf("plugin without capabilities got runtimeConfig: %s", b.StdinRaw)
	}
	if _, ok := b.Stdin["cni.dev/x"]; ok {
		t.Errorf("cni.dev/ key passed through: %s", b.StdinRaw)
	}
	if !reflect.DeepEqual(a.Stdin["custom"], map[string]any{"deep": []any{1.0, 2.0}}) {
		t.Errorf("plugin-specific key altered: %s", a.StdinRaw)
	}
	wantEnv := map[string]string{"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "ctr1", "CNI_NETNS": "/run/netns/x",
		"CNI_IFNAME": "eth0", "CNI_ARGS": "K8S_POD_NAME=p;IgnoreUnknown=1", "CNI_PATH": e.bin}
	if !reflect.DeepEqual(a.Env, wantEnv) {
		t.Errorf("env %v\nwant %v", a.Env, wantEnv)
	}

	// The cache, in libcni's layout.
	file := filepath.Join(e.cache, "results", "chain-ctr1-eth0")
	st, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("cache file mode %v", st.Mode())
	}
	if dst, _ := os.Stat(filepath.Dir(file)); dst.Mode().Perm() != 0o700 {
		t.Errorf("cache dir mode %v", dst.Mode())
	}
	var entry map[string]any
	data, _ := os.ReadFile(file)
	if err := json.Unmarshal(data, &entry); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]any{"kind": "cniCacheV1", "containerId": "ctr1", "ifName": "eth0", "networkName": "chain", "netns": "/run/netns/x"} {
		if entry[k] != want {
			t.Errorf("cache %s = %v, want %v", k, entry[k], want)
		}
	}
	var ce cacheEntry
	json.Unmarshal(data, &ce)
	// The config is the file's, marked complete (see selfContained).
	var cfg, orig map[string]any
	json.Unmarshal(ce.Config, &cfg)
	json.Unmarshal(l.Bytes, &orig)
	orig["loadOnlyInlinedPlugins"] = true
	if !reflect.DeepEqual(cfg, orig) || !reflect.DeepEqual(ce.CNIArgs, rt.Args) || !reflect.DeepEqual(ce.CapabilityArgs, rt.CapabilityArgs) {
		t.Errorf("cache config/args/capabilityArgs differ: %s", data)
	}
	if r := entry["result"].(map[string]any); r["cniVersion"] != "1.0.0" {
		t.Errorf("cached result %v", r)
	}

	// CHECK: forward order, the final ADD result as prevResult.
	e.reset(t)
	if err := c.CheckNetworkList(ctx, l, rt); err != nil {
		t.Fatal(err)
	}
	cs = e.calls(t)
	if seq(cs) != "fa:CHECK fb:CHECK" || prevIP(t, cs[0]) != "10.99.0.3/24" || prevIP(t, cs[1]) != "10.99.0.3/24" {
		t.Errorf("CHECK calls %s, prevResults %q %q", seq(cs), prevIP(t, cs[0]), prevIP(t, cs[1]))
	}

	// DEL: reverse order, final ADD result, cache entry removed.
	e.reset(t)
	if err := c.DelNetworkList(ctx, l, rt); err != nil {
		t.Fatal(err)
	}
	cs = e.calls(t)
	if seq(cs) != "fb:DEL fa:DEL" || prevIP(t, cs[0]) != "10.99.0.3/24" || prevIP(t, cs[1]) != "10.99.0.3/24" {
		t.Errorf("DEL calls %s, prevResults %q %q", seq(cs), prevIP(t, cs[0]), prevIP(t, cs[1]))
	}
	if cs[0].Env["CNI_COMMAND"] != "DEL" || cs[0].Stdin["runtimeConfig"] != nil || cs[1].Stdin["runtimeConfig"] == nil {
		t.Errorf("DEL env/runtimeConfig wrong: %v %s", cs[0].Env, cs[1].StdinRaw)
	}
	if _, err := os.Stat(file); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("cache file still there after DEL: %v", err)
	}

	// DEL again (never added now): plugins run without prevResult, success.
	e.reset(t)
	if err := c.DelNetworkList(ctx, l, rt); err != nil {
		t.Fatal(err)
	}
	cs = e.calls(t)
	if seq(cs) != "fb:DEL fa:DEL" || prevIP(t, cs[0]) != "" {
		t.Errorf("second DEL calls %s, prevResult %q", seq(cs), prevIP(t, cs[0]))
	}

	// CHECK after DEL: unknown container, code 3, nothing run.
	e.reset(t)
	err = c.CheckNetworkList(ctx, l, rt)
	if code(err) != spec.ErrUnknownContainer || len(e.calls(t)) != 0 {
		t.Errorf("CHECK without cache: %v (code %d), %d calls", err, code(err), len(e.calls(t)))
	}
}

func TestCheckRules(t *testing.T) {
	e := newFakeEnv(t)
	e.plugin(t, "fa", fake{result: resA})
	c := e.cni()
	rt := &RuntimeConf{ContainerID: "c", NetNS: "/x", IfName: "eth0"}
	disabled := mustList(t, `{"cniVersion":"1.0.0","name":"n","disableCheck":true,"plugins":[{"type":"fa"}]}`)
	if err := c.CheckNetworkList(ctx, disabled, rt); err != nil || len(e.calls(t)) != 0 {
		t.Errorf("disableCheck: %v, %d calls", err, len(e.calls(t)))
	}
	old := mustList(t, `{"cniVersion":"0.3.1","name":"n","plugins":[{"type":"fa"}]}`)
	if _, err := c.AddNetworkList(ctx, old, rt); err != nil {
		t.Fatal(err)
	}
	e.reset(t)
	err := c.CheckNetworkList(ctx, old, rt)
	if code(err) != spec.ErrIncompatibleVersion || len(e.calls(t)) != 0 {
		t.Errorf("CHECK on 0.3.1: %v (code %d), %d calls", err, code(err), len(e.calls(t)))
	}
	// Before 0.4.0 DEL gets no prevResult even though a result is cached.
	if err := c.DelNetworkList(ctx, old, rt); err != nil {
		t.Fatal(err)
	}
	if cs := e.calls(t); seq(cs) != "fa:DEL" || cs[0].Stdin["prevResult"] != nil || cs[0].Stdin["cniVersion"] != "0.3.1" {
		t.Errorf("0.3.1 DEL: %s %s", seq(cs), cs[0].StdinRaw)
	}
}

func TestValidation(t *testing.T) {
	e := newFakeEnv(t)
	e.plugin(t, "fa", fake{result: resA})
	c := e.cni()
	l := mustList(t, `{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"fa"}]}`)
	for _, rt := range []*RuntimeConf{
		{ContainerID: "", NetNS: "/x", IfName: "eth0"},
		{ContainerID: "-bad", NetNS: "/x", IfName: "eth0"},
		{ContainerID: "c", NetNS: "/x", IfName: "this-name-is-too-long"},
		{ContainerID: "c", NetNS: "/x", IfName: "a/b"},
		{ContainerID: "c", NetNS: "", IfName: "eth0"},
		{ContainerID: "c", NetNS: "/x", IfName: "eth0", Args: [][2]string{{"A;B", "1"}}},
	} {
		if _, err := c.AddNetworkList(ctx, l, rt); code(err) != spec.ErrInvalidEnvironment {
			t.Errorf("%+v: %v (code %d), want code 4", rt, err, code(err))
		}
	}
	if n := len(e.calls(t)); n != 0 {
		t.Errorf("%d plugin calls despite invalid parameters", n)
	}
	// A type with a path separator never reaches exec (the loader refuses
	// it too; this list is built by hand as a library caller could).
	evil := &spec.ConfList{CNIVersion: "1.0.0", Name: "n", Plugins: []*spec.PluginConf{{
		Network: spec.NetConf{Type: "../bin/fa"}, Bytes: []byte(`{"type":"../bin/fa"}`)}}}
	_, err := c.AddNetworkList(ctx, evil, &RuntimeConf{ContainerID: "c", NetNS: "/x", IfName: "eth0"})
	if code(err) != spec.ErrInvalidNetworkConfig || len(e.calls(t)) != 0 {
		t.Errorf("type with '/': %v (code %d)", err, code(err))
	}
	if _, err := spec.ParseConfList([]byte(`{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"/bin/sh"}]}`)); code(err) != spec.ErrInvalidNetworkConfig {
		t.Errorf("loader accepted type /bin/sh: %v", err)
	}
}

func TestPluginErrorKeepsCode(t *testing.T) {
	e := newFakeEnv(t)
	e.plugin(t, "fa", fake{result: resA})
	e.plugin(t, "fb", fake{errOn: "ADD", errOut: `{"cniVersion":"1.0.0","code":117,"msg":"no room","details":"pool full"}`})
	e.plugin(t, "crash", fake{errOn: "*", errOut: "not json"})
	c := e.cni()
	rt := &RuntimeConf{ContainerID: "c", NetNS: "/x", IfName: "eth0"}
	l := mustList(t, `{"cniVersion":"1.0.0","name":"dbnet","plugins":[{"type":"fa"},{"type":"fb"}]}`)
	_, err := c.AddNetworkList(ctx, l, rt)
	var pe *PluginError
	if !errors.As(err, &pe) || pe.Plugin != "fb" || code(err) != 117 {
		t.Fatalf("got %v (code %d), want a PluginError of fb with code 117", err, code(err))
	}
	if want := `network "dbnet": plugin fb (ADD): no room; pool full`; err.Error() != want {
		t.Errorf("message %q, want %q", err.Error(), want)
	}
	if _, err := os.Stat(filepath.Join(e.cache, "results", "dbnet-c-eth0")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("failed ADD left a cache entry")
	}
	l2 := mustList(t, `{"cniVersion":"1.0.0","name":"dbnet","plugins":[{"type":"crash"}]}`)
	err = c.DelNetworkList(ctx, l2, rt)
	if code(err) != spec.ErrInternal || !strings.Contains(err.Error(), "not json") {
		t.Errorf("unstructured failure: %v (code %d)", err, code(err))
	}
	l3 := mustList(t, `{"cniVersion":"1.0.0","name":"dbnet","plugins":[{"type":"missing"}]}`)
	_, err = c.AddNetworkList(ctx, l3, rt)
	if code(err) != spec.ErrInvalidNetworkConfig || !strings.Contains(err.Error(), `plugin missing (ADD): failed to find plugin "missing"`) {
		t.Errorf("missing plugin: %v (code %d)", err, code(err))
	}
}

func TestTimeout(t *testing.T) {
	e := newFakeEnv(t)
	e.plugin(t, "slow", fake{sleep: "10"})
	c := e.cni()
	c.Timeout = 200 * time.Millisecond
	l := mustList(t, `{"cniVersion":"1.1.0","name":"n","plugins":[{"type":"slow"}]}`)
	start := time.Now()
	err := c.StatusNetworkList(ctx, l)
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("timeout took %v", d)
	}
	if code(err) != spec.ErrTryAgainLater || !strings.Contains(err.Error(), `network "n": plugin slow (STATUS)`) {
		t.Errorf("got %v (code %d), want code 11 naming network and plugin", err, code(err))
	}
}

func TestStatus(t *testing.T) {
	e := newFakeEnv(t)
	e.plugin(t, "fa", fake{})
	e.plugin(t, "fb", fake{errOn: "STATUS", errOut: `{"code":50,"msg":"daemon down"}`})
	e.plugin(t, "fc", fake{})
	c := e.cni()
	// Environment of a runtime that had these set must not leak into STATUS.
	t.Setenv("CNI_CONTAINERID", "leak")
	if err := c.StatusNetworkList(ctx, mustList(t, `{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"fb"}]}`)); err != nil || len(e.calls(t)) != 0 {
		t.Errorf("STATUS on 1.0.0: %v, %d calls", err, len(e.calls(t)))
	}
	err := c.StatusNetworkList(ctx, mustList(t, `{"cniVersion":"1.1.0","name":"n","plugins":[{"type":"fa"},{"type":"fb"},{"type":"fc"}]}`))
	if code(err) != 50 || !strings.Contains(err.Error(), `network "n": plugin fb (STATUS): daemon down`) {
		t.Errorf("got %v (code %d)", err, code(err))
	}
	cs := e.calls(t)
	if seq(cs) != "fa:STATUS fb:STATUS" {
		t.Errorf("calls %s: want a stop at the first failure", seq(cs))
	}
	if want := map[string]string{"CNI_COMMAND": "STATUS", "CNI_PATH": e.bin}; !reflect.DeepEqual(cs[0].Env, want) {
		t.Errorf("STATUS env %v, want %v", cs[0].Env, want)
	}
	if cs[0].Stdin["name"] != "n" || cs[0].Stdin["cniVersion"] != "1.1.0" {
		t.Errorf("STATUS stdin %s", cs[0].StdinRaw)
	}
}

func TestGC(t *testing.T) {
	e := newFakeEnv(t)
	e.plugin(t, "fa", fake{result: resA, errOn: "GC", errOut: `{"code":5,"msg":"gc trouble"}`})
	e.plugin(t, "fb", fake{result: resB})
	c := e.cni()
	// The list was added with plugin "fa" only; GC later runs with a list
	// that gained "fb": stale DELs must use the cached configuration.
	added := mustList(t, `{"cniVersion":"1.1.0","name":"gcnet","plugins":[{"type":"fa","capabilities":{"mac":true}}]}`)
	now := mustList(t, `{"cniVersion":"1.1.0","name":"gcnet","plugins":[{"type":"fa"},{"type":"fb"}]}`)
	other := mustList(t, `{"cniVersion":"1.1.0","name":"other","plugins":[{"type":"fb"}]}`)
	keep := &RuntimeConf{ContainerID: "keep", NetNS: "/run/netns/keep", IfName: "eth0"}
	stale := &RuntimeConf{ContainerID: "stale", NetNS: "/run/netns/stale", IfName: "net1",
		Args: [][2]string{{"A", "1"}}, CapabilityArgs: map[string]any{"mac": "0a:58:00:00:00:09"}}
	for _, rt := range []*RuntimeConf{keep, stale} {
		if _, err := c.AddNetworkList(ctx, added, rt); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.AddNetworkList(ctx, other, stale); err != nil {
		t.Fatal(err)
	}
	// A corrupt file attributed to the network is reported, GC goes on.
	writeFile(t, filepath.Join(e.cache, "results", "gcnet-junk-eth0"), "{")
	e.reset(t)

	valid := []spec.Attachment{{ContainerID: "keep", IfName: "eth0"}}
	err := c.GCNetworkList(ctx, now, valid)
	if err == nil || !strings.Contains(err.Error(), "gc trouble") || !strings.Contains(err.Error(), "gcnet-junk-eth0") {
		t.Errorf("GC error %v: want fa's GC failure and the corrupt file, joined", err)
	}
	cs := e.calls(t)
	if seq(cs) != "fa:DEL fa:GC fb:GC" {
		t.Fatalf("calls %s, want the stale DEL (cached config: fa only) then GC of every plugin", seq(cs))
	}
	del := cs[0]
	if del.Env["CNI_CONTAINERID"] != "stale" || del.Env["CNI_NETNS"] != "/run/netns/stale" || del.Env["CNI_IFNAME"] != "net1" || del.Env["CNI_ARGS"] != "A=1" {
		t.Errorf("stale DEL env %v", del.Env)
	}
	if !reflect.DeepEqual(del.Stdin["runtimeConfig"], map[string]any{"mac": "0a:58:00:00:00:09"}) || prevIP(t, del) != "10.99.0.2/24" {
		t.Errorf("stale DEL stdin %s", del.StdinRaw)
	}
	wantValid := []any{map[string]any{"containerID": "keep", "ifname": "eth0"}}
	for _, g := range cs[1:] {
		if !reflect.DeepEqual(g.Stdin[spec.KeyValidAttachments], wantValid) || !reflect.DeepEqual(g.Stdin[spec.KeyOldAttachments], wantValid) {
			t.Errorf("GC stdin %s", g.StdinRaw)
		}
		if _, ok := g.Env["CNI_CONTAINERID"]; ok {
			t.Errorf("GC env has attachment variables: %v", g.Env)
		}
	}
	atts, _ := c.GetCachedAttachments("", "")
	var left []string
	for _, a := range atts {
		left = append(left, a.Network+"/"+a.ContainerID)
	}
	if strings.Join(left, " ") != "gcnet/keep other/stale" {
		t.Errorf("cache after GC: %v", left)
	}

	// Empty valid list: key present as [], every cached attachment DEL'd.
	os.Remove(filepath.Join(e.cache, "results", "gcnet-junk-eth0"))
	e.reset(t)
	e.plugin(t, "fa", fake{result: resA})
	if err := c.GCNetworkList(ctx, now, nil); err != nil {
		t.Fatal(err)
	}
	cs = e.calls(t)
	if seq(cs) != "fa:DEL fa:GC fb:GC" || !reflect.DeepEqual(cs[1].Stdin[spec.KeyValidAttachments], []any{}) {
		t.Errorf("GC(nil): %s %s", seq(cs), cs[1].StdinRaw)
	}

	// disableGC: nothing at all. 1.0.0: stale DELs but no plugin GC.
	if _, err := c.AddNetworkList(ctx, added, stale); err != nil {
		t.Fatal(err)
	}
	e.reset(t)
	off := mustList(t, `{"cniVersion":"1.1.0","name":"gcnet","disableGC":true,"plugins":[{"type":"fa"}]}`)
	if err := c.GCNetworkList(ctx, off, nil); err != nil || len(e.calls(t)) != 0 {
		t.Errorf("disableGC: %v, calls %s", err, seq(e.calls(t)))
	}
	v100 := mustList(t, `{"cniVersion":"1.0.0","name":"gcnet","plugins":[{"type":"fa"},{"type":"fb"}]}`)
	if err := c.GCNetworkList(ctx, v100, nil); err != nil {
		t.Fatal(err)
	}
	if cs := e.calls(t); seq(cs) != "fa:DEL" {
		t.Errorf("1.0.0 GC calls %s, want only the stale DEL", seq(cs))
	}
}

func TestCorruptCache(t *testing.T) {
	e := newFakeEnv(t)
	e.plugin(t, "fa", fake{result: resA})
	c := e.cni()
	l := mustList(t, `{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"fa"}]}`)
	rt := &RuntimeConf{ContainerID: "c", NetNS: "/x", IfName: "eth0"}
	file := filepath.Join(e.cache, "results", "n-c-eth0")
	for _, junk := range []string{"{", `{"kind":"other"}`, `{"kind":"cniCacheV1","containerId":"c","ifName":"eth0","networkName":"n","result":{"cniVersion":"7.0.0"}}`} {
		writeFile(t, file, junk)
		_, err := c.GetCachedResult(l, rt)
		var ce *CacheError
		if !errors.As(err, &ce) || ce.File != file {
			t.Errorf("%s: GetCachedResult %v, want a CacheError naming the file", junk, err)
		}
		if err := c.CheckNetworkList(ctx, l, rt); err == nil || !strings.Contains(err.Error(), file) {
			t.Errorf("%s: CHECK %v", junk, err)
		}
		if _, err := c.GetCachedAttachments("n", ""); !errors.As(err, &ce) {
			t.Errorf("%s: GetCachedAttachments %v", junk, err)
		}
		e.reset(t)
		if err := c.DelNetworkList(ctx, l, rt); err != nil {
			t.Errorf("%s: DEL %v", junk, err)
		}
		if cs := e.calls(t); seq(cs) != "fa:DEL" || cs[0].Stdin["prevResult"] != nil {
			t.Errorf("%s: DEL calls %s", junk, seq(cs))
		}
		if _, err := os.Stat(file); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: corrupt cache file kept after a successful DEL", junk)
		}
	}
}

func TestCachedResultConverted(t *testing.T) {
	e := newFakeEnv(t)
	e.plugin(t, "fa", fake{result: `{"cniVersion":"0.2.0","ip4":{"ip":"10.99.0.2/24","gateway":"10.99.0.1"}}`})
	c := e.cni()
	l := mustList(t, `{"cniVersion":"0.2.0","name":"old","plugins":[{"type":"fa"}]}`)
	rt := &RuntimeConf{ContainerID: "c", NetNS: "/x", IfName: "eth0"}
	res, err := c.AddNetworkList(ctx, l, rt)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := res.Encode("")
	if !strings.Contains(string(out), `"ip4"`) {
		t.Errorf("0.2.0 ADD result %s", out)
	}
	// The same attachment read back through a newer list comes out in its version.
	newer := mustList(t, `{"cniVersion":"1.0.0","name":"old","plugins":[{"type":"fa"}]}`)
	r, err := c.GetCachedResult(newer, rt)
	if err != nil || r == nil || r.CNIVersion != "1.0.0" || r.IPs[0].Address.String() != "10.99.0.2/24" {
		t.Errorf("cached result via 1.0.0 list: %v %v", r, err)
	}
}

// libcni caches the conflist file's bytes as they are, without the plugins
// it aggregated from <dir>/<network>/. A stale DEL from GC must still reach
// those plugins (libcni's own GC uses the current list for that reason).
func TestGCLibcniEntryWithAggregatedPlugins(t *testing.T) {
	e := newFakeEnv(t)
	e.plugin(t, "fa", fake{result: resA})
	e.plugin(t, "fb", fake{result: resB})
	dir := t.TempDir()
	file := `{"cniVersion":"1.1.0","name":"agg","plugins":[{"type":"fa"}]}`
	writeFile(t, filepath.Join(dir, "agg.conflist"), file)
	writeFile(t, filepath.Join(dir, "agg", "10-fb.conf"), `{"type":"fb"}`)
	l, err := LoadNetwork(dir, "agg")
	if err != nil {
		t.Fatal(err)
	}
	// What libcni v1.3.1's cacheAdd writes for (stale, eth0) after ADD.
	entry := map[string]any{"kind": "cniCacheV1", "containerId": "stale", "config": []byte(file),
		"ifName": "eth0", "networkName": "agg", "netns": "/run/netns/s",
		"cniArgs": [][2]string{{"K8S_POD_NAME", "p"}}, "capabilityArgs": map[string]any{"mac": "0a:58:00:00:00:01"},
		"result": json.RawMessage(resB)}
	writeFile(t, filepath.Join(e.cache, "results", "agg-stale-eth0"), mustJSON(t, entry))
	if err := e.cni().GCNetworkList(ctx, l, nil); err != nil {
		t.Fatal(err)
	}
	cs := e.calls(t)
	if seq(cs) != "fb:DEL fa:DEL fa:GC fb:GC" {
		t.Fatalf("calls %s, want the stale DEL through both plugins, then GC", seq(cs))
	}
	if cs[0].Env["CNI_ARGS"] != "K8S_POD_NAME=p" || cs[0].Env["CNI_NETNS"] != "/run/netns/s" || prevIP(t, cs[0]) != "10.99.0.3/24" {
		t.Errorf("stale DEL: env %v stdin %s", cs[0].Env, cs[0].StdinRaw)
	}
}

func TestGetCachedConfig(t *testing.T) {
	e := newFakeEnv(t)
	e.plugin(t, "fa", fake{result: resA})
	c := e.cni()
	l := mustList(t, `{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"fa","k":1}]}`)
	rt := &RuntimeConf{ContainerID: "c", NetNS: "/x", IfName: "eth0"}
	if got, err := c.GetCachedConfig("n", rt); got != nil || err != nil {
		t.Errorf("nothing cached: %v %v", got, err)
	}
	if _, err := c.AddNetworkList(ctx, l, rt); err != nil {
		t.Fatal(err)
	}
	got, err := c.GetCachedConfig("n", rt)
	if err != nil || got.Name != "n" || got.Version() != "1.0.0" || types(got) != "fa" || string(got.Plugins[0].Bytes) != `{"type":"fa","k":1}` {
		t.Errorf("cached config %+v %v", got, err)
	}
	// The names make a file path: they are validated first.
	if _, err := c.GetCachedConfig("../n", rt); code(err) != spec.ErrInvalidNetworkConfig {
		t.Errorf("network ../n: %v", err)
	}
	if _, err := c.GetCachedConfig("n", &RuntimeConf{ContainerID: "../c", IfName: "eth0"}); code(err) != spec.ErrInvalidEnvironment {
		t.Errorf("container ../c: %v", err)
	}
	writeFile(t, filepath.Join(e.cache, "results", "n-c-eth0"), `{"kind":"cniCacheV1","containerId":"c","ifName":"eth0","networkName":"n","config":"e30="}`)
	var ce *CacheError
	if _, err := c.GetCachedConfig("n", rt); !errors.As(err, &ce) {
		t.Errorf("unusable cached config: %v, want a CacheError", err)
	}
}

// Runtimes add different containers in parallel (spec §3): the first ADDs
// race to create the cache directories, and every entry must land.
func TestConcurrentAddsFreshCache(t *testing.T) {
	e := newFakeEnv(t)
	e.plugin(t, "fa", fake{result: resA})
	c := e.cni()
	c.CacheDir = filepath.Join(e.cache, "a", "b")
	l := mustList(t, `{"cniVersion":"1.1.0","name":"n","plugins":[{"type":"fa"}]}`)
	const n = 16
	errs := make(chan error, n)
	for i := range n {
		go func() {
			_, err := c.AddNetworkList(ctx, l, &RuntimeConf{ContainerID: fmt.Sprintf("c%d", i), NetNS: "/x", IfName: "eth0"})
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	atts, err := c.GetCachedAttachments("n", "")
	if err != nil || len(atts) != n {
		t.Errorf("%d cached attachments (%v), want %d", len(atts), err, n)
	}
}
