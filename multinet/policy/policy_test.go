package policy

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/patchbay-cni/patchbay/spec"
)

// list builds a configuration list from plugin objects.
func list(t testing.TB, plugins ...string) *spec.ConfList {
	t.Helper()
	l, err := spec.ParseConfList([]byte(`{"cniVersion":"1.0.0","name":"tenant","plugins":[` + strings.Join(plugins, ",") + `]}`))
	if err != nil {
		t.Fatalf("test list: %v", err)
	}
	return l
}

func mustParse(t testing.TB, s string) *Policy {
	t.Helper()
	p, err := Parse([]byte(s), "nadPolicy")
	if err != nil {
		t.Fatalf("Parse(%s): %v", s, err)
	}
	return p
}

func texts(vs []Violation) []string {
	var out []string
	for _, v := range vs {
		out = append(out, v.String())
	}
	return out
}

// expect checks that n has exactly the violations whose texts contain
// each of want, in order.
func expect(t *testing.T, p *Policy, n Network, want ...string) {
	t.Helper()
	got := texts(p.Check(n))
	if len(got) != len(want) {
		t.Fatalf("violations %q, want %d containing %q", got, len(want), want)
	}
	for i, w := range want {
		if !strings.Contains(got[i], w) {
			t.Errorf("violation %d %q does not contain %q", i, got[i], w)
		}
	}
}

func TestBuiltinParses(t *testing.T) {
	// Strictly, all of it (Default reads each entry on demand).
	if _, err := parse(builtinJSON, builtinPrefix, nil); err != nil {
		t.Fatalf("builtin.json: %v", err)
	}
	p := Default()
	if p.Mode != Enforce || p.OtherTypes {
		t.Fatalf("built-in mode %q otherTypes %v", p.Mode, p.OtherTypes)
	}
	for _, typ := range p.Types() {
		if tr := p.rule(typ); tr == nil || strings.Contains(tr.allowRule, "unreadable") {
			t.Errorf("built-in entry %s: %+v", typ, tr)
		}
	}
	for _, typ := range []string{"bridge", "ptp", "macvlan", "ipvlan", "vlan", "host-local", "static", "dhcp", "tuning", "portmap",
		"bandwidth", "firewall", "sbr", "vrf", "tap", "dummy", "loopback", "cluster-ipam", "whereabouts"} {
		if tr := p.rule(typ); tr == nil || !tr.allow {
			t.Errorf("built-in policy does not allow %s", typ)
		}
	}
	for _, typ := range []string{"host-device", "multus", "flannel"} {
		if tr := p.rule(typ); tr == nil || tr.allow {
			t.Errorf("built-in policy allows %s", typ)
		}
	}
}

