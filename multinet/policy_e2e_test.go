package multinet

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/patchbay-cni/patchbay/internal/testutil"
	"github.com/patchbay-cni/patchbay/multinet/api"
	"github.com/patchbay-cni/patchbay/multinet/plugin"
	"github.com/patchbay-cni/patchbay/spec"
)

// TestNADPolicy: each kind of rule refuses a pod selecting a NAD that
// breaks it — CNI code 7 naming the NAD, the plugin, the key and the rule,
// a Warning Event on the pod naming the rule, nothing attached — for
// plugins of a list, IPAM types, delegates' keys reached from the main
// plugin, capability args and the pod's cni-args; allowed NADs, NADs of
// global namespaces and the cluster network (which breaks the operator's
// rule too) work. Thin and thick.
func TestNADPolicy(t *testing.T) {
	t.Run("thin", func(t *testing.T) { testNADPolicy(t, false) })
	t.Run("thick", func(t *testing.T) { testNADPolicy(t, true) })
}

type policyCase struct {
	name       string
	nad        any               // the NAD's spec.config
	annotation string            // the networks annotation ("" = the NAD's name)
	want       []string          // in the error and the Event
	extra      map[string]string // more pod annotations
}

func testNADPolicy(t *testing.T, thick bool) {
	e := newEnv(t)
	global := e.c.UniqueNamespace(t, "mng")
	e.opts["globalNamespaces"] = []string{global}
	// Operator rules of the kinds the built-in policy does not use, one of
	// them (isGateway) broken by the cluster network itself.
	e.opts["nadPolicy"] = e.policy(map[string]any{
		"bridge":  map[string]any{"keys": map[string]any{"isGateway": false}},
		"macvlan": map[string]any{"keys": map[string]any{"master": map[string]any{"prefix": []string{"mnu"}}}},
		"vlan":    map[string]any{"keys": map[string]any{"vlanId": map[string]any{"min": 100, "max": 199}, "master": map[string]any{"required": true}}},
		"ptp":     map[string]any{"keys": map[string]any{"ipam.subnet": map[string]any{"within": []string{"10.78.0.0/16"}}}},
	})
	if thick {
		e.startDaemon(nil)
	}
	list := func(plugins ...map[string]any) map[string]any {
		ps := make([]any, len(plugins))
		for i, p := range plugins {
			ps[i] = p
		}
		return map[string]any{"cniVersion": "1.0.0", "plugins": ps}
	}
	bridge := func(n int) map[string]any { return e.bridgeNAD("", n, nil)["plugins"].([]any)[0].(map[string]any) }
	plugin1 := func(typ string, kv ...any) map[string]any {
		m := map[string]any{"type": typ}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return m
	}
	const builtin = "built-in rule types."
	cases := []policyCase{
		{name: "hostdev", nad: list(plugin1("host-device", "device", "eth0")),
			want: []string{`plugins[0] (host-device): type "host-device" is not allowed`, builtin + "host-device.allow"}},
		{name: "hostpath", nad: e.bridgeNAD("", 3, map[string]any{"ipam": map[string]any{"type": "host-local", "subnet": "10.78.3.0/24", "dataDir": "/etc"}}),
			want: []string{`plugins[0].ipam (host-local): "dataDir" = "/etc" is not a clean absolute path`, "nadPolicy.types.host-local.keys.dataDir"}},
		{name: "ipamtype", nad: e.bridgeNAD("", 3, map[string]any{"ipam": map[string]any{"type": "nv-ipam"}}),
			want: []string{`plugins[0].ipam (nv-ipam): type "nv-ipam" is not allowed`, "built-in rule otherTypes"}},
		{name: "sysctl", nad: list(bridge(4), plugin1("tuning", "sysctl", map[string]any{"kernel.core_pattern": "|/tmp/x"})),
			want: []string{`plugins[1] (tuning): "sysctl" has the key "kernel.core_pattern"`, builtin + "tuning.keys.sysctl"}},
		{name: "tuningdir", nad: list(bridge(4), plugin1("tuning", "dataDir", "/etc/cron.d")),
			want: []string{`plugins[1] (tuning): "dataDir" = "/etc/cron.d"`, builtin + "tuning.keys.dataDir"}},
		{name: "conditions", nad: list(bridge(4), plugin1("portmap", "conditionsV4", []string{"-s", "10.0.0.1\n-A INPUT -j DROP"})),
			want: []string{`plugins[1] (portmap): "conditionsV4[1]" = "10.0.0.1\n-A INPUT -j DROP" does not match the pattern`, builtin + "portmap.keys.conditionsV4"}},
		{name: "markchain", nad: list(bridge(4), plugin1("portmap", "externalSetMarkChain", "KUBE-SERVICES")),
			want: []string{`"externalSetMarkChain" = "KUBE-SERVICES" is not one of ["KUBE-MARK-MASQ"]`, builtin + "portmap.keys.externalSetMarkChain"}},
		{name: "hostbridge", nad: e.bridgeNAD("", 5, map[string]any{"bridge": "docker0"}),
			want: []string{`"bridge" = "docker0" is one of the refused values`, builtin + "bridge.keys.bridge"}},
		{name: "nobridge", nad: list(plugin1("bridge", "ipam", map[string]any{"type": "static"})),
			want: []string{`"bridge" is not set, and the plugin's default "cni0" is one of the refused values`}},
		{name: "gateway", nad: e.bridgeNAD("", 5, map[string]any{"isGateway": true}),
			want: []string{`"isGateway" = true must not be set`, "nadPolicy.types.bridge.keys.isGateway"}},
		{name: "macvlan", nad: list(plugin1("macvlan", "master", "eth0")),
			want: []string{`"master" = "eth0" does not start with any of ["mnu"]`, "nadPolicy.types.macvlan.keys.master"}},
		{name: "vlanid", nad: list(plugin1("vlan", "master", "mnu0", "vlanId", 42, "ipam", map[string]any{"type": "static"})),
			want: []string{`"vlanId" = 42 is below the minimum 100`, "nadPolicy.types.vlan.keys.vlanId"}},
		{name: "vlanmaster", nad: list(plugin1("vlan", "vlanId", 142, "ipam", map[string]any{"type": "static"})),
			want: []string{`"master" must be set`, "nadPolicy.types.vlan.keys.master"}},
		{name: "ptp", nad: list(plugin1("ptp", "ipam", map[string]any{"type": "host-local", "subnet": "169.254.169.0/24", "dataDir": e.ipamDir})),
			want: []string{`"ipam.subnet" = "169.254.169.0/24" is not an address or prefix inside ["10.78.0.0/16"]`, "nadPolicy.types.ptp.keys.ipam.subnet"}},
		{name: "hostport", nad: list(bridge(6), plugin1("portmap", "capabilities", map[string]any{"portMappings": true})),
			annotation: `[{"name":"hostport","portMappings":[{"hostPort":10250,"containerPort":80,"protocol":"tcp"}]}]`,
			want:       []string{`"runtimeConfig.portMappings" = […] must not be set`, builtin + "portmap.keys.runtimeConfig.portMappings"}},
		{name: "cniargs", nad: list(bridge(6), plugin1("tuning")),
			annotation: `[{"name":"cniargs","cni-args":{"sysctl":{"kernel.panic":"1"}}}]`,
			want:       []string{`"args.cni.sysctl" has the key "kernel.panic"`, builtin + "tuning.keys.args.cni.sysctl"}},
		{name: "clustername", nad: map[string]any{"cniVersion": "1.0.0", "name": "cluster", "plugins": []any{bridge(7)}},
			want: []string{`network: "name" = "cluster" is the cluster network's name`}},
		{name: "defaultnet", nad: list(plugin1("host-device", "pciBusID", "0000:00:03.0")),
			annotation: "blue", extra: map[string]string{api.DefaultNetworkAnnotation: e.ns + "/defaultnet"},
			want: []string{`plugins[0] (host-device): type "host-device" is not allowed`}},
	}
	e.nad("", "blue", e.bridgeNAD("", 1, nil))
	for _, c := range cases {
		e.nad("", c.name, c.nad)
	}
	for i, c := range cases {
		ann := map[string]string{api.NetworksAnnotation: c.name}
		if c.annotation != "" {
			ann[api.NetworksAnnotation] = c.annotation
		}
		for k, v := range c.extra {
			ann[k] = v
		}
		p := e.pod("p"+string(rune('a'+i)), ann)
		for try := 1; try <= 2; try++ { // the kubelet retries
			_, err := e.add(p)
			var ce *spec.Error
			if !errors.As(err, &ce) {
				t.Fatalf("%s: ADD %d = %v, want a refusal\n%s", c.name, try, err, e.log())
			}
			if try == 1 {
				t.Logf("%s: %s", c.name, ce.Msg)
			}
			if ce.Code != spec.ErrInvalidNetworkConfig {
				t.Errorf("%s: code %d, want 7", c.name, ce.Code)
			}
			for _, w := range append([]string{"NetworkAttachmentDefinition " + e.ns + "/" + c.name + " breaks the NAD policy"}, c.want...) {
				if !strings.Contains(ce.Msg, w) {
					t.Errorf("%s: error %q does not say %q", c.name, ce.Msg, w)
				}
			}
			if strings.Contains(ce.Msg, "attempted attachment") {
				t.Errorf("%s: something was attached before the refusal: %s", c.name, ce.Msg)
			}
		}
		evs := policyEvents(t, e, p.name)
		if len(evs) != 1 || evs[0].Reason != plugin.ReasonPolicyRefused {
			t.Errorf("%s: events %+v, want one %s (the retry records none)", c.name, evs, plugin.ReasonPolicyRefused)
		}
		for _, ev := range evs {
			for _, w := range c.want {
				if !strings.Contains(ev.Message, w) {
					t.Errorf("%s: event %q does not say %q", c.name, ev.Message, w)
				}
			}
		}
		e.mustDel(p)
	}
	policyAttachedNothing(t, e, true)

	// Allowed: a NAD within the rules, and a global namespace's NAD that
	// breaks them (isGateway, host-local outside ipamDir).
	sharedIPAM := filepath.Join(e.dir, "shared-ipam")
	e.nad(global, "shared", e.bridgeNAD("", 9, map[string]any{"isGateway": true,
		"ipam": map[string]any{"type": "host-local", "subnet": "10.78.9.0/24", "dataDir": sharedIPAM}}))
	ok := e.pod("ok", map[string]string{api.NetworksAnnotation: "blue," + global + "/shared"})
	e.mustAdd(ok)
	if l := e.links(ok); !slices.Equal(l, []string{"eth0", "net1", "net2"}) {
		t.Errorf("allowed pod's interfaces %v, want eth0 net1 net2", l)
	}
	if ents, _ := os.ReadDir(filepath.Join(sharedIPAM, global+"-shared")); len(ents) == 0 {
		if ents, _ = os.ReadDir(sharedIPAM); len(ents) == 0 {
			t.Errorf("the global NAD's host-local state is not in %s", sharedIPAM)
		}
	}
	if evs := policyEvents(t, e, "ok"); len(evs) != 0 {
		t.Errorf("events for an allowed pod: %+v", evs)
	}
	e.mustDel(ok)
	e.nothingLeft(ok, "after DEL of the allowed pod")
}

