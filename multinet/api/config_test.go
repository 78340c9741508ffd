package api

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/patchbay-cni/patchbay/spec"
)

func nad(name, config string) *NetworkAttachmentDefinition {
	return &NetworkAttachmentDefinition{Metadata: ObjectMeta{Name: name, Namespace: "ns"}, Spec: NetworkAttachmentDefinitionSpec{Config: config}}
}

// §3.4.2.1: the spec's "name" injection example.
func TestParseConfigNameInjection(t *testing.T) {
	l, err := ParseConfig(nad("a-bridge-network", `{
"cniVersion": "0.3.0",
"type": "awesome-plugin"
}`))
	if err != nil {
		t.Fatal(err)
	}
	if l.Name != "a-bridge-network" || len(l.Plugins) != 1 || l.Plugins[0].Network.Type != "awesome-plugin" || l.Version() != "0.3.0" {
		t.Fatalf("got %+v", l)
	}
	// What the delegate receives (§3.4.2.1): the injected name.
	req, err := spec.BuildRequest(l.Plugins[0], l.Name, l.Version(), nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got, want map[string]any
	_ = json.Unmarshal(req, &got)
	_ = json.Unmarshal([]byte(`{"cniVersion": "0.3.0", "name": "a-bridge-network", "type": "awesome-plugin"}`), &want)
	if len(got) != len(want) || got["name"] != want["name"] || got["type"] != want["type"] || got["cniVersion"] != want["cniVersion"] {
		t.Errorf("delegate config %s", req)
	}
}

func TestParseConfig(t *testing.T) {
	// §3.2.2: a configuration list keeps its own name.
	l, err := ParseConfig(nad("another-bridge-network", `{"cniVersion":"0.3.0","name":"another-bridge-network","plugins":[
		{"type":"bridge","bridge":"br0","ipam":{"type":"host-local","subnet":"192.168.5.0/24"}},{"type":"port-forwarding"},{"type":"tuning","sysctl":{"net.ipv4.conf.all.log_martians":"1"}}]}`))
	if err != nil || l.Name != "another-bridge-network" || len(l.Plugins) != 3 || l.Legacy {
		t.Fatalf("got %+v, %v", l, err)
	}
	// A list without a name gets the object's name; a differing name is kept (§3.4.3).
	if l, err = ParseConfig(nad("obj", `{"cniVersion":"1.0.0","plugins":[{"type":"bridge"}]}`)); err != nil || l.Name != "obj" {
		t.Fatalf("got %+v, %v", l, err)
	}
	if l, err = ParseConfig(nad("obj", `{"cniVersion":"1.0.0","name":"other","type":"bridge"}`)); err != nil || l.Name != "other" {
		t.Fatalf("got %+v, %v", l, err)
	}
	// §3.2.4: no config, no error: the caller looks on disk.
	if l, err = ParseConfig(nad("obj", "")); l != nil || err != nil {
		t.Fatalf("got %+v, %v", l, err)
	}
	for config, want := range map[string]string{
		`{`:                                      `NetworkAttachmentDefinition ns/obj: spec.config is not valid JSON; unexpected end of JSON input`,
		`[1]`:                                    `NetworkAttachmentDefinition ns/obj: spec.config is not valid JSON; json: cannot unmarshal array into Go value of type map[string]json.RawMessage`,
		`{"cniVersion":"1.0.0"}`:                 `NetworkAttachmentDefinition ns/obj: spec.config: plugin configuration: missing required key "type"`,
		`{"cniVersion":"9.9.9","type":"bridge"}`: `NetworkAttachmentDefinition ns/obj: spec.config:`,
		`{"name":5,"type":"bridge"}`:             `NetworkAttachmentDefinition ns/obj: spec.config: failed to decode plugin configuration; json: cannot unmarshal number into Go struct field NetConf.name of type string`,
	} {
		_, err := ParseConfig(nad("obj", config))
		if _, ok := err.(*spec.Error); !ok || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%s: got %v\nwant prefix %s", config, err, want)
		}
	}
}
