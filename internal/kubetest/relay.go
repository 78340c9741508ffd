package kubetest

import (
	"io"
	"net"
	"net/url"
	"sync/atomic"
)

// Relay forwards every connection accepted on ln to the apiserver as plain
// TCP (TLS runs end to end, so the serving certificate for 127.0.0.1 still
// verifies), until ln is closed; it returns the count of connections
// accepted. Clients in a test network namespace reach the apiserver, which
// listens in the test process's namespace, through a listener the caller
// opened inside their namespace. While the apiserver is down (see
// RestartAPIServer) relayed connections are closed at once.
func (c *Cluster) Relay(ln net.Listener) *atomic.Int64 {
	u, _ := url.Parse(c.URL)
	conns := new(atomic.Int64)
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			go func() {
				defer in.Close()
				out, err := net.Dial("tcp", u.Host)
				if err != nil {
					return
				}
				defer out.Close()
				go func() {
					io.Copy(out, in)
					out.(*net.TCPConn).CloseWrite()
				}()
				io.Copy(in, out)
			}()
		}
	}()
	return conns
}