type policyEvent struct{ Type, Reason, Message string }

// policyEvents are the NAD policy's events on a pod of the env.
func policyEvents(t *testing.T, e *env, podName string) []policyEvent {
	t.Helper()
	_, body, err := e.c.Do("GET", "/api/v1/namespaces/"+e.ns+"/events", nil)
	if err != nil {
		t.Fatal(err)
	}
	var evs struct {
		Items []struct {
			Type, Reason, Message string
			InvolvedObject        struct{ Name string }
		}
	}
	json.Unmarshal(body, &evs)
	var out []policyEvent
	for _, ev := range evs.Items {
		if ev.InvolvedObject.Name == podName && strings.HasPrefix(ev.Reason, "NetworkAttachmentPolicy") {
			if ev.Type != "Warning" {
				t.Errorf("event %s is %s, want Warning", ev.Reason, ev.Type)
			}
			out = append(out, policyEvent{ev.Type, ev.Reason, ev.Message})
		}
	}
	return out
}

// policyAttachedNothing: refused pods left no trace — no address taken,
// nothing cached, and when no pod was attached (bridges), the cluster
// network's bridge was never made.
func policyAttachedNothing(t *testing.T, e *env, bridges bool) {
	t.Helper()
	if out, err := testutil.InNS(t, e.hostNS, "ip", "-o", "link", "show"); err == nil && bridges {
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, "mnbr") {
				t.Errorf("a bridge exists after refused ADDs: %s", l)
			}
		}
	}
	if ls := e.leases(); len(ls) != 0 {
		t.Errorf("host-local holds %v after refused ADDs", ls)
	}
	if ents, _ := os.ReadDir(filepath.Join(e.cniDir, "results")); len(ents) != 0 {
		t.Errorf("delegate results cached by refused ADDs: %v", ents)
	}
	if plans, _ := filepath.Glob(filepath.Join(e.cniDir, "*.json")); len(plans) != 0 {
		t.Errorf("plans left by refused ADDs: %v", plans)
	}
}

