package runtime

import (
	"strings"
	"testing"
)

// A DEL for an interface name ADD refuses (too long, '/', ...) succeeds
// without running a plugin: nothing can exist under that name, and a
// refusal left pods terminating. ADD and CHECK keep refusing it.
func TestDelOfInterfaceNameADDRefuses(t *testing.T) {
	e := newFakeEnv(t)
	e.plugin(t, "fa", fake{result: resA})
	c := e.cni()
	l := mustList(t, `{"cniVersion":"1.1.0","name":"n1","plugins":[{"type":"fa"}]}`)
	for _, name := range []string{strings.Repeat("e", 16), "a/b", "..", "a:b"} {
		rt := &RuntimeConf{ContainerID: "c1", NetNS: "/run/netns/x", IfName: name}
		if _, err := c.AddNetworkList(ctx, l, rt); err == nil {
			t.Errorf("ifname %q: ADD succeeded, want a refusal", name)
		}
		if err := c.CheckNetworkList(ctx, l, rt); err == nil {
			t.Errorf("ifname %q: CHECK succeeded, want a refusal", name)
		}
		if err := c.DelNetworkList(ctx, l, rt); err != nil {
			t.Errorf("ifname %q: DEL: %v", name, err)
		}
	}
	// The container ID is still checked: a DEL with an invalid one fails.
	if err := c.DelNetworkList(ctx, l, &RuntimeConf{ContainerID: "", IfName: strings.Repeat("e", 16)}); err == nil {
		t.Error("DEL with an empty container ID succeeded")
	}
}
