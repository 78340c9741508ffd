package status

import (
	"encoding/json"
	"net/netip"
	"reflect"
	"testing"

	"github.com/patchbay-cni/patchbay/spec"
)

func result(t *testing.T, data string) *spec.Result {
	t.Helper()
	r, err := spec.ParseResult([]byte(data), "")
	if err != nil {
		t.Fatalf("ParseResult: %v", err)
	}
	return r
}

func jsonEq(t *testing.T, got, want string) {
	t.Helper()
	var a, b any
	if err := json.Unmarshal([]byte(got), &a); err != nil {
		t.Fatalf("got is not JSON: %v\n%s", err, got)
	}
	if err := json.Unmarshal([]byte(want), &b); err != nil {
		t.Fatalf("want is not JSON: %v\n%s", err, want)
	}
	if !reflect.DeepEqual(a, b) {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

func gws(s ...string) []netip.Addr {
	var out []netip.Addr
	for _, a := range s {
		out = append(out, netip.MustParseAddr(a))
	}
	return out
}

// Every CNI result version, with the sandbox-interface rules of §5.3.3.1.
func TestNewFromResults(t *testing.T) {
	for _, tc := range []struct {
		name   string
		result string // "" for no result
		ifname string
		want   Entry
	}{
		{"0.2.0: ip4+ip6 combined, interface from CNI_IFNAME, no mac",
			`{"cniVersion":"0.2.0","ip4":{"ip":"10.1.0.5/16","gateway":"10.1.0.1","routes":[{"dst":"0.0.0.0/0"}]},"ip6":{"ip":"2001:db8::5/64"},"dns":{"nameservers":["10.1.0.1"]}}`,
			"net1", Entry{Name: "ns/n", Interface: "net1", IPs: []string{"10.1.0.5", "2001:db8::5"}, DNS: &DNS{Nameservers: []string{"10.1.0.1"}}}},
		{"0.1.0: ip4 only",
			`{"cniVersion":"0.1.0","ip4":{"ip":"192.168.5.7/24"}}`,
			"net1", Entry{Name: "ns/n", Interface: "net1", IPs: []string{"192.168.5.7"}}},
		{"0.2.0 without a CNI_IFNAME: interface left blank",
			`{"cniVersion":"0.2.0","ip4":{"ip":"192.168.5.7/24"}}`,
			"", Entry{Name: "ns/n", IPs: []string{"192.168.5.7"}}},
		{"0.4.0 bridge: host interfaces skipped, rule 1",
			`{"cniVersion":"0.4.0","interfaces":[{"name":"cni0","mac":"0a:58:0a:01:00:01"},{"name":"veth1234","mac":"3a:1b:22:33:44:55"},{"name":"eth1","mac":"0a:58:0a:01:00:05","sandbox":"/var/run/netns/p1"}],
			  "ips":[{"version":"4","interface":0,"address":"10.1.0.1/16"},{"version":"4","interface":2,"address":"10.1.0.5/16","gateway":"10.1.0.1"},{"version":"6","interface":2,"address":"2001:db8::5/64"}],
			  "dns":{"nameservers":["10.1.0.1"],"domain":"example.com","search":["example.com"],"options":["ndots:5"]}}`,
			"net9", Entry{Name: "ns/n", Interface: "eth1", Mac: "0a:58:0a:01:00:05", IPs: []string{"10.1.0.5", "2001:db8::5"},
				DNS: &DNS{Nameservers: []string{"10.1.0.1"}, Domain: "example.com", Search: []string{"example.com"}}}},
		{"0.3.1: rule 1",
			`{"cniVersion":"0.3.1","interfaces":[{"name":"eth1","mac":"02:00:00:00:00:01","sandbox":"/proc/1/ns/net"}],"ips":[{"version":"4","interface":0,"address":"192.0.2.2/24"}]}`,
			"net1", Entry{Name: "ns/n", Interface: "eth1", Mac: "02:00:00:00:00:01", IPs: []string{"192.0.2.2"}}},
		{"1.1.0 multiple sandbox interfaces: the first one only, with its mtu",
			`{"cniVersion":"1.1.0","interfaces":[{"name":"host0","mac":"02:00:00:00:00:09"},{"name":"eth1","mac":"02:00:00:00:00:01","mtu":9000,"sandbox":"/run/netns/a"},{"name":"eth2","mac":"02:00:00:00:00:02","sandbox":"/run/netns/a"}],
			  "ips":[{"interface":2,"address":"10.2.0.5/24"},{"interface":1,"address":"10.1.0.5/24"},{"interface":1,"address":"2001:db8::5/64"},{"address":"10.9.0.5/24"}]}`,
			"net1", Entry{Name: "ns/n", Interface: "eth1", Mac: "02:00:00:00:00:01", MTU: 9000, IPs: []string{"10.1.0.5", "2001:db8::5"}}},
		{"1.1.0 no interfaces: rule 2, IPs without interface index",
			`{"cniVersion":"1.1.0","ips":[{"address":"10.1.0.5/24","gateway":"10.1.0.1"},{"address":"2001:db8::5/64"}],"routes":[{"dst":"0.0.0.0/0","gw":"10.1.0.1"}]}`,
			"net1", Entry{Name: "ns/n", Interface: "net1", IPs: []string{"10.1.0.5", "2001:db8::5"}}},
		{"1.1.0 no sandbox interface: rule 2 skips IPs of host interfaces",
			`{"cniVersion":"1.1.0","interfaces":[{"name":"host0","mac":"02:00:00:00:00:09"}],"ips":[{"interface":0,"address":"10.0.0.1/24"},{"address":"10.1.0.5/24"},{"interface":-1,"address":"10.2.0.5/24"}]}`,
			"net1", Entry{Name: "ns/n", Interface: "net1", IPs: []string{"10.1.0.5", "10.2.0.5"}}},
		{"1.0.0 sandbox interface but IPs without index: neither rule holds, no ips",
			`{"cniVersion":"1.0.0","interfaces":[{"name":"eth1","mac":"02:00:00:00:00:01","sandbox":"/run/netns/a"}],"ips":[{"address":"10.1.0.5/24"}]}`,
			"net1", Entry{Name: "ns/n", Interface: "eth1", Mac: "02:00:00:00:00:01"}},
		{"1.1.0 empty result",
			`{"cniVersion":"1.1.0"}`,
			"net1", Entry{Name: "ns/n", Interface: "net1"}},
		{"IP over InfiniBand: 20-byte hardware address also as infiniband-guid (§5.4 example)",
			`{"cniVersion":"1.0.0","interfaces":[{"name":"ib0","mac":"80:00:11:22:33:44:55:66:77:88:99:aa:bb:cc:dd:ee:ff:00:11:22","sandbox":"/run/netns/a"}],"ips":[{"interface":0,"address":"198.51.100.1/24"}]}`,
			"net1", Entry{Name: "ns/n", Interface: "ib0", Mac: "80:00:11:22:33:44:55:66:77:88:99:aa:bb:cc:dd:ee:ff:00:11:22",
				InfinibandGUID: "80:00:11:22:33:44:55:66:77:88:99:aa:bb:cc:dd:ee:ff:00:11:22", IPs: []string{"198.51.100.1"}}},
		{"no result: the minimal map (§5.1.1)", "", "net1", Entry{Name: "ns/n", Interface: "net1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := Input{Name: "ns/n", IfName: tc.ifname}
			if tc.result != "" {
				in.Result = result(t, tc.result)
			}
			got, err := New(in)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// A result built in code (CNIVersion "") is read as the current version.
func TestNewResultInCode(t *testing.T) {
	r := &spec.Result{
		Interfaces: []*spec.Interface{{Name: "eth1", Mac: "02:00:00:00:00:01", Sandbox: "/x"}},
		IPs:        []*spec.IPConfig{{Interface: spec.IntPtr(0), Address: netip.MustParsePrefix("10.0.0.2/24")}, {Interface: spec.IntPtr(-1), Address: netip.MustParsePrefix("10.9.0.2/24")}},
	}
	got, err := New(Input{Name: "ns/n", Result: r, IfName: "net1"})
	if err != nil {
		t.Fatal(err)
	}
	want := Entry{Name: "ns/n", Interface: "eth1", Mac: "02:00:00:00:00:01", IPs: []string{"10.0.0.2"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v want %+v", got, want)
	}
}

func TestNewDefaultRouteAndDeviceInfo(t *testing.T) {
	di := &DeviceInfo{Type: "pci", Version: "1.0.0", Pci: &PciDevice{PciAddress: "0000:18:02.5", PfPciAddress: "0000:18:00.0"}}
	got, err := New(Input{Name: "namespace-b/sriov-network_a", IfName: "net1", DeviceInfo: di, DefaultRoute: gws("192.0.2.1", "2001:db8::1")})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(got)
	jsonEq(t, string(b), `{"name":"namespace-b/sriov-network_a","interface":"net1","default":false,"default-route":["192.0.2.1","2001:db8::1"],
		"device-info":{"type":"pci","version":"1.0.0","pci":{"pci-address":"0000:18:02.5","pf-pci-address":"0000:18:00.0"}}}`)

	for _, tc := range []struct {
		di   DeviceInfo
		want string
	}{
		{DeviceInfo{Version: "1.0.0", Pci: &PciDevice{}}, `network status of "ns/n": device-info: "type" and "version" are required (got type "", version "1.0.0")`},
		{DeviceInfo{Type: "pci", Version: "1.0.0"}, `network status of "ns/n": device-info: type "pci" but no "pci" map`},
		{DeviceInfo{Type: "usb", Version: "1.0.0"}, `network status of "ns/n": device-info: unknown type "usb" (known: pci, vdpa, vhost-user, memif)`},
	} {
		if _, err := New(Input{Name: "ns/n", DeviceInfo: &tc.di}); err == nil || err.Error() != tc.want {
			t.Errorf("got %v\nwant %s", err, tc.want)
		}
	}
	if _, err := New(Input{}); err == nil {
		t.Error("an entry without name must be refused (§5.3.1: required)")
	}
}

func TestDefaultGateways(t *testing.T) {
	r := result(t, `{"cniVersion":"1.0.0","routes":[{"dst":"0.0.0.0/0","gw":"192.0.2.1"},{"dst":"10.0.0.0/8","gw":"192.0.2.9"},{"dst":"::/0","gw":"2001:db8::1"},{"dst":"::/0"}]}`)
	if got := DefaultGateways(r); !reflect.DeepEqual(got, gws("192.0.2.1", "2001:db8::1")) {
		t.Errorf("got %v", got)
	}
	if DefaultGateways(nil) != nil {
		t.Error("nil result")
	}
}

// §5.4, first example ("with a single gateway"), built from CNI results.
// Differences from the printed example, all required by the text of §5:
// "default": false is written on the other entries (§5.3.5 says the key is
// required), and the InfiniBand entry also has "mac" (§5.3.4: the hardware
// address of the interface). The typographic quote after "192.0.2.1" in the
// printed example is a plain one here. "ips" are bare addresses: §5.3.3
// says "addresses", and the readers of the annotation (Multus, the NAD
// client library, whereabouts' reconciler) only accept bare ones; the
// printed example's prefix lengths are not written.
func TestEncodeSpecExampleSingleGateway(t *testing.T) {
	entries := specExampleEntries(t, gws("192.0.2.1"))
	got, err := Encode(entries)
	if err != nil {
		t.Fatal(err)
	}
	jsonEq(t, got, `[
{
"name": "namespace-a/cluster-wide-default",
"interface": "eth5",
"ips": [ "192.0.2.2", "2001:db8::2230" ],
"mac": "02:11:22:33:44:54",
"default-route": ["192.0.2.1"],
"default": true
},
{
"name": "namespace-b/some-network",
"interface": "eth1",
"ips": [ "192.0.2.2", "2001:db8::2234" ],
"mac": "02:11:22:33:44:55",
"dns": {
"nameservers": [ "192.0.2.1", "2001:db8:4860::8888" ],
"search": [ "eng.example.com", "example.com" ]
},
"default": false
},
{
"name": "namespace-a/an-ip-over-infiniband-network",
"interface": "ib0",
"ips": [ "198.51.100.1" ],
"mac": "80:00:11:22:33:44:55:66:77:88:99:aa:bb:cc:dd:ee:ff:00:11:22",
"infiniband-guid": "80:00:11:22:33:44:55:66:77:88:99:aa:bb:cc:dd:ee:ff:00:11:22",
"default": false
}
]`)
}

// §5.4, second example ("with multiple gateways").
func TestEncodeSpecExampleMultipleGateways(t *testing.T) {
	entries := specExampleEntries(t, gws("192.0.2.1", "2001:db8::1", "2001:db8::2"))
	got, err := Encode(entries)
	if err != nil {
		t.Fatal(err)
	}
	var list []map[string]any
	if err := json.Unmarshal([]byte(got), &list); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(list[0]["default-route"])
	if string(b) != `["192.0.2.1","2001:db8::1","2001:db8::2"]` {
		t.Errorf("default-route = %s", b)
	}
}

func specExampleEntries(t *testing.T, defaultGWs []netip.Addr) []Entry {
	t.Helper()
	def, err := New(Input{Name: "namespace-a/cluster-wide-default", Default: true, IfName: "eth0", DefaultRoute: defaultGWs,
		Result: result(t, `{"cniVersion":"1.0.0","interfaces":[{"name":"eth5","mac":"02:11:22:33:44:54","sandbox":"/var/run/netns/p"}],
			"ips":[{"interface":0,"address":"192.0.2.2/24","gateway":"192.0.2.1"},{"interface":0,"address":"2001:db8::2230/32"}]}`)})
	if err != nil {
		t.Fatal(err)
	}
	some, err := New(Input{Name: "namespace-b/some-network", IfName: "net1",
		Result: result(t, `{"cniVersion":"0.4.0","interfaces":[{"name":"veth9","mac":"02:99:99:99:99:99"},{"name":"eth1","mac":"02:11:22:33:44:55","sandbox":"/var/run/netns/p"}],
			"ips":[{"version":"4","interface":1,"address":"192.0.2.2/24"},{"version":"6","interface":1,"address":"2001:db8::2234/32"}],
			"dns":{"nameservers":["192.0.2.1","2001:db8:4860::8888"],"search":["eng.example.com","example.com"]}}`)})
	if err != nil {
		t.Fatal(err)
	}
	ib, err := New(Input{Name: "namespace-a/an-ip-over-infiniband-network", IfName: "net2",
		Result: result(t, `{"cniVersion":"1.1.0","interfaces":[{"name":"ib0","mac":"80:00:11:22:33:44:55:66:77:88:99:aa:bb:cc:dd:ee:ff:00:11:22","sandbox":"/var/run/netns/p"}],
			"ips":[{"interface":0,"address":"198.51.100.1/24"}]}`)})
	if err != nil {
		t.Fatal(err)
	}
	return []Entry{def, some, ib}
}

// §5.4, third example ("with device information"), corrected where the
// printed text is not JSON (typographic quotes) and with "default": true on
// the cluster-wide default entry, which §5.2 requires. The userspace entry's
// "device" key and leading-blank MACs are kept as printed: Decode keeps what
// it can read, and unknown keys are dropped.
func TestDecodeEncodeDeviceInfoExample(t *testing.T) {
	const ann = `[
{
"name": "namespace-a/cluster-wide-default",
"interface": "eth0",
"ips": [ "192.0.2.2/24", "2001:db8::2230/32" ],
"mac": "02:11:22:33:44:54",
"default-route": ["192.0.2.1"],
"default": true
},
{
"name": "namespace-b/sriov-network_a",
"interface": "net1",
"device-info": {
"type": "pci",
"version": "1.0.0",
"pci": {
"pci-address": "0000:18:02.5",
"pf-pci-address": "0000:18:00.0"
}
}
},
{
"name": "namespace-b/sriov-network_b",
"interface": "net2",
"device-info": {
"type": "pci",
"version": "1.0.0",
"pci": {
"pci-address": "0000:18:0a.2",
"vhost-net": "/dev/vhost-net/",
"pf-pci-address": "0000:18:00.1"
}
}
},
{
"name": "namespace-c/userspace_net1",
"interface": "net3",
"mac": " 64:1f:74:32:2e:6d",
"device": {
"type": "vhost-user",
"version": "1.0.0",
"vhost-user": {
"mode": "client",
"path": "/var/run/net3/vhost.sock"
}
}
},
{
"name": "namespace-d/vdpa_net1",
"interface": "virtio0",
"mac": " 64:1f:74:32:2e:6e",
"device-info": {
"type": "vdpa",
"version": "1.0.0",
"vdpa": {
"parent-device": "/sys/bus/vdpa/devices",
"driver": "vhost",
"device": "vdpa2",
"path": "/dev/vhost-vdpa0",
"pci-address": "0000:04:02.7",
"pf-pci-address": "0000:04:00.0"
}
}
}
]`
	entries, err := Decode(ann)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 5 || entries[1].DeviceInfo.Pci.PciAddress != "0000:18:02.5" || entries[2].DeviceInfo.Pci.Vhostnet != "/dev/vhost-net/" ||
		entries[4].DeviceInfo.Vdpa.Path != "/dev/vhost-vdpa0" || entries[4].DeviceInfo.Vdpa.Device != "vdpa2" || entries[3].DeviceInfo != nil {
		t.Fatalf("decoded: %+v", entries)
	}
	for i, e := range entries {
		if e.DeviceInfo != nil {
			if err := e.DeviceInfo.Validate(); err != nil {
				t.Errorf("entry %d: %v", i, err)
			}
		}
	}
	got, err := Encode(entries)
	if err != nil {
		t.Fatal(err)
	}
	again, err := Decode(got)
	if err != nil || !reflect.DeepEqual(again, entries) {
		t.Errorf("round trip changed the entries: %v\n%s", err, got)
	}
}

func TestValidate(t *testing.T) {
	def := Entry{Name: "ns/default", Interface: "eth0", Default: true}
	for _, tc := range []struct {
		name    string
		entries []Entry
		want    string
	}{
		{"ok", []Entry{def, {Name: "ns/a", Interface: "net1", Mac: "02:00:00:00:00:01"}}, ""},
		{"no default entry (§5.2)", []Entry{{Name: "ns/a"}}, `network status: exactly one entry must be the cluster-wide default network, found 0 ()`},
		{"two defaults (§5.3.5)", []Entry{def, {Name: "ns/b", Default: true}}, `network status: exactly one entry must be the cluster-wide default network, found 2 (ns/default, ns/b)`},
		{"mac without interface (§5.3.4)", []Entry{def, {Name: "ns/a", Mac: "02:00:00:00:00:01"}}, `network status [1] ("ns/a"): "mac" without "interface"`},
		{"no name (§5.3.1)", []Entry{def, {Interface: "net1"}}, `network status [1]: "name" is required`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Validate(tc.entries)
			if got := errString(err); got != tc.want {
				t.Errorf("got %q want %q", got, tc.want)
			}
			if _, encErr := Encode(tc.entries); errString(encErr) != tc.want {
				t.Errorf("Encode must validate: %v", encErr)
			}
		})
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// The encoding always writes "default" and leaves out empty optional keys.
func TestEncodeKeys(t *testing.T) {
	got, err := Encode([]Entry{{Name: "ns/default", Default: true}, {Name: "ns/a"}})
	if err != nil {
		t.Fatal(err)
	}
	want := "[\n    {\n        \"name\": \"ns/default\",\n        \"default\": true\n    },\n    {\n        \"name\": \"ns/a\",\n        \"default\": false\n    }\n]"
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	if _, err := Decode(`{"name":"x"}`); err == nil {
		t.Error("Decode of a non-list must fail")
	}
	if NetworkName("ns", "n") != "ns/n" {
		t.Error("NetworkName")
	}
}

func BenchmarkNewAndEncode(b *testing.B) {
	r, _ := spec.ParseResult([]byte(`{"cniVersion":"1.1.0","interfaces":[{"name":"veth9","mac":"02:99:99:99:99:99"},{"name":"eth1","mac":"02:11:22:33:44:55","sandbox":"/var/run/netns/p"}],
		"ips":[{"interface":1,"address":"192.0.2.2/24"},{"interface":1,"address":"2001:db8::2234/32"}],"dns":{"nameservers":["192.0.2.1"]}}`), "")
	for b.Loop() {
		d, _ := New(Input{Name: "ns/default", Default: true, Result: r, IfName: "eth0"})
		e, _ := New(Input{Name: "ns/n", Result: r, IfName: "net1"})
		if _, err := Encode([]Entry{d, e}); err != nil {
			b.Fatal(err)
		}
	}
}
