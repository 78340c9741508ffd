package static

import (
	"strings"
	"testing"

	"github.com/patchbay-cni/patchbay/skel"
	"github.com/patchbay-cni/patchbay/spec"
)

// Issue 7 item 6: route numbers the kernel takes as u32 (u8 for scope) are
// range-checked, not truncated (table 4294967396 used to land in table
// 100), with code 7 naming the key and the value; messages do not start
// with the plugin's name.
func TestRouteValuesInKernelRange(t *testing.T) {
	run := func(route string) (*loaded, error) {
		conf := `{"cniVersion":"1.1.0","name":"n","ipam":{"type":"static","routes":[` + route + `]}}`
		a, err := skel.NewCmdArgs(Plugin(), skel.Env{"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "c", "CNI_NETNS": "/x", "CNI_IFNAME": "eth0", "CNI_PATH": "/x"}, []byte(conf))
		if err != nil {
			t.Fatal(err)
		}
		return load(a)
	}
	for route, want := range map[string]string{
		`{"dst":"10.0.0.0/8","table":4294967396}`:    "ipam.routes[0].table 4294967396 is out of range",
		`{"dst":"10.0.0.0/8","table":-1}`:            "ipam.routes[0].table -1",
		`{"dst":"10.0.0.0/8","priority":4294967296}`: "ipam.routes[0].priority 4294967296",
		`{"dst":"10.0.0.0/8","mtu":4294967297}`:      "ipam.routes[0].mtu 4294967297",
		`{"dst":"10.0.0.0/8","advmss":-3}`:           "ipam.routes[0].advmss -3",
		`{"dst":"10.0.0.0/8","scope":256}`:           "ipam.routes[0].scope 256",
	} {
		_, err := run(route)
		e := spec.AsError(err, 0)
		if e == nil || e.Code != 7 || !strings.Contains(e.Msg, want) || strings.HasPrefix(e.Msg, "static") {
			t.Errorf("%s: %v, want code 7 %q", route, err, want)
		}
	}
	l, err := run(`{"dst":"10.0.0.0/8","table":4294967295,"priority":4294967295,"scope":255}`)
	if err != nil || *l.routes[0].Table != 4294967295 {
		t.Errorf("largest values: %v", err)
	}
}

func TestDNSControlCharacters(t *testing.T) {
	conf := `{"cniVersion":"1.1.0","name":"n","ipam":{"type":"static","dns":{"nameservers":["8.8.8.8\nnameserver 6.6.6.6"]}}}`
	a, err := skel.NewCmdArgs(Plugin(), skel.Env{"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "c", "CNI_NETNS": "/x", "CNI_IFNAME": "eth0", "CNI_PATH": "/x"}, []byte(conf))
	if err != nil {
		t.Fatal(err)
	}
	_, err = load(a)
	if e := spec.AsError(err, 0); e == nil || e.Code != 7 || !strings.Contains(e.Msg, "ipam.dns.nameservers[0]") {
		t.Errorf("newline in a nameserver: %v", err)
	}
}