// TestNADPolicySources: the policy from a file (YAML, as a ConfigMap
// holds it), read again when it changes — no restart of the daemon —;
// audit mode attaches and records an Event; a policy that does not parse
// is code 7 naming the key for the pods it applies to (a pod on the
// cluster network alone still starts), and stops the daemon's start.
// Thin and thick.
func TestNADPolicySources(t *testing.T) {
	t.Run("thin", func(t *testing.T) { testNADPolicySources(t, false) })
	t.Run("thick", func(t *testing.T) { testNADPolicySources(t, true) })
}

func testNADPolicySources(t *testing.T, thick bool) {
	e := newEnv(t)
	file := filepath.Join(e.dir, "nad-policy.yaml")
	write := func(text string) {
		// As the kubelet updates a ConfigMap volume: a new file renamed
		// over the old one.
		tmp := file + ".new"
		if err := os.WriteFile(tmp, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, file); err != nil {
			t.Fatal(err)
		}
	}
	const rules = `types:
  host-local:
    keys:
      dataDir: {under: [%s]}
  bridge:
    keys:
      isGateway: false
`
	write("mode: audit\n" + strings.ReplaceAll(rules, "%s", e.ipamDir))
	delete(e.opts, "nadPolicy")
	e.opts["nadPolicyFile"] = file
	if thick {
		e.startDaemon(nil)
	}
	e.nad("", "gw", e.bridgeNAD("", 1, map[string]any{"isGateway": true}))

	// audit: attached, Event and log line.
	p1 := e.pod("p1", map[string]string{api.NetworksAnnotation: "gw"})
	e.mustAdd(p1)
	if l := e.links(p1); !slices.Equal(l, []string{"eth0", "net1"}) {
		t.Errorf("audit mode: interfaces %v, want eth0 net1", l)
	}
	evs := policyEvents(t, e, "p1")
	if len(evs) != 1 || evs[0].Reason != plugin.ReasonPolicyAudit || !strings.Contains(evs[0].Message, `"isGateway" = true must not be set [nadPolicyFile `+file+`: types.bridge.keys.isGateway]`) {
		t.Errorf("audit events %+v", evs)
	}
	if !strings.Contains(e.log(), "NAD policy audit") {
		t.Errorf("no audit log line:\n%s", e.log())
	}
	e.mustDel(p1)

	// enforce, by editing the file only.
	write("mode: enforce\n" + strings.ReplaceAll(rules, "%s", e.ipamDir))
	p2 := e.pod("p2", map[string]string{api.NetworksAnnotation: "gw"})
	_, err := e.add(p2)
	if ce := spec.AsError(err, 0); err == nil || ce.Code != spec.ErrInvalidNetworkConfig || !strings.Contains(ce.Msg, "isGateway") {
		t.Fatalf("after the file changed to enforce: %v", err)
	}
	e.mustDel(p2)

	// A file that does not parse: pods with a NAD fail naming the key, a
	// pod on the cluster network alone starts.
	write("mode: enforce\ntypes:\n  bridge:\n    keys:\n      isGateway: {dney: true}\n")
	p3 := e.pod("p3", map[string]string{api.NetworksAnnotation: "gw"})
	_, err = e.add(p3)
	if ce := spec.AsError(err, 0); err == nil || ce.Code != spec.ErrInvalidNetworkConfig ||
		!strings.Contains(ce.Msg, "nadPolicyFile "+file+": types.bridge.keys.isGateway.dney is not a policy key") {
		t.Fatalf("broken policy file: %v", err)
	}
	e.mustDel(p3)
	p4 := e.pod("p4", nil)
	e.mustAdd(p4)
	e.mustDel(p4)
	policyAttachedNothing(t, e, false)

	// An inline policy that does not parse.
	bad := map[string]any{"types": map[string]any{"bridge": map[string]any{"keys": map[string]any{"bridge": map[string]any{"pattern": "(["}}}}}
	if !thick {
		delete(e.opts, "nadPolicyFile")
		e.opts["nadPolicy"] = bad
		p5 := e.pod("p5", map[string]string{api.NetworksAnnotation: "gw"})
		_, err = e.add(p5)
		if ce := spec.AsError(err, 0); err == nil || ce.Code != spec.ErrInvalidNetworkConfig ||
			!strings.Contains(ce.Msg, `nadPolicy.types.bridge.keys.bridge.pattern "([" is not a valid regular expression`) {
			t.Fatalf("broken inline policy: %v", err)
		}
		e.mustDel(p5)
		return
	}
	// The daemon does not start with it.
	cfg := e.daemonConfig(map[string]any{"nadPolicy": bad, "socketDir": filepath.Join(e.dir, "run2")})
	delete(cfg, "nadPolicyFile")
	path := filepath.Join(e.dir, "bad-daemon.json")
	e.writeJSON(path, cfg)
	cmd := exec.Command(filepath.Join(e.binDir, "multinet"), "daemon", "-config", path, "-node-name", "n1")
	done := make(chan struct{})
	var out []byte
	go func() { out, err = cmd.CombinedOutput(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatalf("the daemon started with a broken policy: %s", out)
	}
	if err == nil || !strings.Contains(string(out), `nadPolicy.types.bridge.keys.bridge.pattern "([" is not a valid regular expression`) {
		t.Errorf("daemon with a broken policy: %v: %s", err, out)
	}
}
