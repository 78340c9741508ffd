package plugin

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/patchbay-cni/patchbay/internal/testutil"
	"github.com/patchbay-cni/patchbay/multinet/policy"
	"github.com/patchbay-cni/patchbay/skel"
	"github.com/patchbay-cni/patchbay/spec"
)

// configSeeds are multinet entries of a conflist as operators write them.
var configSeeds = []string{
	`{"cniVersion":"1.1.0","name":"multinet","type":"multinet","clusterNetwork":"k8s-pod-network","kubeconfig":"/etc/cni/net.d/multinet.d/multinet.kubeconfig"}`,
	`{"cniVersion":"0.3.1","name":"m","type":"multinet","clusterNetwork":"/etc/cni/net.d/10-flannel.conflist","defaultNetworks":["ns/a","b"],"globalNamespaces":"default, shared,,x","namespaceIsolation":true,"systemNamespaces":[]}`,
	`{"cniVersion":"1.0.0","name":"m","type":"multinet","clusterNetwork":"c","readinessindicatorfile":"/run/ready","readinessTimeoutSeconds":3,"apiTimeoutSeconds":2,"logLevel":"verbose","asyncNetworkStatus":true,"interfacePrefix":"if"}`,
	`{"cniVersion":"1.1.0","name":"m","type":"multinet","clusterNetwork":"c","nadPolicy":{"mode":"audit","types":{"macvlan":{"keys":{"master":{"oneOf":["eth1"]}}}}}}`,
	`{"cniVersion":"1.1.0","name":"m","type":"multinet","clusterNetwork":"c","nadPolicy":{"mode":"loud"}}`,
	`{"cniVersion":"1.1.0","name":"m","type":"multinet","clusterNetwork":"c","nadPolicy":"mode: off","nadPolicyFile":"/etc/p.yaml"}`,
	`{"cniVersion":"1.1.0","name":"m","type":"multinet","clusterNetwork":"c","capabilities":{"portMappings":true},"runtimeConfig":{"portMappings":[{"hostPort":8080,"containerPort":80,"protocol":"tcp"}]}}`,
	`{"cniVersion":"1.1.0","name":"m","type":"multinet","clusterNetwork":"c","readinessTimeoutSeconds":9223372037}`,
	`{"cniVersion":"1.1.0","name":"m","type":"multinet"}`,
}

// FuzzConfig: multinet's own configuration (the conflist's multinet entry),
// through skel as a real invocation, then ParseConfig as every verb runs
// it: a refusal is a configuration error (testutil.ConfigError); an
// accepted configuration has its defaults filled, positive timeouts, a
// log level, and an inline NAD policy that either loads or is refused
// with code 7 naming nadPolicy (the error every ADD that needs it gets).
func FuzzConfig(f *testing.F) {
	var seeds [][2]string
	for _, s := range configSeeds {
		seeds = append(seeds, [2]string{s, "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p;IgnoreUnknown=1"})
	}
	load := func(a *skel.CmdArgs) (*Config, error) {
		c, err := ParseConfig(a.StdinData)
		if err != nil {
			return nil, err
		}
		if _, err := spec.ParseCNIArgs(a.Args); err != nil {
			return nil, err
		}
		return c, nil
	}
	testutil.FuzzConfig(f, Plugin(), seeds, load, func(t *testing.T, c *Config) {
		checkConfig(t, c)
		checkPolicy(t, c)
	})
}

// checkConfig holds what the verbs rely on in an accepted configuration.
func checkConfig(t *testing.T, c *Config) {
	t.Helper()
	if c.ClusterNetwork == "" || c.ConfDir == "" || c.CNIDir == "" || c.MultusNamespace == "" || c.InterfacePrefix == "" ||
		len(c.GlobalNamespaces) == 0 || c.SystemNamespaces == nil {
		t.Fatalf("accepted without defaults: %+v", c)
	}
	if d := c.readinessTimeout(); d <= 0 {
		t.Fatalf("readinessTimeoutSeconds %d gives a wait of %v", c.ReadinessTimeoutSeconds, d)
	}
	if d := c.APITimeout(); d <= 0 {
		t.Fatalf("apiTimeoutSeconds %d gives a timeout of %v", c.APITimeoutSeconds, d)
	}
	if _, err := parseLevel(c.LogLevel); err != nil {
		t.Fatalf("accepted logLevel %q", c.LogLevel)
	}
	if len(c.capabilityArgs()) != len(c.RuntimeConfig) {
		t.Fatalf("capability arguments %v of runtimeConfig %v", c.capabilityArgs(), c.RuntimeConfig)
	}
}

