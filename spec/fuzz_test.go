package spec

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
)

// Seeds shared by the config fuzzers.
var confSeeds = []string{
	dbnet,
	`{"cniVersion":"0.3.1","name":"legacy","type":"bridge","bridge":"cni1"}`,
	`{"cniVersion":"1.0.0","name":"n","disableCheck":"true","disableGC":false,"loadOnlyInlinedPlugins":true,"plugins":[{"type":"a"}]}`,
	`{"cniVersions":["0.4.0","1.1.0","9.9.9"],"name":"n","plugins":[{"type":"a","ipam":{"type":"b"},"prevResult":{"ips":[]}}]}`,
	`{"name":"n","plugins":[null]}`,
	`{"name":"n","type":"../x"}`,
	`{"name":"n","plugins":[{"type":"x","capabilities":{"mac":true},"cni.dev/attachments":[{"containerID":"c","ifname":"e"}]}]}`,
	`null`, `[]`, `{}`, `{"plugins":{}}`, `"x"`, ``,
}

// checkErr fails unless err is nil or a *Error with a non-zero code.
func checkErr(t *testing.T, err error) {
	t.Helper()
	var ce *Error
	if err != nil && (!errors.As(err, &ce) || ce.Code == 0) {
		t.Fatalf("error without a CNI code: %T %v", err, err)
	}
}

func FuzzParseConfList(f *testing.F) {
	for _, s := range confSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		l, err := ParseConfList(data)
		checkErr(t, err)
		if err != nil {
			return
		}
		if !IsSupported(l.Version()) {
			t.Fatalf("accepted list with unsupported version %q", l.Version())
		}
		for _, p := range l.Plugins {
			req, err := BuildRequest(p, l.Name, l.Version(), nil, map[string]any{"mac": "x"}, nil)
			checkErr(t, err)
			if err == nil && !json.Valid(req) {
				t.Fatalf("invalid request JSON: %s", req)
			}
		}
	})
}

func FuzzParsePluginConf(f *testing.F) {
	for _, s := range confSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := ParsePluginConf(data)
		checkErr(t, err)
		if err == nil {
			if err := ValidatePluginType("type", p.Network.Type); err != nil {
				t.Fatalf("accepted bad type: %v", err)
			}
			for _, v := range AllVersions {
				req, err := BuildRequest(p, "n", v, &Result{}, nil, nil)
				checkErr(t, err)
				if err == nil {
					if _, err := ParsePluginConf(req); err != nil {
						t.Fatalf("request does not re-parse: %v\n%s", err, req)
					}
				}
			}
		}
		l, err := ParseAny(data)
		checkErr(t, err)
		if err == nil && !IsSupported(l.Version()) {
			t.Fatalf("accepted unsupported version %q", l.Version())
		}
	})
}

var resultSeeds = []string{
	full110, full040(V030), full040(V040), full100(V100), full020(V010), full020(V020),
	exampleHostLocal, exampleBridge, exampleTuning,
	`{"cniVersion":"0.3.0","ip":[{"version":"4","address":"10.0.0.2/24"}]}`,
	`{"cniVersion":"1.0.0","ips":[{"address":"10.0.0.2/24","interface":-1}]}`,
	`{"cniVersion":"1.0.0","ips":[{"address":"10.0.0.2/24","interface":99}]}`,
	`{"cniVersion":"1.0.0","ips":[{"address":"::ffff:10.0.0.2/120","gateway":"fe80::1%eth0"}]}`,
	`{"ip4":{"ip":"10.0.0.2/24","routes":[{"dst":"::/0"}]}}`,
	`{"cniVersion":"1.1.0","dns":{"nameservers":[]}}`,
	`null`, `{}`, `[]`, `{"cniVersion":"9.9.9"}`, `{"routes":[null]}`,
}

