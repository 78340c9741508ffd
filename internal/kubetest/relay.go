package kubetest

import (
	"net"
	"sync/atomic"

	"github.com/patchbay-cni/patchbay/internal/tcprelay"
)

// Relay forwards every connection accepted on ln to the apiserver inside
// the cluster's network namespace, as plain TCP (TLS runs end to end, so the
// serving certificate for 127.0.0.1 still verifies), until ln is closed or
// the cluster stopped; it returns the count of connections accepted. Clients
// in a test network namespace reach the apiserver through a listener the
// caller opened inside their namespace (Cluster.URL is the same relay on the
// machine's loopback). While the apiserver is down (see RestartAPIServer)
// relayed connections are closed at once.
func (c *Cluster) Relay(ln net.Listener) *atomic.Int64 {
	r := tcprelay.Serve(ln, c.dialAPIServer)
	c.relayMu.Lock()
	c.relays = append(c.relays, r)
	c.relayMu.Unlock()
	return &r.Accepted
}
