package spec

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"
)

// full is a 1.1.0 result using every field of the model: two interfaces,
// 1.1.0-only interface and route fields, several addresses of each family
// (one without an interface), routes of both families and all DNS keys.
const full110 = `{
  "cniVersion": "1.1.0",
  "interfaces": [
    {"name": "br0", "mac": "00:11:22:33:44:55", "mtu": 1500},
    {"name": "eth0", "mac": "99:88:77:66:55:44", "mtu": 9000, "sandbox": "/var/run/netns/blue",
     "socketPath": "/run/vhost.sock", "pciID": "0000:00:1f.6"}
  ],
  "ips": [
    {"interface": 1, "address": "10.1.0.5/16", "gateway": "10.1.0.1"},
    {"interface": 1, "address": "2001:db8::5/64", "gateway": "2001:db8::1"},
    {"interface": 0, "address": "10.2.0.5/24"},
    {"address": "2001:db8:1::5/64"}
  ],
  "routes": [
    {"dst": "0.0.0.0/0"},
    {"dst": "10.3.0.0/16", "gw": "10.1.0.254", "mtu": 1400, "advmss": 1360, "priority": 100, "table": 200, "scope": 0},
    {"dst": "::/0", "gw": "2001:db8::1"}
  ],
  "dns": {"nameservers": ["10.1.0.1"], "domain": "example.com", "search": ["example.com"], "options": ["ndots:2"]}
}`

// full110Without11 is full110 as 0.3.0..1.0.0 can hold it (cniVersion aside).
const interfacesNo11 = `[
    {"name": "br0", "mac": "00:11:22:33:44:55"},
    {"name": "eth0", "mac": "99:88:77:66:55:44", "sandbox": "/var/run/netns/blue"}]`
const routesNo11 = `[
    {"dst": "0.0.0.0/0"},
    {"dst": "10.3.0.0/16", "gw": "10.1.0.254"},
    {"dst": "::/0", "gw": "2001:db8::1"}]`
const dnsFull = `{"nameservers": ["10.1.0.1"], "domain": "example.com", "search": ["example.com"], "options": ["ndots:2"]}`

func full100(v string) string {
	return `{"cniVersion": "` + v + `", "interfaces": ` + interfacesNo11 + `,
  "ips": [
    {"interface": 1, "address": "10.1.0.5/16", "gateway": "10.1.0.1"},
    {"interface": 1, "address": "2001:db8::5/64", "gateway": "2001:db8::1"},
    {"interface": 0, "address": "10.2.0.5/24"},
    {"address": "2001:db8:1::5/64"}],
  "routes": ` + routesNo11 + `, "dns": ` + dnsFull + `}`
}

// full040 is the same with the per-address "version" key of 0.3.x/0.4.0.
func full040(v string) string {
	return `{"cniVersion": "` + v + `", "interfaces": ` + interfacesNo11 + `,
  "ips": [
    {"version": "4", "interface": 1, "address": "10.1.0.5/16", "gateway": "10.1.0.1"},
    {"version": "6", "interface": 1, "address": "2001:db8::5/64", "gateway": "2001:db8::1"},
    {"version": "4", "interface": 0, "address": "10.2.0.5/24"},
    {"version": "6", "address": "2001:db8:1::5/64"}],
  "routes": ` + routesNo11 + `, "dns": ` + dnsFull + `}`
}

// full020 keeps the first address of each family and routes by family.
func full020(v string) string {
	return `{"cniVersion": "` + v + `",
  "ip4": {"ip": "10.1.0.5/16", "gateway": "10.1.0.1",
          "routes": [{"dst": "0.0.0.0/0"}, {"dst": "10.3.0.0/16", "gw": "10.1.0.254"}]},
  "ip6": {"ip": "2001:db8::5/64", "gateway": "2001:db8::1", "routes": [{"dst": "::/0", "gw": "2001:db8::1"}]},
  "dns": ` + dnsFull + `}`
}

// expectedFull is full110 encoded in each version: exactly what each can hold.
func expectedFull(v string) string {
	switch v {
	case V010, V020:
		return full020(v)
	case V030, V031, V040:
		return full040(v)
	case V100:
		return full100(v)
	}
	return full110
}