// Every kind of rule, in the built-in policy and in an operator's.
func TestRuleKinds(t *testing.T) {
	d := Default()
	cases := []struct {
		name    string
		p       *Policy
		plugins []string
		caps    map[string]any
		want    []string
	}{
		{"allowed bridge + host-local + tuning + portmap", d, []string{
			`{"type":"bridge","bridge":"blue0","isGateway":true,"ipam":{"type":"host-local","subnet":"10.1.0.0/24","dataDir":"/var/lib/cni/networks"}}`,
			`{"type":"tuning","sysctl":{"net.ipv4.conf.eth0.rp_filter":"1","net/ipv6/conf/eth0/accept_ra":"0"}}`,
			`{"type":"portmap","conditionsV4":["-s","10.0.0.0/8"],"externalSetMarkChain":"KUBE-MARK-MASQ"}`}, nil, nil},
		// Each plugin's own default directory, written out, is allowed.
		{"plugins' default data directories", d, []string{
			`{"type":"firewall","dataDir":"/run/cni/patchbay/firewall"}`,
			`{"type":"tuning","dataDir":"/run/cni/tuning"}`,
			`{"type":"dhcp","daemonSocketPath":"/run/cni/dhcp.sock"}`}, nil, nil},
		{"firewall dataDir elsewhere", d, []string{`{"type":"firewall","dataDir":"/var/lib/x"}`}, nil,
			[]string{`plugins[0] (firewall): "dataDir" = "/var/lib/x" is not a clean absolute path at or under any of ["/run/cni/patchbay/firewall"] [built-in rule types.firewall.keys.dataDir]`}},
		{"type not in the list", d, []string{`{"type":"sriov"}`}, nil,
			[]string{`plugins[0] (sriov): type "sriov" is not allowed: the policy has no entry for it`}},
		{"type refused", d, []string{`{"type":"host-device","device":"eth0"}`}, nil,
			[]string{`type "host-device" is not allowed [built-in rule types.host-device.allow]`}},
		{"nested IPAM type", d, []string{`{"type":"bridge","bridge":"b1","ipam":{"type":"nv-ipam"}}`}, nil,
			[]string{`plugins[0].ipam (nv-ipam): type "nv-ipam" is not allowed`}},
		{"deny", d, []string{`{"type":"whereabouts","etcd_key_file":"/etc/kubernetes/pki/apiserver-etcd-client.key"}`}, nil,
			[]string{`plugins[0] (whereabouts): "etcd_key_file" = "/etc/kubernetes/pki/apiserver-etcd-client.key" must not be set [built-in rule types.whereabouts.keys.etcd_key_file]`}},
		{"under: host path", d, []string{`{"type":"bridge","bridge":"b1","ipam":{"type":"host-local","subnet":"10.1.0.0/24","dataDir":"/etc"}}`}, nil,
			[]string{`plugins[0].ipam (host-local): "dataDir" = "/etc" is not a clean absolute path at or under any of ["/var/lib/cni/networks"] [built-in rule types.host-local.keys.dataDir]`}},
		{"under: .. escapes", d, []string{`{"type":"bridge","bridge":"b1","ipam":{"type":"host-local","dataDir":"/var/lib/cni/networks/../../../etc"}}`}, nil,
			[]string{`"dataDir" = "/var/lib/cni/networks/../../../etc" is not a clean absolute path`}},
		{"under: a sibling with the same prefix", d, []string{`{"type":"tuning","dataDir":"/run/cni/tuning-evil"}`}, nil,
			[]string{`"dataDir" = "/run/cni/tuning-evil"`}},
		{"oneOf", d, []string{`{"type":"portmap","externalSetMarkChain":"INPUT"}`}, nil,
			[]string{`"externalSetMarkChain" = "INPUT" is not one of ["KUBE-MARK-MASQ"]`}},
		{"noneOf with the plugin's default", d, []string{`{"type":"bridge","ipam":{"type":"static"}}`}, nil,
			[]string{`"bridge" is not set, and the plugin's default "cni0" is one of the refused values`}},
		{"noneOf: empty means the default", d, []string{`{"type":"bridge","bridge":""}`}, nil,
			[]string{`"bridge" is not set, and the plugin's default "cni0"`}},
		{"noneOf", d, []string{`{"type":"bridge","bridge":"docker0"}`}, nil,
			[]string{`"bridge" = "docker0" is one of the refused values`}},
		{"macvlan passthru", d, []string{`{"type":"macvlan","master":"eth0","mode":"passthru"}`}, nil,
			[]string{`"mode" = "passthru" is one of the refused values ["passthru"]`}},
		{"pattern on each list element", d, []string{`{"type":"portmap","conditionsV4":["-s","10.0.0.1\nCOMMIT"]}`}, nil,
			[]string{`"conditionsV4[1]" = "10.0.0.1\nCOMMIT" does not match the pattern`}},
		{"names: sysctl keys", d, []string{`{"type":"tuning","sysctl":{"kernel.panic":"1","net.ipv4.conf.eth0.rp_filter":"1","net/../kernel/x":"1"}}`}, nil,
			[]string{`"sysctl" has the key "kernel.panic", which does not match`, `has the key "net/../kernel/x"`}},
		{"names: sysctl from args.cni", d, []string{`{"type":"tuning","args":{"cni":{"sysctl":{"vm.overcommit_memory":"1"}}}}`}, nil,
			[]string{`"args.cni.sysctl" has the key "vm.overcommit_memory"`}},
		{"capability args are checked as runtimeConfig", d,
			[]string{`{"type":"portmap","capabilities":{"portMappings":true}}`},
			map[string]any{"portMappings": []any{map[string]any{"hostPort": 10250, "containerPort": 80, "protocol": "tcp"}}},
			[]string{`"runtimeConfig.portMappings" = […] must not be set`}},
		{"undeclared capability args are not runtimeConfig", d, []string{`{"type":"portmap"}`},
			map[string]any{"portMappings": []any{map[string]any{"hostPort": 10250}}}, nil},
		{"a NAD's own runtimeConfig never reaches the plugin", d, []string{`{"type":"portmap","runtimeConfig":{"portMappings":[{"hostPort":22}]}}`}, nil, nil},
		{"forged runtimeConfig (another case)", d, []string{`{"type":"portmap","RuntimeConfig":{"portMappings":[{"hostPort":22}]}}`}, nil,
			[]string{`"RuntimeConfig" = {…} reads as "runtimeConfig" to a plugin`, `"RuntimeConfig.portMappings" = […] must not be set`}},
		{"case-folded key names (encoding/json's matching)", d, []string{`{"type":"bridge","bridge":"b1","ipam":{"type":"host-local","DATADIR":"/etc"}}`}, nil,
			[]string{`"DATADIR" = "/etc" is not a clean absolute path`}},
		{"Kelvin sign folds to k", d, []string{`{"type":"cluster-ipam","\u212aubernetes":{"kubeconfig":"/etc/kubernetes/admin.conf"}}`}, nil,
			[]string{"\"\u212aubernetes.kubeconfig\" = \"/etc/kubernetes/admin.conf\" is not a clean absolute path"}},
		{"duplicate keys: every value is checked", d, []string{`{"type":"dhcp","daemonSocketPath":"/run/cni/dhcp.sock","daemonSocketPath":"/run/containerd/containerd.sock"}`}, nil,
			[]string{`"daemonSocketPath" = "/run/containerd/containerd.sock" is not one of`}},
		{"ambiguous nested type", d, []string{`{"type":"bridge","bridge":"b1","ipam":{"type":"host-local","type":"evil"}}`}, nil,
			[]string{`plugins[0].ipam: gives "type" more than once`}},
		{"delegates of a delegating plugin", mustParse(t, `{"types":{"flannel":{}}}`),
			[]string{`{"type":"flannel","delegate":{"bridge":"docker0","ipam":{"type":"host-local","dataDir":"/"}}}`}, nil,
			[]string{`plugins[0].delegate (bridge): "bridge" = "docker0"`, `plugins[0].delegate.ipam (host-local): "dataDir" = "/"`}},
		{"conflist delegates", mustParse(t, `{"types":{"multus":{}}}`),
			[]string{`{"type":"multus","delegates":[{"plugins":[{"type":"bridge","bridge":"b2"},{"type":"sriov"}]}]}`}, nil,
			[]string{`plugins[0].delegates[0].plugins[1] (sriov): type "sriov" is not allowed`}},
		{"required", mustParse(t, `{"types":{"host-device":{"keys":{"device":{"required":true,"oneOf":["ens5f1"]}}}}}`),
			[]string{`{"type":"host-device","pciBusID":"0000:00:03.0"}`}, nil,
			[]string{`"device" must be set`, `"pciBusID" = "0000:00:03.0" must not be set`}},
		{"prefix", mustParse(t, `{"types":{"macvlan":{"keys":{"master":{"prefix":["tenant-"]}}}}}`),
			[]string{`{"type":"macvlan","master":"eth0"}`}, nil,
			[]string{`"master" = "eth0" does not start with any of ["tenant-"] [nadPolicy.types.macvlan.keys.master]`}},
		{"min/max", mustParse(t, `{"types":{"vlan":{"keys":{"vlanId":{"min":100,"max":199}}}}}`),
			[]string{`{"type":"vlan","master":"eth1","vlanId":42}`}, nil,
			[]string{`"vlanId" = 42 is below the minimum 100`}},
		{"within", mustParse(t, `{"types":{"host-local":{"keys":{"subnet":{"within":["10.200.0.0/16"]},"ranges.subnet":{"within":["10.200.0.0/16"]}}}}}`),
			[]string{`{"type":"ptp","ipam":{"type":"host-local","subnet":"169.254.169.0/24","ranges":[[{"subnet":"10.200.1.0/24"},{"subnet":"10.0.0.0/8"}]]}}`}, nil,
			[]string{`"ranges[0][1].subnet" = "10.0.0.0/8" is not an address or prefix inside ["10.200.0.0/16"]`, `"subnet" = "169.254.169.0/24" is not an address`}},
		{"otherTypes allow", mustParse(t, `{"otherTypes":"allow"}`), []string{`{"type":"sriov","ipam":{"type":"host-local","dataDir":"/"}}`}, nil,
			[]string{`plugins[0].ipam (host-local): "dataDir" = "/"`}},
		{"a type name that is a path", mustParse(t, `{"otherTypes":"allow","types":{"flannel":{}}}`), []string{`{"type":"flannel","delegate":{"type":"../../tmp/x"}}`}, nil,
			[]string{`plugins[0].delegate (../../tmp/x): type "../../tmp/x" is not a plugin name`}},
		{"lifted rule", mustParse(t, `{"types":{"host-local":{"keys":{"dataDir":true}}}}`),
			[]string{`{"type":"bridge","bridge":"b","ipam":{"type":"host-local","dataDir":"/srv/ipam"}}`}, nil, nil},
		{"builtin false", mustParse(t, `{"builtin":false,"types":{"bridge":{}}}`),
			[]string{`{"type":"bridge","ipam":{"type":"host-local","dataDir":"/etc"}}`}, nil,
			[]string{`plugins[0].ipam (host-local): type "host-local" is not allowed: the policy has no entry for it (an operator allows it with nadPolicy.types.host-local) [nadPolicy.otherTypes]`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			expect(t, c.p, Network{List: list(t, c.plugins...), CapabilityArgs: c.caps}, c.want...)
		})
	}
}

