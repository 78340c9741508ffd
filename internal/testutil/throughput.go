package testutil

import (
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/patchbay-cni/patchbay/internal/netns"
)

// Throughput measures the TCP goodput from the network namespace at
// fromPath to addr, which a receiver listens on inside the namespace at
// toPath (addr must be an address of that namespace: traffic stays
// between the test's namespaces). The sender writes as fast as TCP lets it;
// the receiver counts bytes from skip after the first byte (so that a
// shaper's burst has drained) for window, and the result is in bits per
// second of payload.
func Throughput(t testing.TB, fromPath, toPath string, addr netip.AddrPort, skip, window time.Duration) float64 {
	t.Helper()
	var ln net.Listener
	if err := netns.Do(toPath, func() (err error) {
		ln, err = net.Listen("tcp", addr.String())
		return err
	}); err != nil {
		t.Fatalf("listen on %s in %s: %v", addr, toPath, err)
	}
	defer ln.Close()

	// The rate is bytes over time between two reads that emptied the
	// socket's queue: the first one after skip (its bytes excluded) and the
	// first one at or after skip+window (included). A read that fills the
	// buffer may leave older bytes queued (the reader was late): it does
	// not mark a time.
	var rate float64
	done := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- err
			return
		}
		defer c.Close()
		buf := make([]byte, 256<<10)
		var start, ta time.Time
		var total, atA int64
		for {
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			n, err := c.Read(buf)
			now := time.Now()
			total += int64(n)
			switch {
			case n == 0 || n == len(buf):
			case start.IsZero():
				start = now
			case ta.IsZero() && now.Sub(start) >= skip:
				ta, atA = now, total
			case !ta.IsZero() && now.Sub(start) >= skip+window:
				rate = float64(total-atA) * 8 / now.Sub(ta).Seconds()
				done <- nil
				return
			}
			if err != nil {
				if err == io.EOF {
					err = io.ErrUnexpectedEOF
				}
				done <- err
				return
			}
		}
	}()

	var conn net.Conn
	if err := netns.Do(fromPath, func() (err error) {
		conn, err = net.DialTimeout("tcp", addr.String(), 5*time.Second)
		return err
	}); err != nil {
		t.Fatalf("connect to %s from %s: %v", addr, fromPath, err)
	}
	defer conn.Close()
	go func() {
		chunk := make([]byte, 64<<10)
		for {
			conn.SetWriteDeadline(time.Now().Add(skip + window + 10*time.Second))
			if _, err := conn.Write(chunk); err != nil {
				return
			}
		}
	}()
	if err := <-done; err != nil {
		t.Fatalf("receive from %s on %s: %v", fromPath, addr, err)
	}
	return rate
}