func mustParse(t testing.TB, data, fallback string) *Result {
	t.Helper()
	r, err := ParseResult([]byte(data), fallback)
	if err != nil {
		t.Fatalf("ParseResult: %v\n%s", err, data)
	}
	return r
}

func mustEncode(t testing.TB, r *Result, v string) []byte {
	t.Helper()
	b, err := r.Encode(v)
	if err != nil {
		t.Fatalf("Encode(%q): %v", v, err)
	}
	return b
}

func TestEncodeFullResultEveryVersion(t *testing.T) {
	r := mustParse(t, full110, "")
	for _, v := range AllVersions {
		t.Run(v, func(t *testing.T) {
			assertJSON(t, mustEncode(t, r, v), expectedFull(v))
		})
	}
}

// The model after parsing holds exactly the values of the input.
func TestParseResultModel(t *testing.T) {
	r := mustParse(t, full110, "")
	if r.CNIVersion != V110 || len(r.Interfaces) != 2 || len(r.IPs) != 4 || len(r.Routes) != 3 {
		t.Fatalf("unexpected shape: %s", r)
	}
	eth0 := *r.Interfaces[1]
	wantIf := Interface{Name: "eth0", Mac: "99:88:77:66:55:44", MTU: 9000, Sandbox: "/var/run/netns/blue", SocketPath: "/run/vhost.sock", PciID: "0000:00:1f.6"}
	if eth0 != wantIf {
		t.Errorf("interfaces[1] = %+v, want %+v", eth0, wantIf)
	}
	ip := r.IPs[0]
	if ip.Interface == nil || *ip.Interface != 1 || ip.Address != netip.MustParsePrefix("10.1.0.5/16") || ip.Gateway != netip.MustParseAddr("10.1.0.1") {
		t.Errorf("ips[0] = %+v", ip)
	}
	if r.IPs[2].Interface == nil || *r.IPs[2].Interface != 0 {
		t.Errorf("ips[2].interface = %v, want 0 (index 0 must not be lost)", r.IPs[2].Interface)
	}
	if r.IPs[3].Interface != nil {
		t.Errorf("ips[3].interface = %v, want nil", *r.IPs[3].Interface)
	}
	rt := r.Routes[1]
	if rt.MTU != 1400 || rt.AdvMSS != 1360 || rt.Priority != 100 || rt.Table == nil || *rt.Table != 200 || rt.Scope == nil || *rt.Scope != 0 {
		t.Errorf("routes[1] = %+v", rt)
	}
	if r.Routes[0].Table != nil || r.Routes[0].Scope != nil {
		t.Errorf("routes[0] has table/scope it did not have")
	}
}

// Parsing each version's encoding of full110 and writing it again gives the
// same document (every version round-trips through the model).
func TestRoundTripSameVersion(t *testing.T) {
	for _, v := range AllVersions {
		t.Run(v, func(t *testing.T) {
			in := expectedFull(v)
			r := mustParse(t, in, "")
			if r.CNIVersion != v {
				t.Errorf("CNIVersion = %q, want %q", r.CNIVersion, v)
			}
			assertJSON(t, mustEncode(t, r, ""), in)
			assertJSON(t, mustEncode(t, r, v), in)
		})
	}
}

// Among 0.3.0..1.1.0 conversion is lossless, except that going below 1.1.0
// drops the 1.1.0-only fields; 0.1.0 <-> 0.2.0 is lossless.
func TestConversionMatrix(t *testing.T) {
	rich := []string{V030, V031, V040, V100, V110}
	for _, from := range AllVersions {
		for _, to := range AllVersions {
			t.Run(from+"->"+to, func(t *testing.T) {
				src := expectedFull(from)
				out, err := Convert([]byte(src), "", to)
				if err != nil {
					t.Fatal(err)
				}
				fromRich, toRich := slices.Contains(rich, from), slices.Contains(rich, to)
				switch {
				case !toRich:
					// Down to 0.1/0.2 (or between them): first v4, first v6, routes by family.
					assertJSON(t, out, full020(to))
				case !fromRich:
					assertJSON(t, out, upFrom020(to))
				case from != V110 && to == V110:
					// Up to 1.1.0 from a version without the 1.1.0 fields.
					assertJSON(t, out, full100(to))
				default:
					assertJSON(t, out, expectedFull(to))
				}
				// And back: lossless unless information was dropped on the way.
				back, err := Convert(out, "", from)
				if err != nil {
					t.Fatal(err)
				}
				// Lossy: 1.1.0 fields below 1.1.0, and rich results down to 0.1/0.2.
				// 0.2 -> rich -> 0.2 is lossless: one address per family.
				if lossy := (from == V110 && to != V110) || (fromRich && !toRich); !lossy {
					assertJSON(t, back, src)
				}
			})
		}
	}
}