func TestReservedNetworkName(t *testing.T) {
	l := list(t, `{"type":"bridge","bridge":"b1"}`)
	expect(t, Default(), Network{List: l, ReservedNames: []string{"tenant"}}, `network: "name" = "tenant" is the cluster network's name`)
	expect(t, Default(), Network{List: l, ReservedNames: []string{"cluster"}})
}

func TestParseErrorsNameTheKey(t *testing.T) {
	cases := map[string]string{
		`[]`:                               `nadPolicy must be an object`,
		`{"mode":"strict"}`:                `nadPolicy.mode must be "enforce", "audit" or "off"`,
		`{"otherType":"allow"}`:            `nadPolicy.otherType is not a policy key`,
		`{"types":{"bridge":{"kyes":{}}}}`: `nadPolicy.types.bridge.kyes is not a policy key`,
		`{"types":{"../x":{}}}`:            `nadPolicy.types.../x is not a plugin type name`,
		`{"types":{"bridge":{"keys":{"a..b":{}}}}}`:                      `nadPolicy.types.bridge.keys.a..b is not a key path`,
		`{"types":{"bridge":{"keys":{"bridge":{"pattern":"(["}}}}}`:      `nadPolicy.types.bridge.keys.bridge.pattern "([" is not a valid regular expression`,
		`{"types":{"bridge":{"keys":{"bridge":{"under":["rel"]}}}}}`:     `nadPolicy.types.bridge.keys.bridge.under[0] "rel" is not an absolute path`,
		`{"types":{"bridge":{"keys":{"x":{"within":["10.0.0.0/33"]}}}}}`: `nadPolicy.types.bridge.keys.x.within[0] "10.0.0.0/33" is not an address or CIDR`,
		`{"types":{"bridge":{"keys":{"x":{"min":5,"max":1}}}}}`:          `nadPolicy.types.bridge.keys.x has min 5 above max 1`,
		`{"types":{"bridge":{"keys":{"x":{"deny":true,"oneOf":[1]}}}}}`:  `nadPolicy.types.bridge.keys.x.deny cannot be combined`,
		`{"types":{"bridge":{"keys":{"x":{"oneOf":[{}]}}}}}`:             `nadPolicy.types.bridge.keys.x.oneOf[0] must be a string, number, boolean or null`,
		`{"types":{"bridge":{"allow":"yes"}}}`:                           `nadPolicy.types.bridge.allow must be true or false`,
		`{"types":{"bridge":{"delegates":{"d":7}}}}`:                     `nadPolicy.types.bridge.delegates.d must be a plugin type`,
		`{"mode":"audit","mode":"off"}`:                                  `nadPolicy.mode is given twice`,
		`{"exemptNamespaces":"kube-system"}`:                             `nadPolicy.exemptNamespaces must be a list of strings`,
		`{"mode":`:                                                       `nadPolicy is not valid JSON`,
	}
	for in, want := range cases {
		_, err := Parse([]byte(in), "nadPolicy")
		ce, ok := err.(*spec.Error)
		if !ok {
			t.Errorf("Parse(%s) = %v, want a CNI error", in, err)
			continue
		}
		if ce.Code != spec.ErrInvalidNetworkConfig || !strings.Contains(ce.Msg, want) {
			t.Errorf("Parse(%s) = code %d %q, want code 7 containing %q", in, ce.Code, ce.Msg, want)
		}
	}
}

