package spec

import (
	"encoding/json"
	"testing"
)

// dbnet is the spec's example configuration (section 1), comments removed,
// plus a large number and an unknown nested key that must pass through.
const dbnet = `{
  "cniVersion": "1.1.0",
  "cniVersions": ["0.3.1", "0.4.0", "1.0.0", "1.1.0"],
  "name": "dbnet",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "cni0",
      "keyA": ["some more", "plugin specific", "configuration"],
      "ipam": {
        "type": "host-local",
        "subnet": "10.1.0.0/16",
        "gateway": "10.1.0.1",
        "routes": [{"dst": "0.0.0.0/0"}]
      },
      "dns": {"nameservers": [ "10.1.0.1" ]}
    },
    {
      "type": "tuning",
      "capabilities": {"mac": true},
      "sysctl": {"net.core.somaxconn": "500"},
      "big": 123456789012345678901234567890,
      "cni.dev/internal": {"x": 1}
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}`

func TestParseConfListSpecExample(t *testing.T) {
	l, err := ParseConfList([]byte(dbnet))
	if err != nil {
		t.Fatal(err)
	}
	if l.Name != "dbnet" || l.CNIVersion != V110 || l.Version() != V110 || len(l.Plugins) != 3 || l.Legacy {
		t.Fatalf("parsed %+v", l)
	}
	b := l.Plugins[0].Network
	if b.Type != "bridge" || b.IPAM.Type != "host-local" || len(b.DNS.Nameservers) != 1 {
		t.Errorf("bridge conf = %+v", b)
	}
	if tn := l.Plugins[1].Network; !tn.Capabilities[CapMAC] {
		t.Errorf("tuning capabilities = %v", tn.Capabilities)
	}
	if string(l.Bytes) != dbnet {
		t.Error("Bytes is not the original content")
	}
}