// upFrom020 is full020 converted up: no interfaces, no interface indexes,
// routes flattened in block order.
func upFrom020(v string) string {
	ver := func(f string) string {
		if Compare(v, V100) < 0 {
			return `"version": "` + f + `", `
		}
		return ""
	}
	return `{"cniVersion": "` + v + `",
  "ips": [{` + ver("4") + `"address": "10.1.0.5/16", "gateway": "10.1.0.1"},
          {` + ver("6") + `"address": "2001:db8::5/64", "gateway": "2001:db8::1"}],
  "routes": [{"dst": "0.0.0.0/0"}, {"dst": "10.3.0.0/16", "gw": "10.1.0.254"}, {"dst": "::/0", "gw": "2001:db8::1"}],
  "dns": ` + dnsFull + `}`
}

// Documented loss going to 0.1/0.2: a route of a family with no address has
// nowhere to go and is dropped; interfaces are dropped.
func TestDownTo020DropsRoutesWithoutAddressFamily(t *testing.T) {
	r := mustParse(t, `{"cniVersion":"1.0.0","interfaces":[{"name":"eth0"}],
		"ips":[{"interface":0,"address":"10.0.0.2/24"}],
		"routes":[{"dst":"10.9.0.0/16"},{"dst":"fd00::/8","gw":"fd00::1"}]}`, "")
	for _, v := range []string{V010, V020} {
		assertJSON(t, mustEncode(t, r, v), `{"cniVersion":"`+v+`","ip4":{"ip":"10.0.0.2/24","routes":[{"dst":"10.9.0.0/16"}]}}`)
	}
	// No addresses at all: an empty 0.2.0 result, not an error.
	empty := mustParse(t, `{"cniVersion":"1.1.0","interfaces":[{"name":"lo"}]}`, "")
	assertJSON(t, mustEncode(t, empty, V020), `{"cniVersion":"0.2.0"}`)
}

// Documented loss going below 1.1.0, field by field.
func TestDown110FieldsDropped(t *testing.T) {
	r := mustParse(t, `{"cniVersion":"1.1.0",
		"interfaces":[{"name":"eth0","mtu":1400,"socketPath":"/s","pciID":"0000:01:00.0"}],
		"routes":[{"dst":"10.0.0.0/8","mtu":1400,"advmss":1300,"priority":5,"table":100,"scope":253}]}`, "")
	assertJSON(t, mustEncode(t, r, V110), `{"cniVersion":"1.1.0",
		"interfaces":[{"name":"eth0","mtu":1400,"socketPath":"/s","pciID":"0000:01:00.0"}],
		"routes":[{"dst":"10.0.0.0/8","mtu":1400,"advmss":1300,"priority":5,"table":100,"scope":253}]}`)
	for _, v := range []string{V030, V031, V040, V100} {
		assertJSON(t, mustEncode(t, r, v), `{"cniVersion":"`+v+`","interfaces":[{"name":"eth0"}],"routes":[{"dst":"10.0.0.0/8"}]}`)
	}
	// Encoding below 1.1.0 must not modify the model.
	if r.Interfaces[0].MTU != 1400 || r.Routes[0].Table == nil {
		t.Error("Encode modified the result")
	}
}

