package iftest

import (
	"encoding/json"
	"testing"

	"github.com/patchbay-cni/patchbay/internal/ifplugin"
	"github.com/patchbay-cni/patchbay/skel"
	"github.com/patchbay-cni/patchbay/spec"
)

// FuzzArgs is the CmdArgs the SDK would hand a verb for this stdin and
// CNI_ARGS (nil when the SDK itself refuses them first).
func FuzzArgs(cmd string, conf []byte, args string) *skel.CmdArgs {
	var nc spec.NetConf
	if json.Unmarshal(conf, &nc) != nil {
		return nil
	}
	if _, err := spec.ParseCNIArgs(args); err != nil {
		return nil
	}
	return &skel.CmdArgs{Command: cmd, ContainerID: "fuzz", Netns: "/run/netns/none", IfName: "eth0", Args: args,
		StdinData: conf, Conf: &nc, Version: spec.ConfigVersion(nc.CNIVersion)}
}

// WantCode fails unless err is a CNI error with one of codes (a plugin
// must answer bad input with a specific code, never 999 or a panic).
func WantCode(t *testing.T, err error, codes ...uint) {
	t.Helper()
	ce := spec.AsError(err, spec.ErrInternal)
	for _, c := range codes {
		if ce.Code == c {
			if ce.Msg == "" {
				t.Errorf("code %d without a message", c)
			}
			return
		}
	}
	t.Errorf("error %q has code %d, want one of %v", ce.Msg, ce.Code, codes)
}

// Seeds are configurations worth starting a fuzz run from, for a plugin
// of type typ.
func Seeds(typ string) []string {
	return []string{
		`{"cniVersion":"1.1.0","name":"n","type":"` + typ + `","master":"eth0","mode":"bridge","mtu":1400,"vlanId":5,"ipam":{"type":"host-local","subnet":"10.1.0.0/24"}}`,
		`{"cniVersion":"0.3.1","name":"n","type":"` + typ + `","mac":"02:00:00:00:00:01","runtimeConfig":{"mac":"02:00:00:00:00:02"},"linkInContainer":true}`,
		`{"cniVersion":"1.0.0","name":"n","type":"` + typ + `","mode":"l3s","mtu":-1,"master":"a/b","bcqueuelen":100}`,
		`{"cniVersion":"1.0.0","name":"n","type":"` + typ + `","prevResult":{"cniVersion":"1.0.0","interfaces":[{"name":"m0"}],"ips":[{"address":"10.0.0.2/24"}]}}`,
	}
}

// FuzzDef fuzzes a plugin's configuration handling: any configuration and
// CNI_ARGS are either refused with a specific code and a message, or
// validated into a link description, without a panic. (No kernel work:
// the system side is Contract's.)
func FuzzDef[C any](f *testing.F, d ifplugin.Def[C]) {
	for _, s := range Seeds(d.Type) {
		f.Add([]byte(s), "IgnoreUnknown=1;MAC=02:00:00:00:00:03")
	}
	f.Fuzz(func(t *testing.T, conf []byte, args string) {
		a := FuzzArgs(spec.CmdAdd, conf, args)
		if a == nil {
			return
		}
		c, err := d.Load(a)
		if err != nil {
			WantCode(t, err, spec.ErrDecodingFailure, spec.ErrInvalidNetworkConfig, spec.ErrInvalidEnvironment)
			return
		}
		k, kc := d.Describe(c)
		if err := k.Validate(kc); err != nil {
			WantCode(t, err, spec.ErrInvalidNetworkConfig)
			return
		}
		if l := k.New(nil); l == nil || l.Type() != d.Type {
			t.Fatalf("New made %v", l)
		}
	})
}
