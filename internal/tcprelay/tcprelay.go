// Package tcprelay forwards TCP connections byte for byte: each connection
// accepted on a listener is piped to a new connection to a target, so TLS
// runs end to end between the client and the server (a certificate for
// 127.0.0.1 still verifies). The test harnesses use it to let clients on the
// machine's loopback, or in a test's own namespace, reach an apiserver that
// listens only inside a test network namespace (internal/kubetest,
// internal/nodetest): the listener and the target's dialer may live in
// different network namespaces.
package tcprelay

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Dial opens the connection to the target for one accepted connection.
// The context ends when the relay is closed.
type Dial func(ctx context.Context) (net.Conn, error)

// Relay serves one listener.
type Relay struct {
	// Accepted counts the connections accepted so far.
	Accepted atomic.Int64

	ln     net.Listener
	dial   Dial
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
}

// Serve relays every connection accepted on ln to one that dial opens, in
// the background, until Close or until ln is closed by its owner. When dial
// fails (the target is down, e.g. restarting), the accepted connection is
// closed at once: the client sees the same as a refused connection, and its
// next connection is dialled afresh.
func Serve(ln net.Listener, dial Dial) *Relay {
	r := &Relay{ln: ln, dial: dial, conns: map[net.Conn]struct{}{}}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	r.wg.Add(1)
	go r.accept()
	return r
}

// Addr is the listener's address.
func (r *Relay) Addr() net.Addr { return r.ln.Addr() }

func (r *Relay) accept() {
	defer r.wg.Done()
	for {
		in, err := r.ln.Accept()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil { // EMFILE and the like: wait, as net/http does
			select {
			case <-r.ctx.Done():
				return
			case <-time.After(50 * time.Millisecond):
			}
			continue
		}
		r.Accepted.Add(1)
		if !r.track(in) {
			return
		}
		r.wg.Add(1)
		go r.pipe(in)
	}
}

// track records a connection so that Close can end it; false (and the
// connection closed) once the relay is closed.
func (r *Relay) track(c net.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		c.Close()
		return false
	}
	r.conns[c] = struct{}{}
	return true
}

func (r *Relay) untrack(c net.Conn) {
	r.mu.Lock()
	delete(r.conns, c)
	r.mu.Unlock()
	c.Close()
}

// pipe copies both ways until both sides are done, passing a half-close on
// (an HTTP/1.0 client or `nc` ends its request that way).
func (r *Relay) pipe(in net.Conn) {
	defer r.wg.Done()
	defer r.untrack(in)
	out, err := r.dial(r.ctx)
	if err != nil {
		return
	}
	if !r.track(out) {
		return
	}
	defer r.untrack(out)
	done := make(chan struct{}, 2)
	copyHalf := func(dst, src net.Conn) {
		io.Copy(dst, src)
		if tc, ok := dst.(interface{ CloseWrite() error }); ok {
			tc.CloseWrite()
		} else {
			dst.Close()
		}
		done <- struct{}{}
	}
	go copyHalf(out, in)
	go copyHalf(in, out)
	<-done
	<-done
}

// Close stops accepting (closing the listener), ends every relayed
// connection and waits until nothing of the relay runs. Safe to call more
// than once.
func (r *Relay) Close() error {
	r.mu.Lock()
	r.closed = true
	for c := range r.conns {
		c.Close()
	}
	r.mu.Unlock()
	r.cancel()
	err := r.ln.Close()
	r.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}