// The spec's worked example (cni-spec-1.1.md, Appendix: Examples).
const (
	exampleHostLocal = `{
    "ips": [{"address": "10.1.0.5/16", "gateway": "10.1.0.1"}],
    "routes": [{"dst": "0.0.0.0/0"}],
    "dns": {"nameservers": [ "10.1.0.1" ]}
}`
	exampleBridge = `{
    "ips": [{"address": "10.1.0.5/16", "gateway": "10.1.0.1", "interface": 2}],
    "routes": [{"dst": "0.0.0.0/0"}],
    "interfaces": [
        {"name": "cni0", "mac": "00:11:22:33:44:55"},
        {"name": "veth3243", "mac": "55:44:33:22:11:11"},
        {"name": "eth0", "mac": "99:88:77:66:55:44", "sandbox": "/var/run/netns/blue"}
    ],
    "dns": {"nameservers": [ "10.1.0.1" ]}
}`
	exampleTuning = `{
    "ips": [{"address": "10.1.0.5/16", "gateway": "10.1.0.1", "interface": 2}],
    "routes": [{"dst": "0.0.0.0/0"}],
    "interfaces": [
        {"name": "cni0", "mac": "00:11:22:33:44:55"},
        {"name": "veth3243", "mac": "55:44:33:22:11:11"},
        {"name": "eth0", "mac": "00:11:22:33:44:66", "sandbox": "/var/run/netns/blue"}
    ],
    "dns": {"nameservers": [ "10.1.0.1" ]}
}`
)

// withVersion adds "cniVersion" to a JSON object literal.
func withVersion(v, obj string) string {
	return `{"cniVersion":"` + v + `",` + obj[1:]
}

func TestSpecAppendixResults(t *testing.T) {
	for name, ex := range map[string]string{"host-local": exampleHostLocal, "bridge": exampleBridge, "tuning": exampleTuning} {
		t.Run(name, func(t *testing.T) {
			// The examples carry no cniVersion: the request's (1.1.0) applies.
			r := mustParse(t, ex, V110)
			assertJSON(t, mustEncode(t, r, V110), withVersion(V110, ex))
			// Without a fallback the shape says "current".
			assertJSON(t, mustEncode(t, mustParse(t, ex, ""), ""), withVersion(Current, ex))
		})
	}
	bridge := mustParse(t, exampleBridge, V110)
	if got := *bridge.IPs[0].Interface; got != 2 || bridge.Interfaces[got].Name != "eth0" {
		t.Errorf("ips[0].interface = %d, want 2 (eth0)", got)
	}
	tuned := mustParse(t, exampleTuning, V110)
	if bridge.Interfaces[2].Mac == tuned.Interfaces[2].Mac || tuned.Interfaces[2].Mac != "00:11:22:33:44:66" {
		t.Errorf("tuning result mac = %s", tuned.Interfaces[2].Mac)
	}
	// The bridge example down to 0.4.0 and 0.2.0.
	assertJSON(t, mustEncode(t, bridge, V040), `{"cniVersion":"0.4.0",
		"ips":[{"version":"4","address":"10.1.0.5/16","gateway":"10.1.0.1","interface":2}],
		"routes":[{"dst":"0.0.0.0/0"}],
		"interfaces":[{"name":"cni0","mac":"00:11:22:33:44:55"},{"name":"veth3243","mac":"55:44:33:22:11:11"},
			{"name":"eth0","mac":"99:88:77:66:55:44","sandbox":"/var/run/netns/blue"}],
		"dns":{"nameservers":["10.1.0.1"]}}`)
	assertJSON(t, mustEncode(t, bridge, V020), `{"cniVersion":"0.2.0",
		"ip4":{"ip":"10.1.0.5/16","gateway":"10.1.0.1","routes":[{"dst":"0.0.0.0/0"}]},
		"dns":{"nameservers":["10.1.0.1"]}}`)
}

func TestInterfaceIndexMissingOrNegative(t *testing.T) {
	for _, in := range []string{
		`{"cniVersion":"1.0.0","ips":[{"address":"10.0.0.2/24","interface":-1}]}`,
		`{"cniVersion":"1.0.0","ips":[{"address":"10.0.0.2/24"}]}`,
		`{"cniVersion":"1.0.0","ips":[{"address":"10.0.0.2/24","interface":null}]}`,
	} {
		r := mustParse(t, in, "")
		if r.IPs[0].Interface != nil {
			t.Errorf("%s: interface = %d, want nil", in, *r.IPs[0].Interface)
		}
		assertJSON(t, mustEncode(t, r, V100), `{"cniVersion":"1.0.0","ips":[{"address":"10.0.0.2/24"}]}`)
		assertJSON(t, mustEncode(t, r, V031), `{"cniVersion":"0.3.1","ips":[{"version":"4","address":"10.0.0.2/24"}]}`)
	}
}

