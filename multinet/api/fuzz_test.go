package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/patchbay-cni/patchbay/spec"
)

// FuzzParseConfig: a NetworkAttachmentDefinition's spec.config (§3.4.1
// rule 1, §3.4.2 name injection). Never a panic; no configuration (blank)
// gives neither a list nor an error; a refusal is a *spec.Error with a
// configuration code whose message names the object; an accepted
// configuration is what spec.ParseAny reads — unchanged when it names
// itself, else with the object's name added and every other key as
// written — and each delegate's request carries that name.
func FuzzParseConfig(f *testing.F) {
	for _, s := range [][2]string{
		{"a-bridge-network", `{"cniVersion":"0.3.0","type":"awesome-plugin"}`},
		{"another", `{"cniVersion":"0.3.0","name":"another-bridge-network","plugins":[{"type":"bridge","bridge":"br0","ipam":{"type":"host-local","subnet":"192.168.5.0/24"}},{"type":"tuning","sysctl":{"net.ipv4.conf.all.log_martians":"1"}}]}`},
		{"obj", `{"cniVersion":"1.0.0","plugins":[{"type":"bridge"}]}`},
		{"obj", `{"cniVersion":"1.0.0","name":"","type":"macvlan","master":"eth0"}`},
		{"obj", `{"cniVersion":"1.0.0","name":5,"type":"macvlan"}`},
		{"obj", `{"cniVersion":"1.0.0","Name":"x","type":"macvlan"}`},
		{"obj", "  \n"},
		{"obj", `{"cniVersion":"9.9.9","type":"bridge"}`},
		{"", `{"type":"bridge"}`},
		{"obj", `[1]`},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, name, config string) {
		nad := &NetworkAttachmentDefinition{Metadata: ObjectMeta{Name: name, Namespace: "ns"}, Spec: NetworkAttachmentDefinitionSpec{Config: config}}
		l, err := ParseConfig(nad)
		blank := strings.TrimSpace(config) == ""
		if blank != (l == nil && err == nil) {
			t.Fatalf("blank %v, got %v, %v", blank, l, err)
		}
		if blank {
			return
		}
		if err != nil {
			var ce *spec.Error
			if !errors.As(err, &ce) || !slices.Contains([]uint{spec.ErrIncompatibleVersion, spec.ErrDecodingFailure, spec.ErrInvalidNetworkConfig}, ce.Code) {
				t.Fatalf("error %T %v: want a configuration error", err, err)
			}
			if !strings.HasPrefix(ce.Msg, "NetworkAttachmentDefinition ns/"+name+": ") {
				t.Fatalf("error does not name the object: %v", err)
			}
			return
		}
		if spec.ValidateNetworkName(l.Name) != nil {
			t.Fatalf("accepted network name %q", l.Name)
		}
		var orig map[string]json.RawMessage
		if err := json.Unmarshal([]byte(config), &orig); err != nil {
			t.Fatalf("accepted what is not a JSON object: %v", err)
		}
		var own *string
		if raw, ok := orig["name"]; ok && !bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
			var s string
			if json.Unmarshal(raw, &s) != nil {
				t.Fatalf("accepted \"name\" %s, which is not a string", raw)
			}
			own = &s
		}
		if own != nil && *own != "" {
			want, err := spec.ParseAny([]byte(strings.TrimSpace(config)))
			if err != nil || want.Name != l.Name || len(want.Plugins) != len(l.Plugins) {
				t.Fatalf("a configuration that names itself was changed: %v, %+v", err, l)
			}
		} else {
			if l.Name != name {
				t.Fatalf("injected name %q, want the object's %q", l.Name, name)
			}
			var got map[string]json.RawMessage
			if err := json.Unmarshal(l.Bytes, &got); err != nil {
				t.Fatal(err)
			}
			for k, v := range orig {
				if k != "name" && !reflect.DeepEqual(value(t, got[k]), value(t, v)) {
					t.Fatalf("key %q changed by the name injection: %s -> %s", k, v, got[k])
				}
			}
		}
		for _, p := range l.Plugins {
			req, err := spec.BuildRequest(p, l.Name, l.Version(), nil, nil, nil)
			if err != nil {
				continue
			}
			var got struct {
				Name string `json:"name"`
			}
			if json.Unmarshal(req, &got) != nil || got.Name != l.Name {
				t.Fatalf("delegate request names %q, the network is %q: %s", got.Name, l.Name, req)
			}
		}
	})
}

// value is what a plugin decodes from raw (re-encoding may escape
// characters differently: "&" and "\u0026" are the same value).
func value(t *testing.T, raw json.RawMessage) any {
	t.Helper()
	if raw == nil {
		return "<absent>"
	}
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		t.Fatalf("%s: %v", raw, err)
	}
	return v
}
