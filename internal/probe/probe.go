// Package probe sends test traffic between network namespaces: a TCP
// listener that greets every connection with one line, and a dial that
// reads it. `make demo` and the interop tests use it; both ends stay inside
// namespaces they created.
package probe

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/patchbay-cni/patchbay/internal/netns"
)

// Timeout bounds each dial and read.
const Timeout = 3 * time.Second

// Serve listens on addr (e.g. ":80") inside the namespace at nsPath and
// answers each connection with msg and a newline. The socket belongs to the
// namespace it was created in, so accepting may happen on any thread.
func Serve(nsPath, addr, msg string) (stop func(), err error) {
	var ln net.Listener
	if err := netns.Do(nsPath, func() error {
		var err error
		ln, err = net.Listen("tcp", addr)
		return err
	}); err != nil {
		return nil, fmt.Errorf("listen on %s in %s: %w", addr, nsPath, err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			io.WriteString(c, msg+"\n")
			c.Close()
		}
	}()
	return func() { ln.Close() }, nil
}

// Greeting connects from inside the namespace at nsPath to addr and returns
// the first line it reads, trimmed.
func Greeting(nsPath, addr string) (string, error) {
	var line string
	err := netns.Do(nsPath, func() error {
		c, err := net.DialTimeout("tcp", addr, Timeout)
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(Timeout))
		line, err = bufio.NewReader(c).ReadString('\n')
		return err
	})
	if err != nil {
		return "", fmt.Errorf("connect from %s to %s: %w", nsPath, addr, err)
	}
	return strings.TrimSpace(line), nil
}