// 0.3.0's spec text called the list "ip"; some 0.3.0 plugins wrote that.
func TestV030OldIPKey(t *testing.T) {
	r := mustParse(t, `{"cniVersion":"0.3.0","ip":[{"version":"4","address":"10.0.0.2/24","gateway":"10.0.0.1"}]}`, "")
	assertJSON(t, mustEncode(t, r, ""), `{"cniVersion":"0.3.0","ips":[{"version":"4","address":"10.0.0.2/24","gateway":"10.0.0.1"}]}`)
	// "ips" wins when both are present.
	r = mustParse(t, `{"cniVersion":"0.3.0","ips":[{"address":"10.0.0.3/24"}],"ip":[{"address":"10.0.0.2/24"}]}`, "")
	if len(r.IPs) != 1 || r.IPs[0].Address.String() != "10.0.0.3/24" {
		t.Errorf("ips = %v", r.IPs)
	}
	// Only 0.3.0 had the typo: 0.3.1 ignores "ip".
	r = mustParse(t, `{"cniVersion":"0.3.1","ip":[{"address":"10.0.0.2/24"}]}`, "")
	if len(r.IPs) != 0 {
		t.Errorf("0.3.1 read the 0.3.0 \"ip\" key: %v", r.IPs)
	}
}

// Without cniVersion: fallback first, then the shape.
func TestParseResultVersionFallback(t *testing.T) {
	cases := []struct {
		data, fallback, wantVersion string
		wantIPs                     int
	}{
		{`{"ip4":{"ip":"10.0.0.2/24"}}`, "", V020, 1},
		{`{"ip6":{"ip":"fd00::2/64"}}`, "", V020, 1},
		{`{"ips":[{"address":"10.0.0.2/24"}]}`, "", Current, 1},
		{`{}`, "", Current, 0},
		{`{"ips":[{"address":"10.0.0.2/24"}]}`, V040, V040, 1},
		{`{"ip4":{"ip":"10.0.0.2/24"}}`, V010, V010, 1},
		// The data's own cniVersion beats the fallback.
		{`{"cniVersion":"0.2.0","ip4":{"ip":"10.0.0.2/24"}}`, V100, V020, 1},
		{`{"cniVersion":"1.0.0","ips":[{"address":"10.0.0.2/24"}]}`, V020, V100, 1},
		// A fallback is trusted over the shape (as libcni does): a current-shape
		// result read as 0.2.0 has no addresses.
		{`{"ips":[{"address":"10.0.0.2/24"}]}`, V020, V020, 0},
	}
	for _, c := range cases {
		r := mustParse(t, c.data, c.fallback)
		if r.CNIVersion != c.wantVersion || len(r.IPs) != c.wantIPs {
			t.Errorf("ParseResult(%s, %q): version %q with %d ips, want %q with %d", c.data, c.fallback, r.CNIVersion, len(r.IPs), c.wantVersion, c.wantIPs)
		}
	}
}

