package policy

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/patchbay-cni/patchbay/runtime"
	"github.com/patchbay-cni/patchbay/spec"
)

// FuzzPolicy parses a policy and checks a network against it and against
// the built-in policy. Besides "no panic, stable, printable messages", it
// holds the check to what a plugin really reads: when the built-in policy
// finds nothing wrong, the configuration each plugin receives, decoded by
// encoding/json as our plugins and the reference's decode it, must
// satisfy the rules (host-local's dataDir, bridge's bridge, tuning's
// sysctl keys, portmap's runtimeConfig) — whatever the case of the names,
// duplicates or nesting.
func FuzzPolicy(f *testing.F) {
	for _, s := range [][2]string{
		{`{}`, `{"type":"bridge","bridge":"b1","ipam":{"type":"host-local","dataDir":"/var/lib/cni/networks/x"}}`},
		{`{"mode":"audit","types":{"sriov":{}}}`, `{"type":"sriov","ipam":{"type":"host-local","DataDir":"/etc"}}`},
		{`{"types":{"host-local":{"keys":{"subnet":{"within":["10.0.0.0/8"]}}}}}`, `{"type":"ptp","ipam":{"type":"host-local","subnet":"10.1.0.0/16"}}`},
		{`{"otherTypes":"allow"}`, `{"type":"x","ipam":{"type":"host-local","dataDir":"/a","dataDir":"/var/lib/cni/networks"}}`},
		{`{"types":{"flannel":true}}`, `{"type":"flannel","delegate":{"bridge":"cni0"}}`},
		{`{"types":{"tuning":{"keys":{"sysctl":{"names":true,"prefix":["net."]}}}}}`, `{"type":"tuning","sysctl":{"net.a":"1","kernel.b":"2"}}`},
		{`{"types":{"portmap":{"keys":{"runtimeConfig.portMappings.hostPort":{"min":30000}}}}}`, `{"type":"portmap","capabilities":{"portMappings":true}}`},
		{"mode: off\n", `{"type":"bridge","Bridge":"","BRIDGE":"cni0"}`},
		{`{"builtin":false}`, `{"type":"bridge","ipam":{"type":"multus","delegates":[{"plugins":[{"type":"x"}]}]}}`},
		{`{"types":{"multus":{}}}`, `{"type":"multus","delegates":[{"type":"bridge","bridge":"docker0"}]}`},
	} {
		f.Add([]byte(s[0]), []byte(s[1]))
	}
	caps := map[string]any{"portMappings": []any{map[string]any{"hostPort": 22, "containerPort": 80}}, "mac": "02:00:00:00:00:01"}
	f.Fuzz(func(t *testing.T, policyText, plugin []byte) {
		p, err := Parse(policyText, "nadPolicy")
		if err != nil {
			if ce, ok := err.(*spec.Error); !ok || ce.Code != spec.ErrInvalidNetworkConfig || !strings.HasPrefix(ce.Msg, "nadPolicy") {
				t.Fatalf("Parse error %v: want code 7 naming nadPolicy", err)
			}
			p = nil
		}
		l, err := spec.ParseConfList([]byte(`{"cniVersion":"1.0.0","name":"n","plugins":[` + string(plugin) + `]}`))
		if err != nil {
			return
		}
		n := Network{List: l, CapabilityArgs: caps}
		for _, pol := range []*Policy{Default(), p} {
			if pol == nil {
				continue
			}
			vs := pol.Check(n)
			if again := pol.Check(n); !reflect.DeepEqual(vs, again) {
				t.Fatalf("Check is not stable: %v then %v", vs, again)
			}
			for _, v := range vs {
				s := v.String()
				if v.Rule == "" || v.Why == "" || v.Where == "" {
					t.Fatalf("incomplete violation %#v", v)
				}
				for _, r := range s {
					if r < 0x20 || r == 0x7f {
						t.Fatalf("violation text has a control character: %q", s)
					}
				}
			}
		}
		if len(Default().Check(n)) == 0 {
			checkWhatPluginsRead(t, l, caps)
		}
		Types(l)
	})
}

// checkWhatPluginsRead decodes each plugin's request the way a Go plugin
// does and asserts the built-in rules hold on what it gets.
func checkWhatPluginsRead(t *testing.T, l *spec.ConfList, caps map[string]any) {
	for _, pc := range l.Plugins {
		req, err := spec.BuildRequest(pc, l.Name, l.Version(), nil, runtime.RuntimeConfigFor(pc, caps), nil)
		if err != nil {
			continue
		}
		var c struct {
			Type   string            `json:"type"`
			Bridge *string           `json:"bridge"`
			SysCtl map[string]string `json:"sysctl"`
			IPAM   struct {
				Type    string `json:"type"`
				DataDir string `json:"dataDir"`
			} `json:"ipam"`
			RuntimeConfig struct {
				PortMappings json.RawMessage `json:"portMappings"`
			} `json:"runtimeConfig"`
		}
		if json.Unmarshal(req, &c) != nil {
			continue
		}
		switch pc.Network.Type {
		case "bridge":
			name := "cni0"
			if c.Bridge != nil && *c.Bridge != "" {
				name = *c.Bridge
			}
			if name == "cni0" || name == "docker0" {
				t.Fatalf("allowed, yet bridge reads bridge %q: %s", name, req)
			}
		case "tuning":
			for k := range c.SysCtl {
				if !strings.HasPrefix(k, "net.") && !strings.HasPrefix(k, "net/") {
					t.Fatalf("allowed, yet tuning reads sysctl %q: %s", k, req)
				}
			}
		case "portmap":
			if len(c.RuntimeConfig.PortMappings) > 0 && string(c.RuntimeConfig.PortMappings) != "null" && string(c.RuntimeConfig.PortMappings) != "[]" {
				t.Fatalf("allowed, yet portmap reads portMappings %s: %s", c.RuntimeConfig.PortMappings, req)
			}
		}
		if c.IPAM.Type == "host-local" && c.IPAM.DataDir != "" && !under(c.IPAM.DataDir, []string{"/var/lib/cni/networks"}) {
			t.Fatalf("allowed, yet host-local reads dataDir %q: %s", c.IPAM.DataDir, req)
		}
	}
}