func TestParseYAMLAndShorthands(t *testing.T) {
	p, err := Parse([]byte("mode: audit\nexemptNamespaces: [infra]\ntypes:\n  sriov: true\n  bridge: false\n  macvlan:\n    keys:\n      master: {oneOf: [eth1]}\n      mode: true\n"), "nadPolicyFile /x")
	if err != nil {
		t.Fatal(err)
	}
	if p.Mode != Audit || len(p.ExemptNamespaces) != 1 || p.ExemptNamespaces[0] != "infra" {
		t.Fatalf("mode %q exempt %v", p.Mode, p.ExemptNamespaces)
	}
	expect(t, p, Network{List: list(t, `{"type":"sriov"}`)})
	expect(t, p, Network{List: list(t, `{"type":"bridge","bridge":"b"}`)}, `type "bridge" is not allowed [nadPolicyFile /x: types.bridge]`)
	// mode's built-in rule lifted, master's added.
	expect(t, p, Network{List: list(t, `{"type":"macvlan","master":"eth0","mode":"passthru"}`)}, `"master" = "eth0" is not one of ["eth1"] [nadPolicyFile /x: types.macvlan.keys.master]`)
}

func TestTypes(t *testing.T) {
	l := list(t, `{"type":"bridge","ipam":{"type":"multinet"}}`, `{"type":"flannel","delegate":{"ipam":{"type":"host-local"}}}`)
	got := strings.Join(Types(l), ",")
	if got != "bridge,multinet,flannel,bridge,host-local" {
		t.Errorf("Types = %s", got)
	}
}

