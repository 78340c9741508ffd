package loopback

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/patchbay-cni/patchbay/internal/testutil"
	"github.com/patchbay-cni/patchbay/skel"
	"github.com/patchbay-cni/patchbay/spec"
)

func run(t *testing.T, cmd, netnsPath, conf string) (string, int) {
	t.Helper()
	env := skel.Env{"CNI_COMMAND": cmd, "CNI_CONTAINERID": "c1", "CNI_NETNS": netnsPath, "CNI_IFNAME": "lo", "CNI_PATH": "/nonexistent"}
	var out, errb bytes.Buffer
	code := skel.Run(context.Background(), Plugin(), env, strings.NewReader(conf), &out, &errb)
	return out.String(), code
}

func loState(t *testing.T, ns string) string {
	t.Helper()
	out, err := testutil.InNS(t, ns, "ip", "-o", "link", "show", "lo")
	if err != nil {
		t.Fatalf("ip link show lo: %v: %s", err, out)
	}
	return out
}

func TestAddBringsLoUpAndDelBringsItDown(t *testing.T) {
	ns, path := testutil.NewNSLoDown(t, "lo")
	if strings.Contains(loState(t, ns), "<LOOPBACK,UP") {
		t.Fatal("precondition: lo should start down")
	}
	out, code := run(t, "ADD", path, `{"cniVersion":"1.1.0","name":"lonet","type":"loopback"}`)
	if code != 0 {
		t.Fatalf("ADD exit %d: %s", code, out)
	}
	if !strings.Contains(loState(t, ns), ",UP") {
		t.Fatalf("lo not up after ADD: %s", loState(t, ns))
	}
	var res map[string]any
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatal(err)
	}
	r, err := spec.ParseResult([]byte(out), "")
	if err != nil {
		t.Fatal(err)
	}
	if r.CNIVersion != "1.1.0" || len(r.Interfaces) != 1 || r.Interfaces[0].Name != "lo" || r.Interfaces[0].Sandbox != path {
		t.Fatalf("unexpected result: %s", out)
	}
	var got []string
	for _, ip := range r.IPs {
		got = append(got, ip.Address.String())
		if ip.Interface == nil || *ip.Interface != 0 {
			t.Errorf("ip %s not bound to interface 0", ip.Address)
		}
	}
	if strings.Join(got, ",") != "127.0.0.1/8,::1/128" {
		t.Errorf("lo addresses = %v, want 127.0.0.1/8 and ::1/128", got)
	}

	if out, code := run(t, "CHECK", path, `{"cniVersion":"1.1.0","name":"lonet","type":"loopback","prevResult":`+strings.TrimSpace(out)+`}`); code != 0 {
		t.Fatalf("CHECK exit %d: %s", code, out)
	}
	for i := 0; i < 2; i++ { // DEL is idempotent
		if out, code := run(t, "DEL", path, `{"cniVersion":"1.1.0","name":"lonet","type":"loopback"}`); code != 0 {
			t.Fatalf("DEL #%d exit %d: %s", i+1, code, out)
		}
	}
	if strings.Contains(loState(t, ns), ",UP") {
		t.Fatalf("lo still up after DEL: %s", loState(t, ns))
	}
	// CHECK now fails: lo is down.
	if out, code := run(t, "CHECK", path, `{"cniVersion":"1.1.0","name":"lonet","type":"loopback","prevResult":{"cniVersion":"1.1.0"}}`); code == 0 {
		t.Fatalf("CHECK with lo down succeeded: %s", out)
	}
}

func TestDelToleratesMissingNetns(t *testing.T) {
	testutil.RequireRoot(t)
	if out, code := run(t, "DEL", "/run/netns/pbt-does-not-exist", `{"cniVersion":"1.0.0","name":"lonet","type":"loopback"}`); code != 0 {
		t.Fatalf("DEL of a gone netns failed (%d): %s", code, out)
	}
}

func TestAddMissingNetnsIsCode3(t *testing.T) {
	testutil.RequireRoot(t)
	out, code := run(t, "ADD", "/run/netns/pbt-does-not-exist", `{"cniVersion":"1.0.0","name":"lonet","type":"loopback"}`)
	e, ok := spec.ParseError([]byte(out))
	if code == 0 || !ok || e.Code != spec.ErrUnknownContainer || !strings.Contains(e.Msg, "pbt-does-not-exist") {
		t.Fatalf("want code 3 naming the netns, got exit %d: %s", code, out)
	}
}

func TestOldVersionResultFormat(t *testing.T) {
	_, path := testutil.NewNSLoDown(t, "lo02")
	out, code := run(t, "ADD", path, `{"cniVersion":"0.2.0","name":"lonet","type":"loopback"}`)
	if code != 0 {
		t.Fatalf("ADD exit %d: %s", code, out)
	}
	var got map[string]any
	json.Unmarshal([]byte(out), &got)
	if got["cniVersion"] != "0.2.0" || got["ip4"] == nil || got["interfaces"] != nil {
		t.Fatalf("0.2.0 result expected (ip4, no interfaces), got %s", out)
	}
}