func TestParseResultMalformed(t *testing.T) {
	cases := []struct {
		data string
		code uint
		frag string
	}{
		{``, ErrDecodingFailure, "decode"},
		{`not json`, ErrDecodingFailure, "decode"},
		{`[]`, ErrDecodingFailure, "decode"},
		{`"x"`, ErrDecodingFailure, "decode"},
		{`null`, ErrDecodingFailure, "not a JSON object"},
		{`{"cniVersion":1}`, ErrDecodingFailure, "decode"},
		{`{"cniVersion":"9.9.9"}`, ErrIncompatibleVersion, `"9.9.9"`},
		{`{"cniVersion":"1.0.0","ips":[{}]}`, ErrDecodingFailure, `ips[0]`},
		{`{"cniVersion":"1.0.0","ips":[{"address":"10.0.0.300/24"}]}`, ErrDecodingFailure, "decode"},
		{`{"cniVersion":"1.0.0","ips":[{"address":"10.0.0.3"}]}`, ErrDecodingFailure, "decode"},
		{`{"cniVersion":"1.0.0","ips":[{"address":"10.0.0.3/24","gateway":"x"}]}`, ErrDecodingFailure, "decode"},
		{`{"cniVersion":"1.0.0","ips":[{"address":"10.0.0.3/24","interface":"0"}]}`, ErrDecodingFailure, "decode"},
		{`{"cniVersion":"1.0.0","ips":[{"address":"10.0.0.3/24","interface":1.5}]}`, ErrDecodingFailure, "decode"},
		{`{"cniVersion":"1.0.0","ips":{}}`, ErrDecodingFailure, "decode"},
		{`{"cniVersion":"1.0.0","routes":[{}]}`, ErrDecodingFailure, `routes[0]`},
		{`{"cniVersion":"1.0.0","routes":[null]}`, ErrDecodingFailure, `routes[0]`},
		{`{"cniVersion":"1.0.0","interfaces":[null]}`, ErrDecodingFailure, `interfaces[0]`},
		{`{"cniVersion":"1.0.0","interfaces":[{"name":1}]}`, ErrDecodingFailure, "decode"},
		{`{"cniVersion":"1.1.0","routes":[{"dst":"0.0.0.0/0","mtu":"x"}]}`, ErrDecodingFailure, "decode"},
		{`{"cniVersion":"1.0.0","dns":{"nameservers":"x"}}`, ErrDecodingFailure, "decode"},
		{`{"cniVersion":"0.2.0","ip4":{}}`, ErrDecodingFailure, `"ip"`},
		{`{"cniVersion":"0.2.0","ip4":{"ip":"10.0.0.2"}}`, ErrDecodingFailure, "decode"},
		{`{"cniVersion":"0.2.0","ip4":{"ip":"10.0.0.2/24","routes":[{"dst":"bad"}]}}`, ErrDecodingFailure, "decode"},
		{`{"cniVersion":"0.2.0","ip4":{"ip":"10.0.0.2/24","routes":[{}]}}`, ErrDecodingFailure, "routes"},
		{`{"cniVersion":"0.1.0","ip6":[]}`, ErrDecodingFailure, "decode"},
	}
	for _, c := range cases {
		t.Run(c.data, func(t *testing.T) {
			_, err := ParseResult([]byte(c.data), "")
			assertCode(t, err, c.code, c.frag)
		})
	}
}

func TestEncodeUnsupportedVersion(t *testing.T) {
	r := &Result{}
	_, err := r.Encode("0.5.0")
	assertCode(t, err, ErrIncompatibleVersion, `"0.5.0"`)
	// "" means the result's own version, then Current.
	assertJSON(t, mustEncode(t, r, ""), `{"cniVersion":"1.1.0"}`)
	r.CNIVersion = V031
	assertJSON(t, mustEncode(t, r, ""), `{"cniVersion":"0.3.1"}`)
}

// Empty DNS lists are not written as "dns":{}.
func TestEncodeEmptyDNSOmitted(t *testing.T) {
	r := mustParse(t, `{"cniVersion":"1.0.0","dns":{"nameservers":[],"search":[]}}`, "")
	for _, v := range AllVersions {
		assertJSON(t, mustEncode(t, r, v), `{"cniVersion":"`+v+`"}`)
	}
}

// A model built in code may hold nil entries; Encode and Clone skip them
// instead of panicking.
func TestEncodeSkipsNilEntries(t *testing.T) {
	r := &Result{
		Interfaces: []*Interface{nil, {Name: "eth0"}},
		IPs:        []*IPConfig{nil, {Address: netip.MustParsePrefix("10.0.0.2/24")}},
		Routes:     []*Route{nil, {Dst: netip.MustParsePrefix("0.0.0.0/0")}},
	}
	for _, v := range AllVersions {
		if _, err := r.Encode(v); err != nil {
			t.Errorf("Encode(%s): %v", v, err)
		}
	}
	c := r.Clone()
	assertJSON(t, mustEncode(t, c, V100), `{"cniVersion":"1.0.0","interfaces":[{"name":"eth0"}],"ips":[{"address":"10.0.0.2/24"}],"routes":[{"dst":"0.0.0.0/0"}]}`)
}