func TestSourceLoadAndFileReload(t *testing.T) {
	if p, err := (Source{}).Load(); err != nil || p != Default() {
		t.Fatalf("no source: %v %v", p, err)
	}
	if _, err := (Source{Inline: json.RawMessage(`{}`), File: "/x"}).Load(); err == nil || !strings.Contains(err.Error(), "both") {
		t.Errorf("both sources: %v", err)
	}
	in := Source{Inline: json.RawMessage(`{"mode":"audit"}`)}
	p1, err := in.Load()
	if err != nil {
		t.Fatal(err)
	}
	if p2, _ := in.Load(); p2 != p1 {
		t.Errorf("an inline policy is parsed again for the same bytes")
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "policy.yaml")
	if _, err := (Source{File: path}).Load(); err == nil || spec.AsError(err, 0).Code != spec.ErrIOFailure {
		t.Errorf("missing file: %v, want code 5", err)
	}
	os.WriteFile(path, []byte("mode: audit\n"), 0o644)
	p, err := (Source{File: path}).Load()
	if err != nil || p.Mode != Audit {
		t.Fatalf("file: %v %v", p, err)
	}
	// A ConfigMap update: a new file renamed over the old one.
	tmp := filepath.Join(dir, "new")
	os.WriteFile(tmp, []byte("mode: off\n"), 0o644)
	os.Rename(tmp, path)
	if p, err = (Source{File: path}).Load(); err != nil || p.Mode != Off {
		t.Fatalf("after the update: %v %v", p, err)
	}
	// An in-place edit that keeps the size changes the time.
	time.Sleep(10 * time.Millisecond)
	os.WriteFile(path, []byte("mode: xxx\n"), 0o644)
	if _, err = (Source{File: path}).Load(); err == nil || !strings.Contains(err.Error(), "nadPolicyFile "+path+": mode must be") {
		t.Fatalf("broken file: %v", err)
	}
}

