package selection

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/patchbay-cni/patchbay/spec"
)

// one parses an annotation that must yield exactly one selection.
func one(t *testing.T, annotation string) *Selection {
	t.Helper()
	r := parse(annotation)
	if len(r.Problems) > 0 || len(r.Selections) != 1 {
		t.Fatalf("parse %s: %+v", annotation, r.Problems)
	}
	return r.Selections[0]
}

func jsonEq(t *testing.T, got any, want string) {
	t.Helper()
	g, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	var a, b any
	if err := json.Unmarshal(g, &a); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(want), &b); err != nil {
		t.Fatalf("bad want %s: %v", want, err)
	}
	if !reflect.DeepEqual(a, b) {
		t.Errorf("got  %s\nwant %s", g, want)
	}
}

var (
	bridge  = PluginCaps{Type: "bridge"}
	tuning  = PluginCaps{Type: "tuning", Capabilities: map[string]bool{"mac": true}}
	portmap = PluginCaps{Type: "portmap", Capabilities: map[string]bool{"portMappings": true}}
	static  = PluginCaps{Type: "static", Capabilities: map[string]bool{"ips": true}}
	bw      = PluginCaps{Type: "bandwidth", Capabilities: map[string]bool{"bandwidth": true}}
	ib      = PluginCaps{Type: "ib-sriov", Capabilities: map[string]bool{"infinibandGUID": true}}
)

// The runtimeConfig snippets of §4.1.2.1.x "CNI Delegating Plugin Requirements".
func TestCapabilityArgsSpecExamples(t *testing.T) {
	for _, tc := range []struct {
		section, annotation string
		plugins             []PluginCaps
		want                string
	}{
		{"4.1.2.1.3.2 ips", `[{"name":"net-b","ips": ["10.2.2.42/24", "2001:db8::5/64"]}]`, []PluginCaps{bridge, static},
			`{"ips": ["10.2.2.42/24", "2001:db8::5/64"]}`},
		{"4.1.2.1.4.2 mac", `[{"name":"net-b","mac": "02:23:45:67:89:01"}]`, []PluginCaps{bridge, tuning},
			`{"mac": "02:23:45:67:89:01"}`},
		{"4.1.2.1.7.2 portMappings", `[{"name":"net-b","portMappings": [{ "hostPort": 8080, "containerPort": 80, "protocol": "tcp" }]}]`, []PluginCaps{bridge, portmap},
			`{"portMappings": [{ "hostPort": 8080, "containerPort": 80, "protocol": "tcp" }]}`},
		{"4.1.2.1.8.2 bandwidth", `[{"name":"net-b","bandwidth": {"ingressRate": 2048, "ingressBurst": 300, "egressRate": 8000, "egressBurst": 200}}]`, []PluginCaps{bridge, bw},
			`{"bandwidth": {"ingressRate": 2048, "ingressBurst": 300, "egressRate": 8000, "egressBurst": 200}}`},
		{"4.1.2.1.10.2 infinibandGUID", `[{"name":"net-b","infiniband-guid": "24:8a:07:03:00:8d:ae:2f"}]`, []PluginCaps{ib},
			`{"infinibandGUID": "24:8a:07:03:00:8d:ae:2f"}`},
		{"all at once", `[{"name":"net-b","ips":["10.0.0.2/24"],"mac":"02:00:00:00:00:01","portMappings":[{"hostPort":80,"containerPort":8080}],"bandwidth":{"egressRate":100000,"egressBurst":20000},"infiniband-guid":"00:11:22:33:44:55:66:77"}]`,
			[]PluginCaps{bridge, static, tuning, portmap, bw, ib},
			`{"ips":["10.0.0.2/24"],"mac":"02:00:00:00:00:01","portMappings":[{"hostPort":80,"containerPort":8080,"protocol":"tcp"}],"bandwidth":{"egressRate":100000,"egressBurst":20000},"infinibandGUID":"00:11:22:33:44:55:66:77"}`},
		{"one plugin declares several", `[{"name":"net-b","ips":["10.0.0.2"],"mac":"02:00:00:00:00:01"}]`,
			[]PluginCaps{{Type: "thick", Capabilities: map[string]bool{"ips": true, "mac": true}}},
			`{"ips":["10.0.0.2"],"mac":"02:00:00:00:00:01"}`},
	} {
		t.Run(tc.section, func(t *testing.T) {
			args, err := CapabilityArgs(one(t, tc.annotation), tc.plugins)
			if err != nil {
				t.Fatal(err)
			}
			jsonEq(t, args, tc.want)
		})
	}
}

func TestCapabilityArgsNothingRequested(t *testing.T) {
	args, err := CapabilityArgs(one(t, `net-a@eth1`), []PluginCaps{bridge})
	if err != nil || args != nil {
		t.Errorf("got %v, %v; want nil, nil", args, err)
	}
	// "ipam-claim-reference", "cni-args" and "default-route" are no capabilities.
	args, err = CapabilityArgs(one(t, `[{"name":"n","ipam-claim-reference":"c","cni-args":{"a":1},"default-route":["10.0.0.1"]}]`), nil)
	if err != nil || args != nil {
		t.Errorf("got %v, %v; want nil, nil", args, err)
	}
}

