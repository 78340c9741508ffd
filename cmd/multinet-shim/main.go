// Command multinet-shim is the CNI plugin of multinet's thick mode (type
// "multinet-shim"): it forwards each call to the multinet daemon on the
// node over a unix socket and answers what the daemon answers. It links no
// Kubernetes client (multinet/shim has the protocol).
package main

import (
	"os"
	"runtime/debug"
	"time"

	"github.com/patchbay-cni/patchbay/multinet/shim"
)

func main() {
	start := time.Now()
	debug.SetGCPercent(-1) // one short call: collecting garbage would only cost time
	os.Exit(shim.Main(start))
}