// BenchmarkCheck: checking a typical NAD (bridge + host-local, tuning,
// portmap with a mapping) against the built-in policy, as ADD does for
// every NAD outside the exempt namespaces.
func BenchmarkCheck(b *testing.B) {
	l := list(b, `{"type":"bridge","bridge":"blue0","isGateway":true,"capabilities":{"mac":true},"ipam":{"type":"host-local","subnet":"10.1.0.0/24","routes":[{"dst":"0.0.0.0/0"}]}}`,
		`{"type":"tuning","sysctl":{"net.ipv4.conf.eth0.rp_filter":"1"}}`,
		`{"type":"portmap","capabilities":{"portMappings":true},"conditionsV4":["-s","10.0.0.0/8"]}`)
	n := Network{List: l, CapabilityArgs: map[string]any{"mac": "02:00:00:00:00:01"}, ReservedNames: []string{"cluster"}}
	p := Default()
	b.ReportAllocs()
	for b.Loop() {
		if vs := p.Check(n); len(vs) != 0 {
			b.Fatal(vs)
		}
	}
}

// BenchmarkParseBuiltin: what the first check in a thin plugin's process
// pays to read the built-in rules it needs (once per process): the top and
// the entries of a bridge with host-local.
func BenchmarkParseBuiltin(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		p := parseBuiltin(builtinJSON)
		if p.rule("bridge") == nil || p.rule("host-local") == nil {
			b.Fatal("no bridge or host-local entry")
		}
	}
}

// The README's example policy parses and does what its comments say, and
// its worked example is refused with the messages shown.
func TestREADMEExamples(t *testing.T) {
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	block := func(after, until string) string {
		i := strings.Index(readme, after)
		if i < 0 {
			t.Fatalf("README has no %q", after)
		}
		rest := readme[i+len(after):]
		return rest[:strings.Index(rest, until)]
	}
	var lines []string
	for _, l := range strings.Split(block("nad-policy.yaml: |\n", "```"), "\n") {
		lines = append(lines, strings.TrimPrefix(l, "    "))
	}
	p, err := Parse([]byte(strings.Join(lines, "\n")), "nadPolicyFile /etc/multinet/nad-policy.yaml")
	if err != nil {
		t.Fatalf("README example policy: %v", err)
	}
	expect(t, p, Network{List: list(t, `{"type":"sriov","ipam":{"type":"static"}}`)})
	expect(t, p, Network{List: list(t, `{"type":"bridge","bridge":"t-blue","ipam":{"type":"host-local","subnet":"10.1.0.0/24"}}`)})
	expect(t, p, Network{List: list(t, `{"type":"bridge","ipam":{"type":"static"}}`)}, `"bridge" must be set`)
	expect(t, p, Network{List: list(t, `{"type":"bridge","bridge":"t-x","isGateway":true}`)}, `"isGateway" = true must not be set`)
	expect(t, p, Network{List: list(t, `{"type":"macvlan","master":"eth0","mode":"passthru"}`)}, `"master" = "eth0" is not one of`, `"mode" = "passthru"`)
	expect(t, p, Network{List: list(t, `{"type":"ptp","ipam":{"type":"host-local","subnet":"169.254.169.0/24"}}`)}, `"ipam.subnet" = "169.254.169.0/24" is not an address or prefix inside ["10.200.0.0/16"]`)
	expect(t, p, Network{List: list(t, `{"type":"ptp","ipam":{"type":"static","addresses":[{"address":"10.96.0.1/32"}]}}`)}, `"ipam.addresses[0].address" = "10.96.0.1/32"`)
	expect(t, p, Network{List: list(t, `{"type":"host-device","device":"ens6f0v1"}`)})
	expect(t, p, Network{List: list(t, `{"type":"host-device","device":"eth0","kernelpath":"/sys/devices/x"}`)}, `"device" = "eth0" is not one of`, `"kernelpath" = "/sys/devices/x" must not be set`)

	nad := block("  config: '", "'\n")
	l, err := spec.ParseConfList([]byte(strings.Replace(nad, `"cniVersion"`, `"name": "fast", "cniVersion"`, 1)))
	if err != nil {
		t.Fatalf("README worked example: %v", err)
	}
	shown := block("Warning  FailedCreatePodSandBox", "Warning  NetworkAttachmentPolicyRefused")
	for _, v := range Default().Check(Network{List: l}) {
		if !strings.Contains(shown, v.String()) {
			t.Errorf("the README does not show %q", v.String())
		}
	}
	if len(Default().Check(Network{List: l})) != 2 {
		t.Errorf("worked example: %v", Default().Check(Network{List: l}))
	}
}