// §4.1.2.1.8.2 lets us default bursts; the reference plugin needs them.
func TestCapabilityArgsBandwidthDefaults(t *testing.T) {
	for _, tc := range []struct{ annotation, want string }{
		{`[{"name":"n","bandwidth":{"ingressRate":1000000}}]`, `{"bandwidth":{"ingressRate":1000000,"ingressBurst":1000000}}`},
		{`[{"name":"n","bandwidth":{"egressRate":2048}}]`, `{"bandwidth":{"egressRate":2048,"egressBurst":12000}}`},
		{`[{"name":"n","bandwidth":{"egressRate":100000000000}}]`, `{"bandwidth":{"egressRate":100000000000,"egressBurst":34359738352}}`},
		{`[{"name":"n","bandwidth":{"ingressRate":5000,"ingressBurst":7}}]`, `{"bandwidth":{"ingressRate":5000,"ingressBurst":7}}`},
	} {
		args, err := CapabilityArgs(one(t, tc.annotation), []PluginCaps{bw})
		if err != nil {
			t.Fatal(err)
		}
		jsonEq(t, args, tc.want)
	}
}

// Requests no plugin declares fail the attachment (Multus drops them).
func TestCapabilityArgsUndeclared(t *testing.T) {
	for _, tc := range []struct {
		name, annotation string
		plugins          []PluginCaps
		want             string
	}{
		{"ips", `[{"name":"net-b","ips":["10.2.2.42/24"]}]`, []PluginCaps{bridge, tuning},
			`network "my-namespace/net-b": networks[0] requests "ips" (requested ["10.2.2.42/24"]) but no plugin of the network declares that capability (plugins: bridge with no capabilities; tuning with mac)`},
		{"mac", `[{"name":"net-b","mac":"02:23:45:67:89:01"}]`, []PluginCaps{bridge},
			`network "my-namespace/net-b": networks[0] requests "mac" (requested "02:23:45:67:89:01") but no plugin of the network declares that capability (plugins: bridge with no capabilities)`},
		{"portMappings", `[{"name":"net-b","portMappings":[{"hostPort":8080,"containerPort":80}]}]`, []PluginCaps{bridge, tuning},
			`network "my-namespace/net-b": networks[0] requests "portMappings" (requested [{"hostPort":8080,"containerPort":80,"protocol":"tcp"}]) but no plugin of the network declares that capability (plugins: bridge with no capabilities; tuning with mac)`},
		{"bandwidth", `[{"name":"net-b","bandwidth":{"ingressRate":2048,"ingressBurst":300}}]`, []PluginCaps{bridge},
			`network "my-namespace/net-b": networks[0] requests "bandwidth" (requested {"ingressRate":2048,"ingressBurst":300}) but no plugin of the network declares that capability (plugins: bridge with no capabilities)`},
		{"infinibandGUID", `[{"name":"net-b","infiniband-guid":"24:8a:07:03:00:8d:ae:2f"}]`, nil,
			`network "my-namespace/net-b": networks[0] requests "infinibandGUID" (requested "24:8a:07:03:00:8d:ae:2f") but no plugin of the network declares that capability (plugins: none)`},
		{"declared false", `[{"name":"net-b","mac":"02:23:45:67:89:01"}]`, []PluginCaps{{Type: "tuning", Capabilities: map[string]bool{"mac": false}}},
			`network "my-namespace/net-b": networks[0] requests "mac" (requested "02:23:45:67:89:01") but no plugin of the network declares that capability (plugins: tuning with no capabilities)`},
		{"several missing, one present", `[{"name":"n","ips":["10.0.0.1"],"mac":"02:23:45:67:89:01","portMappings":[{"hostPort":1,"containerPort":2}]}]`, []PluginCaps{tuning},
			`network "my-namespace/n": networks[0] requests "ips" (requested ["10.0.0.1"]), "portMappings" (requested [{"hostPort":1,"containerPort":2,"protocol":"tcp"}]) but no plugin of the network declares that capability (plugins: tuning with mac)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args, err := CapabilityArgs(one(t, tc.annotation), tc.plugins)
			ce, ok := err.(*spec.Error)
			if !ok || args != nil {
				t.Fatalf("got %v, %#v; want a *spec.Error", args, err)
			}
			if ce.Code != spec.ErrUnsupportedField || ce.Msg != tc.want {
				t.Errorf("got code %d %s\nwant code 2 %s", ce.Code, ce.Msg, tc.want)
			}
		})
	}
}

func TestPluginCapsOfAndForPlugin(t *testing.T) {
	l, err := spec.ParseConfList([]byte(`{"cniVersion":"1.0.0","name":"net-b","plugins":[
		{"type":"bridge"},{"type":"tuning","capabilities":{"mac":true}},{"type":"portmap","capabilities":{"portMappings":true,"ips":false}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	caps := PluginCapsOf(l)
	if len(caps) != 3 || caps[1].Type != "tuning" || !caps[1].Capabilities["mac"] || caps[2].Capabilities["ips"] {
		t.Fatalf("PluginCapsOf: %+v", caps)
	}
	args, err := CapabilityArgs(one(t, `[{"name":"net-b","mac":"02:00:00:00:00:01","portMappings":[{"hostPort":80,"containerPort":80}]}]`), caps)
	if err != nil {
		t.Fatal(err)
	}
	if got := ForPlugin(args, caps[0].Capabilities); got != nil {
		t.Errorf("bridge gets %v, want nothing", got)
	}
	jsonEq(t, ForPlugin(args, caps[1].Capabilities), `{"mac":"02:00:00:00:00:01"}`)
	jsonEq(t, ForPlugin(args, caps[2].Capabilities), `{"portMappings":[{"hostPort":80,"containerPort":80,"protocol":"tcp"}]}`)
}

// §4.1.2.1.6.2: annotation cni-args first, NAD config args second.
func TestMergeCNIArgs(t *testing.T) {
	for _, tc := range []struct {
		name, conf, cniArgs, want string
	}{
		{"config without args", `{"type":"sriov","vlan":5}`, `{"spoofchk":"on"}`,
			`{"type":"sriov","vlan":5,"args":{"cni":{"spoofchk":"on"}}}`},
		{"annotation wins over config", `{"type":"sriov","args":{"cni":{"spoofchk":"off","trust":"on"}}}`, `{"spoofchk":"on"}`,
			`{"type":"sriov","args":{"cni":{"spoofchk":"on","trust":"on"}}}`},
		{"whole values replaced, no deep merge", `{"type":"x","args":{"cni":{"labels":[{"key":"a","value":"1"}],"m":{"a":1,"b":2}}}}`, `{"m":{"a":9}}`,
			`{"type":"x","args":{"cni":{"labels":[{"key":"a","value":"1"}],"m":{"a":9}}}}`},
		{"other args namespaces kept", `{"type":"x","args":{"org.example":{"k":"v"}}}`, `{"a":true}`,
			`{"type":"x","args":{"org.example":{"k":"v"},"cni":{"a":true}}}`},
		{"null args", `{"type":"x","args":null}`, `{"a":1}`, `{"type":"x","args":{"cni":{"a":1}}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ca map[string]json.RawMessage
			if err := json.Unmarshal([]byte(tc.cniArgs), &ca); err != nil {
				t.Fatal(err)
			}
			out, err := MergeCNIArgs([]byte(tc.conf), ca)
			if err != nil {
				t.Fatal(err)
			}
			jsonEq(t, json.RawMessage(out), tc.want)
		})
	}
	// No cni-args: the configuration is passed on byte for byte.
	conf := []byte(`{ "type": "x", "args": 5 }`)
	if out, err := MergeCNIArgs(conf, nil); err != nil || string(out) != string(conf) {
		t.Errorf("no cni-args: got %s, %v", out, err)
	}
	// Shapes that cannot be merged into.
	ca := map[string]json.RawMessage{"a": raw("1")}
	for conf, want := range map[string]string{
		`{"type":"x","args":5}`:          `cannot merge cni-args: the configuration's "args" is not an object: 5`,
		`{"type":"x","args":{"cni":[]}}`: `cannot merge cni-args: the configuration's "args.cni" is not an object: []`,
	} {
		_, err := MergeCNIArgs([]byte(conf), ca)
		ce, ok := err.(*spec.Error)
		if !ok || ce.Code != spec.ErrInvalidNetworkConfig || ce.Msg != want {
			t.Errorf("%s: got %#v, want code 7 %s", conf, err, want)
		}
	}
	if _, err := MergeCNIArgs([]byte(`[1]`), ca); err == nil {
		t.Error("a non-object configuration must fail")
	}
}

// End to end with the spec's cni-args example.
func TestMergeCNIArgsSpecExample(t *testing.T) {
	s := one(t, `[{"name":"net-b","cni-args": {"spoofchk": "on"}}]`)
	out, err := MergeCNIArgs([]byte(`{"cniVersion":"0.3.1","type":"sriov","args":{"cni":{"spoofchk":"off"}}}`), s.CNIArgs)
	if err != nil {
		t.Fatal(err)
	}
	jsonEq(t, json.RawMessage(out), `{"cniVersion":"0.3.1","type":"sriov","args":{"cni":{"spoofchk":"on"}}}`)
}

func BenchmarkParseAndCapabilityArgs(b *testing.B) {
	const a = `[{"name":"net-a"},{"name":"net-b","namespace":"other","ips":["10.2.2.42/24","2001:db8::5/64"],"mac":"02:23:45:67:89:01",
		"portMappings":[{"hostPort":8080,"containerPort":80}],"cni-args":{"spoofchk":"on"}},{"name":"net-c","interface":"eth9","default-route":["10.0.0.1"]}]`
	plugins := []PluginCaps{bridge, static, tuning, portmap}
	for b.Loop() {
		r := Parse(a, "ns", Options{DefaultInterface: "eth0"})
		for _, s := range r.Selections {
			if _, err := CapabilityArgs(s, plugins); err != nil {
				b.Fatal(err)
			}
		}
	}
}