// checkPolicy loads an inline policy (a file named by the configuration is
// not opened: a fuzzed path could be a device). Its error is the one ADD
// returns, so it must be code 7 naming the key; it is returned.
func checkPolicy(t *testing.T, c *Config) error {
	t.Helper()
	if c.NADPolicyFile != "" && len(c.NADPolicy) == 0 {
		return nil
	}
	p, err := c.Policy()
	if err != nil {
		var ce *spec.Error
		if !errors.As(err, &ce) || ce.Code != spec.ErrInvalidNetworkConfig || !strings.HasPrefix(ce.Msg, "nadPolicy") {
			t.Fatalf("policy error %v: want code 7 naming nadPolicy", err)
		}
		return err
	}
	if !slices.Contains([]policy.Mode{policy.Enforce, policy.Audit, policy.Off}, p.Mode) {
		t.Fatalf("policy mode %q", p.Mode)
	}
	if ex := c.exemptNamespaces(p); p.ExemptNamespaces == nil && !slices.Contains(ex, c.MultusNamespace) {
		t.Fatalf("exempt namespaces %v lack multusNamespace %q", ex, c.MultusNamespace)
	}
	return nil
}

// FuzzInstallConfig: the installer's configuration (the ConfigMap's
// multinet keys). What parse accepts, the installed plugin must accept
// too — the installer checks it so that a bad ConfigMap fails in the
// DaemonSet's log, not in every pod's ADD: the thin conflist it renders
// parses, its multinet entry gives the same configuration, and its inline
// NAD policy loads; the thick conflist parses and names the shim.
func FuzzInstallConfig(f *testing.F) {
	for _, s := range []string{
		`{"clusterNetwork":"k8s-pod-network","confDir":"/host/etc/cni/net.d","cniDir":"/host/var/lib/cni/multinet"}`,
		`{"clusterNetwork":"c","globalNamespaces":"a,b","nadPolicy":{"types":{"macvlan":true}},"capabilities":{"portMappings":true}}`,
		`{"clusterNetwork":"c","nadPolicy":{"mode":"strict"}}`,
		`{"clusterNetwork":"c","socketDir":"/run/mn","logLevel":"debug"}`,
		`{"clusterNetwork":"c","name":"x"}`,
		`{"clusterNetwork":"c","Type":"x","Name":"y"}`,
	} {
		f.Add([]byte(s), false)
	}
	f.Fuzz(func(t *testing.T, conf []byte, thick bool) {
		o := &NodeInstall{Config: conf, Mode: ModeThin}
		if thick {
			o.Mode = ModeThick
		}
		cfg, keys, err := o.parse()
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error")
			}
			return
		}
		inst := &Installed{CNIVersion: "1.1.0", Kubeconfig: "/etc/cni/net.d/multinet.d/multinet.kubeconfig"}
		out, err := o.conf(keys, inst)
		if err != nil {
			t.Fatalf("accepted, but the conflist is not rendered: %v", err)
		}
		l, err := spec.ParseConfList(out)
		if err != nil || len(l.Plugins) != 1 {
			t.Fatalf("rendered conflist does not parse (%v):\n%s", err, out)
		}
		if thick {
			if l.Plugins[0].Network.Type != ShimType {
				t.Fatalf("thick conflist runs %q", l.Plugins[0].Network.Type)
			}
			return
		}
		if l.Plugins[0].Network.Type != MultinetBinary {
			t.Fatalf("thin conflist runs %q", l.Plugins[0].Network.Type)
		}
		got, err := ParseConfig(l.Plugins[0].Bytes)
		if err != nil {
			t.Fatalf("installer accepted what the plugin refuses: %v\n%s", err, out)
		}
		got.Kubeconfig, got.NetConf = cfg.Kubeconfig, cfg.NetConf
		if a, b := mustJSON(t, got), mustJSON(t, cfg); a != b {
			t.Fatalf("the plugin reads another configuration than the installer:\n%s\n%s", a, b)
		}
		checkConfig(t, got)
		if err := checkPolicy(t, got); err != nil {
			t.Fatalf("installer accepted a NAD policy that every ADD refuses: %v", err)
		}
	})
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
