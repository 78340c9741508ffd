package spec

import "testing"

// The request configurations of the spec's add, check and delete examples
// (cni-spec-1.1.md, Appendix), derived with BuildRequest from the dbnet list.
// The appendix prints prevResult without cniVersion; ours carries it. The
// appendix's bridge request also omits the ipam "routes" its own section-1
// configuration has; we pass every key through, as section 3 requires.
func TestSpecAppendixRequests(t *testing.T) {
	l, err := ParseConfList([]byte(dbnet))
	if err != nil {
		t.Fatal(err)
	}
	bridge, tuning, portmap := l.Plugins[0], l.Plugins[1], l.Plugins[2]
	tuned := mustParse(t, exampleTuning, V110)
	macRC := map[string]any{"mac": "00:11:22:33:44:66"}
	portRC := map[string]any{"portMappings": []PortMapping{{HostPort: 8080, ContainerPort: 80, Protocol: "tcp"}}}
	prev := `"prevResult": ` + withVersion(V110, exampleTuning)

	bridgeReq := `{
  "cniVersion": "1.1.0", "name": "dbnet", "type": "bridge", "bridge": "cni0",
  "keyA": ["some more", "plugin specific", "configuration"],
  "ipam": {"type": "host-local", "subnet": "10.1.0.0/16", "gateway": "10.1.0.1", "routes": [{"dst": "0.0.0.0/0"}]},
  "dns": {"nameservers": [ "10.1.0.1" ]},
  ` + prev + `}`
	tuningReq := `{
  "cniVersion": "1.1.0", "name": "dbnet", "type": "tuning",
  "sysctl": {"net.core.somaxconn": "500"}, "big": 123456789012345678901234567890,
  "runtimeConfig": {"mac": "00:11:22:33:44:66"},
  ` + prev + `}`
	portmapReq := `{
  "cniVersion": "1.1.0", "name": "dbnet", "type": "portmap",
  "runtimeConfig": {"portMappings" : [{ "hostPort": 8080, "containerPort": 80, "protocol": "tcp" }]},
  ` + prev + `}`

	// Add step 3 and every check/delete step use the tuned result.
	for _, c := range []struct {
		name string
		p    *PluginConf
		rc   map[string]any
		want string
	}{
		{"bridge", bridge, nil, bridgeReq},
		{"tuning", tuning, macRC, tuningReq},
		{"portmap", portmap, portRC, portmapReq},
	} {
		t.Run(c.name, func(t *testing.T) {
			req, err := BuildRequest(c.p, l.Name, l.Version(), tuned, c.rc, nil)
			if err != nil {
				t.Fatal(err)
			}
			assertJSON(t, req, c.want)
			// What a plugin reads back out of it.
			pc, err := ParsePluginConf(req)
			if err != nil {
				t.Fatal(err)
			}
			pr := mustParse(t, string(pc.Network.RawPrevResult), pc.Network.CNIVersion)
			if pr.Interfaces[2].Mac != "00:11:22:33:44:66" || *pr.IPs[0].Interface != 2 {
				t.Errorf("prevResult = %s", pr)
			}
		})
	}
}
