// Package seed holds the CNI spec's example network ("dbnet", cni-spec-1.1.md
// §1 "Example configuration"): bridge + host-local + tuning (mac capability)
// + portmap (portMappings capability). `make demo` runs it on embedded
// defaults and the interop tests drive it with the reference cnitool.
package seed

import "fmt"

// NetworkName is the example network's name.
const NetworkName = "dbnet"

// template is the spec's example with what a runnable setup needs: the
// bridge as the subnet's gateway (so the host can reach the containers and
// the port mappings), hairpin mode (a container reaching its own port
// mapping; needed whenever br_netfilter is loaded, as kubelet configures it),
// and the state directories of host-local and tuning as parameters.
const template = `{
  "cniVersion": "1.1.0",
  "cniVersions": ["0.3.1", "0.4.0", "1.0.0", "1.1.0"],
  "name": "dbnet",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "cni0",
      "isGateway": true,
      "hairpinMode": true,
      "keyA": ["some more", "plugin specific", "configuration"],
      "ipam": {
        "type": "host-local",
        "subnet": "10.1.0.0/16",
        "gateway": "10.1.0.1",
        "dataDir": %q,
        "routes": [{"dst": "0.0.0.0/0"}]
      },
      "dns": {"nameservers": ["10.1.0.1"]}
    },
    {"type": "tuning", "capabilities": {"mac": true}, "dataDir": %q, "sysctl": {"net.core.somaxconn": "500"}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}`

// Conflist returns the example conflist with host-local's and tuning's
// state kept in the given directories.
func Conflist(ipamDir, tuningDir string) string {
	return fmt.Sprintf(template, ipamDir, tuningDir)
}
