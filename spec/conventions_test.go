package spec

import (
	"encoding/json"
	"net/netip"
	"reflect"
	"testing"
)

// runtimeConfig with every well-known capability, values from the
// CONVENTIONS table.
const conventionsRC = `{
  "portMappings": [
    { "hostPort": 8080, "containerPort": 80, "protocol": "tcp" },
    { "hostPort": 8000, "containerPort": 8001, "protocol": "udp", "hostIP": "127.0.0.1" }
  ],
  "ipRanges": [[{ "subnet": "10.1.2.0/24", "rangeStart": "10.1.2.3", "rangeEnd": "10.1.2.99", "gateway": "10.1.2.254" }]],
  "bandwidth": { "ingressRate": 2048, "ingressBurst": 1600, "egressRate": 4096, "egressBurst": 1600 },
  "dns": { "searches" : [ "internal.yoyodyne.net", "corp.tyrell.net" ], "servers": [ "8.8.8.8", "10.0.0.10" ], "options": ["ndots:5"] },
  "ips": [ "192.168.0.1", "10.10.0.1/24", "3ffe:ffff:0:01ff::2", "3ffe:ffff:0:01ff::1/64" ],
  "mac": "c2:11:22:33:44:55",
  "infinibandGUID": "c2:11:22:33:44:55:66:77",
  "deviceID": "0000:04:00.5",
  "aliases": ["my-container", "primary-db"],
  "cgroupPath": "/kubelet.slice/kubelet-kubepods.slice"
}`

func TestRuntimeConfigConventions(t *testing.T) {
	var rc RuntimeConfig
	if err := json.Unmarshal([]byte(conventionsRC), &rc); err != nil {
		t.Fatal(err)
	}
	want := RuntimeConfig{
		PortMappings: []PortMapping{{8080, 80, "tcp", ""}, {8000, 8001, "udp", "127.0.0.1"}},
		IPRanges:     [][]IPRange{{{Subnet: "10.1.2.0/24", RangeStart: "10.1.2.3", RangeEnd: "10.1.2.99", Gateway: "10.1.2.254"}}},
		Bandwidth:    &Bandwidth{2048, 1600, 4096, 1600},
		DNS:          &RuntimeDNS{Servers: []string{"8.8.8.8", "10.0.0.10"}, Searches: []string{"internal.yoyodyne.net", "corp.tyrell.net"}, Options: []string{"ndots:5"}},
		IPs:          []string{"192.168.0.1", "10.10.0.1/24", "3ffe:ffff:0:01ff::2", "3ffe:ffff:0:01ff::1/64"},
		Mac:          "c2:11:22:33:44:55", InfinibandGUID: "c2:11:22:33:44:55:66:77", DeviceID: "0000:04:00.5",
		Aliases: []string{"my-container", "primary-db"}, CgroupPath: "/kubelet.slice/kubelet-kubepods.slice",
	}
	if !reflect.DeepEqual(rc, want) {
		t.Errorf("got  %+v\nwant %+v", rc, want)
	}
	b, err := json.Marshal(rc)
	if err != nil {
		t.Fatal(err)
	}
	assertJSON(t, b, conventionsRC)
	assertJSON(t, must(json.Marshal(RuntimeConfig{})), `{}`)
}

func TestArgsConvention(t *testing.T) {
	var a Args
	if err := json.Unmarshal([]byte(`{"cni":{"ips":["10.0.0.2/24"],"mac":"c2:11:22:33:44:55"},"labels":[{"key":"app","value":"db"}]}`), &a); err != nil {
		t.Fatal(err)
	}
	if a.CNI == nil || a.CNI.IPs[0] != "10.0.0.2/24" || a.CNI.Mac != "c2:11:22:33:44:55" {
		t.Errorf("%+v", a.CNI)
	}
}

func TestParseIPMaybePrefix(t *testing.T) {
	for _, c := range []struct {
		in   string
		addr string
		bits int
	}{
		{"192.168.0.1", "192.168.0.1", -1},
		{"10.10.0.1/24", "10.10.0.1", 24},
		{"3ffe:ffff:0:01ff::2", "3ffe:ffff:0:1ff::2", -1},
		{"3ffe:ffff:0:01ff::1/64", "3ffe:ffff:0:1ff::1", 64},
	} {
		a, bits, err := ParseIPMaybePrefix(c.in)
		if err != nil || a != netip.MustParseAddr(c.addr) || bits != c.bits {
			t.Errorf("ParseIPMaybePrefix(%q) = %v, %d, %v", c.in, a, bits, err)
		}
	}
	for _, bad := range []string{"", "x", "10.0.0.1/33", "10.0.0.256", "10.0.0.1/"} {
		if _, _, err := ParseIPMaybePrefix(bad); err == nil {
			t.Errorf("ParseIPMaybePrefix(%q) accepted", bad)
		}
	}
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}
