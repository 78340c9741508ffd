package bridge

import (
	"strings"
	"testing"

	"github.com/patchbay-cni/patchbay/skel"
	"github.com/patchbay-cni/patchbay/spec"
)

// loadConf runs skel's parsing and load on a config, as an ADD would.
func loadConf(t *testing.T, conf, cniArgs string) (*Config, error) {
	t.Helper()
	env := skel.Env{"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "c1", "CNI_NETNS": "/run/netns/none", "CNI_IFNAME": "eth0", "CNI_PATH": "/x", "CNI_ARGS": cniArgs}
	a, err := skel.NewCmdArgs(Plugin(), env, []byte(conf))
	if err != nil {
		return nil, err
	}
	return load(a)
}

// Issue 7 item 7: a MAC the kernel refuses for an interface (broadcast,
// multicast, all-zero) is a config error naming where it came from, found
// before anything is created (it used to be 999 "cannot assign requested
// address" from the kernel); a bad ipam.type names ipam.type.
func TestConfigRefusesUnusableMACs(t *testing.T) {
	for _, c := range []struct {
		conf, args string
		code       uint
		mentions   []string
	}{
		{`{"cniVersion":"1.0.0","name":"n","runtimeConfig":{"mac":"ff:ff:ff:ff:ff:ff"}}`, "", 7, []string{"runtimeConfig.mac", "ff:ff:ff:ff:ff:ff", "broadcast"}},
		{`{"cniVersion":"1.0.0","name":"n","args":{"cni":{"mac":"01:00:5e:00:00:01"}}}`, "", 7, []string{"args.cni.mac", "multicast"}},
		{`{"cniVersion":"1.0.0","name":"n","runtimeConfig":{"mac":"00:00:00:00:00:00"}}`, "", 7, []string{"runtimeConfig.mac", "all-zero"}},
		{`{"cniVersion":"1.0.0","name":"n","runtimeConfig":{"mac":"02:00:00:00:00:00:00:01"}}`, "", 7, []string{"runtimeConfig.mac", "Ethernet"}},
		{`{"cniVersion":"1.0.0","name":"n"}`, "MAC=33:33:00:00:00:01", 4, []string{"CNI_ARGS MAC", "multicast"}},
		{`{"cniVersion":"1.0.0","name":"n","ipam":{"type":"../host-local"}}`, "", 7, []string{`"ipam.type"`, "../host-local"}},
	} {
		_, err := loadConf(t, c.conf, c.args)
		e := spec.AsError(err, 0)
		if e == nil || e.Code != c.code {
			t.Errorf("%s %s: %v, want code %d", c.conf, c.args, err, c.code)
			continue
		}
		for _, m := range c.mentions {
			if !strings.Contains(e.Msg, m) {
				t.Errorf("%s: message %q does not mention %q", c.conf, e.Msg, m)
			}
		}
		if strings.HasPrefix(e.Msg, "bridge") {
			t.Errorf("message repeats the plugin's name: %q", e.Msg)
		}
	}
	c, err := loadConf(t, `{"cniVersion":"1.0.0","name":"n","runtimeConfig":{"mac":"0A-58-0A-01-00-05"}}`, "")
	if err != nil || c.mac != "0a:58:0a:01:00:05" {
		t.Errorf("a unicast MAC: %v, %q", err, c.mac)
	}
}
