package dhcp

import (
	"bytes"
	"encoding/json"

	"fmt"
	"slices"
	"testing"

	"github.com/insomniacslk/dhcp/dhcpv4"

	"github.com/patchbay-cni/patchbay/internal/testutil"
	"github.com/patchbay-cni/patchbay/skel"
)

// TestParseConf covers the keys' meaning: defaults, skipDefault, numbers
// and names, fromArg over value, a later provide replacing an earlier one,
// the client identifier (ours, or the provided one).
func TestParseConf(t *testing.T) {
	c, sock, err := parseConf([]byte(`{"cniVersion":"1.0.0","name":"net1","ipam":{"type":"dhcp"}}`), "ctr", "eth0", "")
	if err != nil {
		t.Fatal(err)
	}
	if sock != DefaultSocketPath {
		t.Errorf("socket %q", sock)
	}
	if len(c.Request) != len(defaultRequest) || c.Request[0] != 3 || c.Request[1] != 1 {
		t.Errorf("default request %v", c.Request)
	}
	if !bytes.Equal(c.ClientID, append([]byte{0}, "ctr/net1/eth0"...)) {
		t.Errorf("client id %q", c.ClientID)
	}

	c, sock, err = parseConf([]byte(`{"name":"net1","ipam":{"type":"dhcp","daemonSocketPath":"/x//y.sock",
		"request":[{"skipDefault":true},{"option":"routers"},{"option":121},{"option":"121"}],
		"provide":[{"option":"host-name","value":"a","fromArg":"POD"},{"option":"12","value":"b"},
			{"option":"dhcp-client-identifier","value":"cid"},{"option":"user-class","fromArg":"ABSENT"}]}}`),
		"ctr", "eth0", "POD=web;X=1")
	if err != nil {
		t.Fatal(err)
	}
	if sock != "/x/y.sock" {
		t.Errorf("socket %q", sock)
	}
	if !slices.Equal(c.Request, []uint8{3, 121}) {
		t.Errorf("request %v, want [3 121]", c.Request)
	}
	want := []sentOption{{Code: 12, Value: []byte("b")}, {Code: 61, Value: []byte("cid")}}
	if len(c.Provide) != len(want) {
		t.Fatalf("provide %+v", c.Provide)
	}
	for i := range want {
		if c.Provide[i].Code != want[i].Code || !bytes.Equal(c.Provide[i].Value, want[i].Value) {
			t.Errorf("provide[%d] = %+v, want %+v", i, c.Provide[i], want[i])
		}
	}
	if string(c.ClientID) != "cid" {
		t.Errorf("client id %q, want the provided one", c.ClientID)
	}

	// fromArg wins over value when the arg is there.
	c, _, err = parseConf([]byte(`{"name":"n","ipam":{"provide":[{"option":"host-name","value":"dflt","fromArg":"POD"}]}}`), "c", "e", "POD=pod-1")
	if err != nil || string(c.Provide[0].Value) != "pod-1" {
		t.Errorf("fromArg: %+v %v", c, err)
	}
	// The reference's long client ID is cut to fit one option.
	long := string(bytes.Repeat([]byte("a"), 300))
	c, _, _ = parseConf([]byte(`{"name":"n","ipam":{}}`), long, "eth0", "")
	if len(c.ClientID) != 255 {
		t.Errorf("client id length %d", len(c.ClientID))
	}
}

// FuzzConfig: any configuration and CNI_ARGS, through skel as a real
// invocation (testutil.FuzzConfig), give a config or a configuration error
// that does not name the plugin, never a panic; accepted configs hold only
// options the client may send and build a valid DISCOVER.
func FuzzConfig(f *testing.F) {
	var seeds [][2]string
	for _, s := range []string{
		`{"cniVersion":"1.0.0","name":"n","type":"dhcp","ipam":{"type":"dhcp"}}`,
		`{"cniVersion":"1.0.0","name":"n","type":"dhcp","ipam":{"daemonSocketPath":"/run/x.sock","priority":3}}`,
		`{"cniVersion":"1.0.0","name":"n","type":"dhcp","ipam":{"request":[{"skipDefault":true},{"option":"routers"},{"option":42}]}}`,
		`{"cniVersion":"1.0.0","name":"n","type":"dhcp","ipam":{"provide":[{"option":"host-name","fromArg":"K8S_POD_NAME"},{"option":"60","value":"v"}]}}`,
		`{"cniVersion":"1.0.0","name":"n","type":"dhcp","ipam":null}`, `[]`,
		`{"cniVersion":"1.0.0","name":"n","type":"dhcp","ipam":{"provide":[{"option":1e400}]}}`,
		`{"cniVersion":"1.0.0","name":"n","type":"dhcp","ipam":{"request":[{"option":"-1"}]}}`,
	} {
		seeds = append(seeds, [2]string{s, "K8S_POD_NAME=web;IgnoreUnknown=1"})
	}
	load := func(a *skel.CmdArgs) (*leaseConf, error) {
		c, sock, err := parseConf(a.StdinData, a.ContainerID, a.IfName, a.Args)
		if err == nil && (sock == "" || sock[0] != '/') {
			return nil, fmt.Errorf("socket %q accepted", sock)
		}
		return c, err
	}
	testutil.FuzzConfig(f, Plugin(), seeds, load, func(t *testing.T, c *leaseConf) {
		for _, o := range c.Provide {
			if _, bad := clientManaged[o.Code]; bad || len(o.Value) == 0 || len(o.Value) > 255 {
				t.Fatalf("accepted provide %+v", o)
			}
		}
		for _, code := range c.Request {
			if _, bad := clientManaged[code]; bad {
				t.Fatalf("accepted request of option %d", code)
			}
		}
		if len(c.ClientID) == 0 || len(c.ClientID) > 255 {
			t.Fatalf("client id of %d bytes", len(c.ClientID))
		}
		// Every accepted config builds a valid DISCOVER.
		r := &record{ClientID: c.ClientID, Provide: c.Provide, Request: c.Request}
		m, err := r.message([]byte{2, 0, 0, 0, 0, 1}, dhcpv4.MessageTypeDiscover, false)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := dhcpv4.FromBytes(m.ToBytes()); err != nil {
			t.Fatalf("DISCOVER does not decode: %v", err)
		}
		json.Marshal(r) // records persist
	})
}