func FuzzParseResult(f *testing.F) {
	for _, s := range resultSeeds {
		f.Add([]byte(s), "")
		f.Add([]byte(s), V020)
	}
	f.Add([]byte(`{"ips":[]}`), "bogus")
	f.Fuzz(func(t *testing.T, data []byte, fallback string) {
		r, err := ParseResult(data, fallback)
		checkErr(t, err)
		if err != nil {
			return
		}
		_ = r.String()
		c := r.Clone()
		for _, v := range AllVersions {
			out, err := r.Encode(v)
			if err != nil {
				t.Fatalf("Encode(%s) of a parsed result: %v", v, err)
			}
			back, err := ParseResult(out, "")
			if err != nil {
				t.Fatalf("Encode(%s) output does not re-parse: %v\n%s", v, err, out)
			}
			if back.CNIVersion != v {
				t.Fatalf("re-parsed version %q, want %q", back.CNIVersion, v)
			}
			// Writing what was read gives the same bytes again.
			again, err := back.Encode(v)
			if err != nil || !bytes.Equal(again, out) {
				t.Fatalf("Encode(%s) not stable:\n%s\n%s (%v)", v, out, again, err)
			}
		}
		// 0.3.0..1.0.0 convert losslessly among themselves: going through
		// any of them first changes nothing.
		for _, via := range []string{V030, V031, V040, V100} {
			mid, _ := r.Encode(via)
			m, err := ParseResult(mid, "")
			if err != nil {
				t.Fatal(err)
			}
			for _, to := range []string{V030, V031, V040, V100} {
				direct, _ := r.Encode(to)
				indirect, _ := m.Encode(to)
				if !bytes.Equal(direct, indirect) {
					t.Fatalf("%s via %s:\n%s\n%s", to, via, direct, indirect)
				}
			}
		}
		// Encoding does not modify the result.
		a, _ := c.Encode(V110)
		b, _ := r.Encode(V110)
		if !bytes.Equal(a, b) {
			t.Fatalf("Encode modified the result")
		}
	})
}

func FuzzParseCNIArgs(f *testing.F) {
	for _, s := range []string{"", "FOO=BAR;ABC=123", "A=;B=x;", ";;", "K=a=b", "=x", "FOO", "IgnoreUnknown=1;X=y"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		pairs, err := ParseCNIArgs(s)
		checkErr(t, err)
		if err != nil {
			return
		}
		// Formatting and parsing again gives the same pairs.
		again, err := ParseCNIArgs(FormatCNIArgs(pairs))
		if err != nil || len(again) != len(pairs) {
			t.Fatalf("FormatCNIArgs round trip: %v %v %v", pairs, again, err)
		}
		for i := range pairs {
			if pairs[i] != again[i] {
				t.Fatalf("pair %d: %v != %v", i, pairs[i], again[i])
			}
		}
	})
}

func FuzzLoadCNIArgs(f *testing.F) {
	for _, s := range []string{
		"IP=10.0.0.2;Gateway=fd00::1;PREFIX=10.0.0.0/24;K8S_POD_NAME=web-0;Debug=true;Count=-5;Size=65535;Ptr=7",
		"IgnoreUnknown=1;X=y", "IgnoreUnknown=maybe", "Count=999", "IP=", "Ptr=", "hidden=1", "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var a testArgs
		checkErr(t, LoadCNIArgs(s, &a))
	})
}

// Validation never panics and agrees with itself.
func FuzzValidate(f *testing.F) {
	for _, s := range []string{"eth0", "", ".", "..", "a/b", "é", "0123456789abcdef", "c1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		checkErr(t, ValidateContainerID(s))
		checkErr(t, ValidateNetworkName(s))
		checkErr(t, ValidateInterfaceName(s))
		checkErr(t, ValidatePluginType("type", s))
		if ValidateInterfaceName(s) == nil && (len(s) > 15 || bytes.ContainsAny([]byte(s), "/: \t\n")) {
			t.Fatalf("accepted interface name %q", s)
		}
	})
}
