package portmap

import (
	"strings"
	"testing"

	"github.com/patchbay-cni/patchbay/spec"
)

// DEL with a configuration that ADD would refuse (here an out-of-range
// hostPort, which the runtime passes to DEL too after the ADD failed)
// succeeds and still removes the attachment's rules, in either backend;
// the reference's DEL does not validate the mappings. A DEL that keeps
// failing would block the whole chain's teardown.
func TestDelToleratesInvalidConfig(t *testing.T) {
	tp := newTopo(t, 1)
	c0 := tp.c[0]
	good := []spec.PortMapping{{HostPort: 8080, ContainerPort: 80, Protocol: "tcp"}}
	bad := []spec.PortMapping{{HostPort: 70000, ContainerPort: 80, Protocol: "tcp"}}
	for _, b := range []string{"nftables", "iptables"} {
		extra := map[string]any{"backend": b}
		mustRun(t, tp.hostPath, "ADD", "lenient", "eth0", c0.path, netConf(t, c0.prevResult(), good, extra))
		if out, code := runIn(t, tp.hostPath, "DEL", "lenient", "eth0", c0.path, netConf(t, c0.prevResult(), bad, extra)); code != 0 {
			t.Fatalf("%s: DEL with an invalid mapping: exit %d: %s", b, code, out)
		}
		if rs := ruleset(t, tp.host) + natRules(t, tp.host, false); strings.Contains(rs, "8080") {
			t.Errorf("%s: rules left after DEL:\n%s", b, rs)
		}
		// Nothing to remove: still a success.
		if out, code := runIn(t, tp.hostPath, "DEL", "lenient", "eth0", c0.path, netConf(t, nil, bad, map[string]any{"backend": "bogus"})); code != 0 {
			t.Fatalf("%s: second DEL with an invalid config: exit %d: %s", b, code, out)
		}
	}
	// ADD keeps refusing it, with the field named.
	if out, code := runIn(t, tp.hostPath, "ADD", "lenient", "eth0", c0.path, netConf(t, c0.prevResult(), bad, nil)); code == 0 || !strings.Contains(out, "hostPort 70000") {
		t.Errorf("ADD with hostPort 70000: exit %d: %s", code, out)
	}
}