// Step 1 and 2 of the spec's add example: the bridge request is the plugin
// object with cniVersion and name inserted; the tuning request has its
// capabilities removed, runtimeConfig set and the bridge result as prevResult.
func TestBuildRequestSpecExample(t *testing.T) {
	l, err := ParseConfList([]byte(dbnet))
	if err != nil {
		t.Fatal(err)
	}
	req, err := BuildRequest(l.Plugins[0], l.Name, l.Version(), nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	assertJSON(t, req, `{
    "cniVersion": "1.1.0",
    "name": "dbnet",
    "type": "bridge",
    "bridge": "cni0",
    "keyA": ["some more", "plugin specific", "configuration"],
    "ipam": {"type": "host-local", "subnet": "10.1.0.0/16", "gateway": "10.1.0.1", "routes": [{"dst": "0.0.0.0/0"}]},
    "dns": {"nameservers": [ "10.1.0.1" ]}
}`)
	prev := mustParse(t, exampleBridge, V110)
	req, err = BuildRequest(l.Plugins[1], l.Name, l.Version(), prev, map[string]any{"mac": "00:11:22:33:44:66"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	assertJSON(t, req, `{
  "cniVersion": "1.1.0",
  "name": "dbnet",
  "type": "tuning",
  "sysctl": {"net.core.somaxconn": "500"},
  "big": 123456789012345678901234567890,
  "runtimeConfig": {"mac": "00:11:22:33:44:66"},
  "prevResult": `+withVersion(V110, exampleBridge)+`}`)
	// The big number passes through byte for byte (no float rounding).
	var m map[string]json.RawMessage
	if err := json.Unmarshal(req, &m); err != nil || string(m["big"]) != "123456789012345678901234567890" {
		t.Errorf("big = %s (%v)", m["big"], err)
	}
}

func TestBuildRequest(t *testing.T) {
	p, err := ParsePluginConf([]byte(`{"cniVersion":"0.1.0","name":"old","type":"x",
		"capabilities":{"portMappings":true},"runtimeConfig":{"stale":1},"prevResult":{"stale":1},
		"cni.dev/attachments":[],"cni.dev/valid-attachments":[],"args":{"cni":{"ips":["10.0.0.2"]}},
		"nested":{"a":[1,2,{"b":null}],"capabilities":"kept: only top-level keys are derived"}}`))
	if err != nil {
		t.Fatal(err)
	}
	prev := mustParse(t, full110, "")
	cases := []struct {
		name    string
		version string
		prev    *Result
		rc      map[string]any
		extra   map[string]any
		want    string
	}{
		{"minimal", V100, nil, nil, nil, `{"cniVersion":"1.0.0","name":"net","type":"x","args":{"cni":{"ips":["10.0.0.2"]}},
			"nested":{"a":[1,2,{"b":null}],"capabilities":"kept: only top-level keys are derived"}}`},
		{"empty runtimeConfig omitted", V100, nil, map[string]any{}, nil, `{"cniVersion":"1.0.0","name":"net","type":"x","args":{"cni":{"ips":["10.0.0.2"]}},
			"nested":{"a":[1,2,{"b":null}],"capabilities":"kept: only top-level keys are derived"}}`},
		{"prevResult in request version 0.4.0", V040, prev, map[string]any{"portMappings": []PortMapping{{HostPort: 80, ContainerPort: 8080, Protocol: "tcp"}}}, nil,
			`{"cniVersion":"0.4.0","name":"net","type":"x","args":{"cni":{"ips":["10.0.0.2"]}},
			"nested":{"a":[1,2,{"b":null}],"capabilities":"kept: only top-level keys are derived"},
			"runtimeConfig":{"portMappings":[{"hostPort":80,"containerPort":8080,"protocol":"tcp"}]},
			"prevResult":` + full040(V040) + `}`},
		{"GC attachments", V110, nil, nil, map[string]any{KeyValidAttachments: []Attachment{{"c1", "eth0"}}},
			`{"cniVersion":"1.1.0","name":"net","type":"x","args":{"cni":{"ips":["10.0.0.2"]}},
			"nested":{"a":[1,2,{"b":null}],"capabilities":"kept: only top-level keys are derived"},
			"cni.dev/valid-attachments":[{"containerID":"c1","ifname":"eth0"}]}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req, err := BuildRequest(p, "net", c.version, c.prev, c.rc, c.extra)
			if err != nil {
				t.Fatal(err)
			}
			assertJSON(t, req, c.want)
		})
	}
	// Unencodable values are code 6, naming the key.
	_, err = BuildRequest(p, "net", V100, nil, map[string]any{"x": func() {}}, nil)
	assertCode(t, err, ErrDecodingFailure, "runtimeConfig")
	_, err = BuildRequest(p, "net", "7.0.0", prev, nil, nil)
	assertCode(t, err, ErrIncompatibleVersion, `"7.0.0"`)
	_, err = BuildRequest(&PluginConf{Bytes: []byte("[")}, "net", V100, nil, nil, nil)
	assertCode(t, err, ErrDecodingFailure)
}

func TestConfListVersionSelection(t *testing.T) {
	cases := []struct {
		versions string
		want     string
	}{
		{`"cniVersion":"1.0.0"`, V100},
		{`"cniVersion":"0.3.1","cniVersions":["0.4.0","1.1.0","1.0.0"]`, V110},
		{`"cniVersions":["0.3.1","0.4.0"]`, V040},
		// Versions newer than ours are skipped, not fatal.
		{`"cniVersion":"1.0.0","cniVersions":["1.0.0","1.2.0","2.0.0"]`, V100},
		{`"cniVersion":"9.0.0","cniVersions":["0.4.0"]`, V040},
		// No version at all: the spec's 0.2.0.
		{``, V020},
	}
	for _, c := range cases {
		sep := ","
		if c.versions == "" {
			sep = ""
		}
		data := `{` + c.versions + sep + `"name":"n","plugins":[{"type":"x"}]}`
		l, err := ParseConfList([]byte(data))
		if err != nil {
			t.Fatalf("%s: %v", data, err)
		}
		if got := l.Version(); got != c.want {
			t.Errorf("%s: Version() = %q, want %q", data, got, c.want)
		}
	}
}

func TestConfListFlags(t *testing.T) {
	cases := []struct {
		flags              string
		check, gc, inlined bool
	}{
		{``, false, false, false},
		{`"disableCheck":true,"disableGC":true,"loadOnlyInlinedPlugins":true,`, true, true, true},
		{`"disableCheck":false,"disableGC":false,"loadOnlyInlinedPlugins":false,`, false, false, false},
		{`"disableCheck":"true","disableGC":"TRUE","loadOnlyInlinedPlugins":"True",`, true, true, true},
		{`"disableCheck":"false","disableGC":"False",`, false, false, false},
		{`"disableCheck":null,`, false, false, false},
	}
	for _, c := range cases {
		data := `{` + c.flags + `"cniVersion":"1.1.0","name":"n","plugins":[{"type":"x"}]}`
		l, err := ParseConfList([]byte(data))
		if err != nil {
			t.Fatalf("%s: %v", data, err)
		}
		if l.DisableCheck != c.check || l.DisableGC != c.gc || l.LoadOnlyInlinedPlugins != c.inlined {
			t.Errorf("%s: got check=%v gc=%v inlined=%v", data, l.DisableCheck, l.DisableGC, l.LoadOnlyInlinedPlugins)
		}
	}
}

func TestParseConfListErrors(t *testing.T) {
	cases := []struct {
		data  string
		code  uint
		frags []string
	}{
		{`{`, ErrDecodingFailure, nil},
		{`[]`, ErrDecodingFailure, nil},
		{`null`, ErrDecodingFailure, []string{"not a JSON object"}},
		{`{"cniVersion":"1.0.0","plugins":[]}`, ErrInvalidNetworkConfig, []string{`"name"`}},
		{`{"cniVersion":"1.0.0","name":"-bad","plugins":[]}`, ErrInvalidNetworkConfig, []string{`"-bad"`}},
		{`{"cniVersion":"1.0.0","name":"a/b","plugins":[]}`, ErrInvalidNetworkConfig, []string{`"a/b"`}},
		{`{"cniVersion":"1.0.0","name":5}`, ErrDecodingFailure, nil},
		{`{"cniVersion":"9.9.9","name":"n","plugins":[]}`, ErrIncompatibleVersion, []string{`"9.9.9"`}},
		{`{"cniVersions":["2.0.0"],"name":"n","plugins":[]}`, ErrIncompatibleVersion, []string{"2.0.0"}},
		{`{"cniVersion":"one","name":"n","plugins":[]}`, ErrDecodingFailure, []string{`"one"`}},
		{`{"cniVersion":"1.0.0","cniVersions":["1.x"],"name":"n","plugins":[]}`, ErrDecodingFailure, []string{`"1.x"`}},
		{`{"cniVersion":"1.0.0","name":"n","disableCheck":1}`, ErrDecodingFailure, []string{"disableCheck", "1"}},
		{`{"cniVersion":"1.0.0","name":"n","disableGC":"maybe"}`, ErrInvalidNetworkConfig, []string{"disableGC", "maybe"}},
		{`{"cniVersion":"1.0.0","name":"n","disableCheck":""}`, ErrInvalidNetworkConfig, []string{"disableCheck"}},
		{`{"cniVersion":"1.0.0","name":"n","loadOnlyInlinedPlugins":true}`, ErrInvalidNetworkConfig, []string{"loadOnlyInlinedPlugins", "plugins"}},
		{`{"cniVersion":"1.0.0","name":"n","loadOnlyInlinedPlugins":"true","plugins":null}`, ErrInvalidNetworkConfig, []string{"loadOnlyInlinedPlugins"}},
		{`{"cniVersion":"1.0.0","name":"n","plugins":{}}`, ErrDecodingFailure, nil},
		{`{"cniVersion":"1.0.0","name":"n","plugins":[null]}`, ErrDecodingFailure, []string{"plugins[0]"}},
		{`{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"x"},{}]}`, ErrInvalidNetworkConfig, []string{"plugins[1]", `"type"`}},
		{`{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"../x"}]}`, ErrInvalidNetworkConfig, []string{"plugins[0]", `"../x"`}},
		{`{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"a/b"}]}`, ErrInvalidNetworkConfig, []string{`"a/b"`}},
		{`{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"ok","ipam":{"type":"/usr/bin/x"}}]}`, ErrInvalidNetworkConfig, []string{"ipam.type", "/usr/bin/x"}},
		{`{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"ok","ipam":"host-local"}]}`, ErrDecodingFailure, []string{"plugins[0]"}},
	}
	for _, c := range cases {
		t.Run(c.data, func(t *testing.T) {
			_, err := ParseConfList([]byte(c.data))
			assertCode(t, err, c.code, c.frags...)
		})
	}
	// loadOnlyInlinedPlugins with an empty (but present) list is allowed.
	if _, err := ParseConfList([]byte(`{"cniVersion":"1.0.0","name":"n","loadOnlyInlinedPlugins":true,"plugins":[]}`)); err != nil {
		t.Error(err)
	}
}

func TestParsePluginConf(t *testing.T) {
	in := `{"cniVersion":"1.0.0","name":"n","type":"bridge","ipam":{"type":"host-local","subnet":"10.0.0.0/24"},
		"dns":{"nameservers":["10.0.0.1"]},"capabilities":{"portMappings":true},
		"prevResult":{"cniVersion":"1.0.0","ips":[{"address":"10.0.0.2/24"}]},
		"cni.dev/attachments":[{"containerID":"old","ifname":"eth1"}],"custom":{"k":"v"}}`
	p, err := ParsePluginConf([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	n := p.Network
	if n.Type != "bridge" || n.IPAM.Type != "host-local" || n.Name != "n" || !n.Capabilities[CapPortMappings] || n.DNS.Nameservers[0] != "10.0.0.1" {
		t.Errorf("network = %+v", n)
	}
	assertJSON(t, n.RawPrevResult, `{"cniVersion":"1.0.0","ips":[{"address":"10.0.0.2/24"}]}`)
	if a := n.Attachments(); len(a) != 1 || a[0] != (Attachment{"old", "eth1"}) {
		t.Errorf("attachments = %v", a)
	}
	if string(p.Bytes) != in {
		t.Error("Bytes changed")
	}
	// The new key wins over the old one.
	n.ValidAttachments = []Attachment{{"new", "eth0"}}
	if a := n.Attachments(); a[0].ContainerID != "new" {
		t.Errorf("attachments = %v", a)
	}
	for _, bad := range []struct {
		data string
		code uint
		frag string
	}{
		{`{"name":"n"}`, ErrInvalidNetworkConfig, `"type"`},
		{`{"type":""}`, ErrInvalidNetworkConfig, `"type"`},
		{`{"type":"."}`, ErrInvalidNetworkConfig, `"."`},
		{`{"type":".."}`, ErrInvalidNetworkConfig, `".."`},
		{`{"type":"a\\b"}`, ErrInvalidNetworkConfig, `a\\b`},
		{`{"type":"a\u0000b"}`, ErrInvalidNetworkConfig, `type`},
		{`{"type":"x","ipam":{"type":".."}}`, ErrInvalidNetworkConfig, "ipam.type"},
		{`{"type":5}`, ErrDecodingFailure, ""},
		{`null`, ErrDecodingFailure, "not a JSON object"},
		{`"x"`, ErrDecodingFailure, ""},
	} {
		_, err := ParsePluginConf([]byte(bad.data))
		assertCode(t, err, bad.code, bad.frag)
	}
}

// A legacy single-plugin .conf becomes a one-plugin list.
func TestParseAnyLegacyConf(t *testing.T) {
	in := `{"cniVersion":"0.3.1","name":"legacy","type":"bridge","bridge":"cni1"}`
	l, err := ParseAny([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	if !l.Legacy || l.Name != "legacy" || l.Version() != V031 || len(l.Plugins) != 1 || l.Plugins[0].Network.Type != "bridge" || string(l.Bytes) != in {
		t.Fatalf("legacy list = %+v", l)
	}
	req, err := BuildRequest(l.Plugins[0], l.Name, l.Version(), nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	assertJSON(t, req, in)
	// Without cniVersion, 0.2.0.
	l, err = ParseAny([]byte(`{"name":"legacy","type":"bridge"}`))
	if err != nil || l.Version() != V020 {
		t.Fatalf("%v %v", l, err)
	}
	// A "plugins" key makes it a list.
	l, err = ParseAny([]byte(`{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"a"},{"type":"b"}]}`))
	if err != nil || l.Legacy || len(l.Plugins) != 2 {
		t.Fatalf("%+v %v", l, err)
	}
	for _, bad := range []struct {
		data string
		code uint
	}{
		{`{"name":"legacy"}`, ErrInvalidNetworkConfig},
		{`{"type":"bridge"}`, ErrInvalidNetworkConfig},
		{`{"name":"n","type":"bridge","cniVersion":"3.0.0"}`, ErrIncompatibleVersion},
		{`{"name":"n","type":"bridge","cniVersion":"x"}`, ErrDecodingFailure},
		{`[`, ErrDecodingFailure},
		{`null`, ErrDecodingFailure},
	} {
		_, err := ParseAny([]byte(bad.data))
		assertCode(t, err, bad.code)
	}
}
