package skel

import (
	"strings"
	"testing"

	"github.com/patchbay-cni/patchbay/spec"
)

func TestRequestedMAC(t *testing.T) {
	conf := `{"cniVersion":"1.0.0","name":"n","type":"x","mac":"02:00:00:00:00:01",
	  "args":{"cni":{"mac":"02:00:00:00:00:03"}},"runtimeConfig":{"mac":"02:00:00:00:00:04"}}`
	all := []MACSource{MACKey, MACCNIArgs, MACArgs, MACRuntimeConfig}
	for _, c := range []struct {
		name, conf, args string
		order            []MACSource
		want             string
		from             MACSource
		code             uint
	}{
		{"none", `{}`, "", all, "", "", 0},
		{"key only", conf, "", []MACSource{MACKey}, "02:00:00:00:00:01", MACKey, 0},
		{"macvlan order: runtimeConfig last", conf, "MAC=02:00:00:00:00:02", []MACSource{MACKey, MACCNIArgs, MACRuntimeConfig}, "02:00:00:00:00:04", MACRuntimeConfig, 0},
		{"tuning order: args.cni last", conf, "", []MACSource{MACKey, MACCNIArgs, MACRuntimeConfig, MACArgs}, "02:00:00:00:00:03", MACArgs, 0},
		{"CNI_ARGS over key", conf, "IgnoreUnknown=1;K8S_POD_NAME=p;MAC=02:00:00:00:00:02", []MACSource{MACKey, MACCNIArgs}, "02:00:00:00:00:02", MACCNIArgs, 0},
		{"empty values do not count", `{"mac":"","runtimeConfig":{"mac":""}}`, "MAC=", all, "", "", 0},
		{"upper case accepted", `{"mac":"0A:58:0A:01:00:05"}`, "", all, "0a:58:0a:01:00:05", MACKey, 0},
		{"multicast", `{"mac":"01:00:5e:00:00:01"}`, "", all, "", "", spec.ErrInvalidNetworkConfig},
		{"broadcast", `{"runtimeConfig":{"mac":"ff:ff:ff:ff:ff:ff"}}`, "", all, "", "", spec.ErrInvalidNetworkConfig},
		{"zero", `{"mac":"00:00:00:00:00:00"}`, "", all, "", "", spec.ErrInvalidNetworkConfig},
		{"infiniband length", `{"mac":"00:00:00:00:fe:80:00:00:00:00:00:00:02:00:5e:10:00:00:00:01"}`, "", all, "", "", spec.ErrInvalidNetworkConfig},
		{"garbage in CNI_ARGS is the environment's", `{}`, "MAC=nope", all, "", "", spec.ErrInvalidEnvironment},
		{"a key of the wrong type", `{"mac":5}`, "", all, "", "", spec.ErrDecodingFailure},
		{"an unlisted source is ignored", `{"mac":"zz"}`, "", []MACSource{MACRuntimeConfig}, "", "", 0},
	} {
		a := &CmdArgs{StdinData: []byte(c.conf), Args: c.args}
		mac, from, err := a.RequestedMAC(c.order...)
		if c.code != 0 {
			ce, ok := err.(*spec.Error)
			if !ok || ce.Code != c.code {
				t.Errorf("%s: error %v, want code %d", c.name, err, c.code)
			}
			continue
		}
		if err != nil || mac.String() != c.want || from != c.from {
			t.Errorf("%s: %q from %q, %v; want %q from %q", c.name, mac, from, err, c.want, c.from)
		}
	}
	// The messages name where the bad value came from, the value and why.
	_, _, err := (&CmdArgs{StdinData: []byte(`{"mac":"FF:FF:FF:FF:FF:FF"}`)}).RequestedMAC(MACKey)
	if err == nil || !strings.Contains(err.Error(), "broadcast") {
		t.Errorf("broadcast: %v", err)
	}
	_, _, err = (&CmdArgs{StdinData: []byte(`{"runtimeConfig":{"mac":"03:00:00:00:00:01"}}`)}).RequestedMAC(MACRuntimeConfig)
	for _, want := range []string{"runtimeConfig.mac", "03:00:00:00:00:01", "multicast"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("message does not name %q: %v", want, err)
		}
	}
}