func TestCloneIsDeep(t *testing.T) {
	r := mustParse(t, full110, "")
	c := r.Clone()
	c.Interfaces[0].Name = "changed"
	*c.IPs[0].Interface = 7
	*c.Routes[1].Table = 7
	c.DNS.Nameservers[0] = "changed"
	assertJSON(t, mustEncode(t, r, ""), full110)
	if (*Result)(nil).Clone() != nil {
		t.Error("nil Clone")
	}
}

// MarshalJSON/UnmarshalJSON let a Result sit inside other JSON (caches).
func TestResultJSONEmbedding(t *testing.T) {
	type cache struct {
		Result *Result `json:"result"`
	}
	r := mustParse(t, expectedFull(V040), "")
	b, err := jsonMarshal(cache{r})
	if err != nil {
		t.Fatal(err)
	}
	assertJSON(t, b, `{"result":`+expectedFull(V040)+`}`)
	var back cache
	if err := jsonUnmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	assertJSON(t, mustEncode(t, back.Result, ""), expectedFull(V040))
	var null cache
	if err := jsonUnmarshal([]byte(`{"result":null}`), &null); err != nil || null.Result != nil {
		t.Errorf("null result: %v %v", err, null.Result)
	}
	if err := jsonUnmarshal([]byte(`{"result":{"ips":[{}]}}`), &back); err == nil {
		t.Error("invalid embedded result accepted")
	}
	if s := r.String(); canon(t, []byte(s)) != canon(t, []byte(expectedFull(V040))) {
		t.Errorf("String() = %s", s)
	}
	if s := (&Result{CNIVersion: "7"}).String(); s[0] != '<' {
		t.Errorf("String() of invalid = %s", s)
	}
}

func TestIPv4MappedAndZonedAddresses(t *testing.T) {
	// An IPv4-mapped IPv6 address is IPv6 for 0.2.0 and "version":"6".
	r := mustParse(t, `{"cniVersion":"1.0.0","ips":[{"address":"::ffff:10.0.0.2/120","gateway":"fe80::1%eth0"}]}`, "")
	assertJSON(t, mustEncode(t, r, V040), `{"cniVersion":"0.4.0","ips":[{"version":"6","address":"::ffff:10.0.0.2/120","gateway":"fe80::1%eth0"}]}`)
	assertJSON(t, mustEncode(t, r, V020), `{"cniVersion":"0.2.0","ip6":{"ip":"::ffff:10.0.0.2/120","gateway":"fe80::1%eth0"}}`)
}

func ExampleConvert() {
	out, _ := Convert([]byte(`{"cniVersion":"0.2.0","ip4":{"ip":"10.0.0.2/24","gateway":"10.0.0.1"}}`), "", V100)
	fmt.Println(string(out))
	// Output: {"cniVersion":"1.0.0","ips":[{"address":"10.0.0.2/24","gateway":"10.0.0.1"}]}
}

// A Result held by value (not through a pointer) still encodes in CNI format.
func TestResultByValueJSON(t *testing.T) {
	type holder struct {
		R Result `json:"r"`
	}
	r := mustParse(t, expectedFull(V100), "")
	b, err := jsonMarshal(holder{*r})
	if err != nil {
		t.Fatal(err)
	}
	assertJSON(t, b, `{"r":`+expectedFull(V100)+`}`)
	b, err = jsonMarshal([]Result{*r})
	if err != nil {
		t.Fatal(err)
	}
	assertJSON(t, b, `[`+expectedFull(V100)+`]`)
}

// A model built in code with an unset address or route destination is
// refused rather than written as something no reader can parse.
func TestEncodeRefusesUnsetAddresses(t *testing.T) {
	for _, r := range []*Result{
		{IPs: []*IPConfig{{Gateway: netip.MustParseAddr("10.0.0.1")}}},
		{Routes: []*Route{{GW: netip.MustParseAddr("10.0.0.1")}}},
	} {
		for _, v := range AllVersions {
			_, err := r.Encode(v)
			assertCode(t, err, ErrInternal, "cannot encode")
		}
	}
}
