package tcprelay

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// server serves every connection with handle, until the test ends.
func server(tb testing.TB, handle func(net.Conn)) net.Listener {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				handle(c)
			}()
		}
	}()
	return ln
}

// upperServer answers each connection with what it read, upper-cased,
// after the client half-closed.
func upperServer(t *testing.T) net.Listener {
	return server(t, func(c net.Conn) {
		b, _ := io.ReadAll(c)
		c.Write([]byte(strings.ToUpper(string(b))))
	})
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

func dialTo(addr string) Dial {
	return func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}
}

// roundTrip sends msg, half-closes and reads the answer to its end.
func roundTrip(addr, msg string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte(msg)); err != nil {
		return "", err
	}
	c.(*net.TCPConn).CloseWrite()
	b, err := io.ReadAll(c)
	return string(b), err
}

// Bytes pass both ways and a half-close reaches the server, which answers
// after it; every connection is counted.
func TestRelayPipesAndPassesHalfClose(t *testing.T) {
	srv := upperServer(t)
	r := Serve(listen(t), dialTo(srv.Addr().String()))
	defer r.Close()
	for i := 0; i < 3; i++ {
		got, err := roundTrip(r.Addr().String(), "hello relay")
		if err != nil || got != "HELLO RELAY" {
			t.Fatalf("round trip %d: %q, %v", i, got, err)
		}
	}
	if n := r.Accepted.Load(); n != 3 {
		t.Errorf("Accepted = %d, want 3", n)
	}
}

// While the target is down each connection is closed at once; once it is
// back, new connections reach it.
func TestRelayTargetDownThenBack(t *testing.T) {
	srv := upperServer(t)
	var down atomic.Bool
	target := srv.Addr().String()
	r := Serve(listen(t), func(ctx context.Context) (net.Conn, error) {
		if down.Load() {
			return nil, errors.New("down")
		}
		return dialTo(target)(ctx)
	})
	defer r.Close()
	down.Store(true)
	t0 := time.Now()
	got, err := roundTrip(r.Addr().String(), "x")
	if got != "" || time.Since(t0) > 5*time.Second {
		t.Fatalf("target down: got %q, %v after %v; want an empty answer at once", got, err, time.Since(t0))
	}
	down.Store(false)
	if got, err := roundTrip(r.Addr().String(), "back"); got != "BACK" {
		t.Fatalf("target back: %q, %v", got, err)
	}
}

// Close ends the listener and the relayed connections, and returns only
// when nothing of the relay runs.
func TestRelayCloseEndsEverything(t *testing.T) {
	// A server that never answers nor closes: only Close ends the pipe.
	hold := listen(t)
	defer hold.Close()
	held := make(chan net.Conn, 1)
	go func() {
		c, err := hold.Accept()
		if err == nil {
			held <- c
		}
	}()
	r := Serve(listen(t), dialTo(hold.Addr().String()))
	c, err := net.Dial("tcp", r.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var srvSide net.Conn
	select {
	case srvSide = <-held:
		defer srvSide.Close()
	case <-time.After(10 * time.Second):
		t.Fatal("relay did not dial the target")
	}
	done := make(chan error, 1)
	go func() { done <- r.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return")
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := c.Read(make([]byte, 1)); err == nil {
		t.Errorf("client connection still open after Close (read %d bytes)", n)
	}
	srvSide.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := srvSide.Read(make([]byte, 1)); err == nil {
		t.Errorf("target connection still open after Close (read %d bytes)", n)
	}
	if c, err := net.DialTimeout("tcp", r.Addr().String(), time.Second); err == nil {
		c.Close()
		t.Error("listener still accepts after Close")
	}
	if err := r.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// pingPongServer answers every 512-byte message with one of its own, on a
// kept-alive connection.
func pingPongServer(b *testing.B) net.Listener {
	return server(b, func(c net.Conn) {
		buf := make([]byte, 512)
		for {
			if _, err := io.ReadFull(c, buf); err != nil {
				return
			}
			if _, err := c.Write(buf); err != nil {
				return
			}
		}
	})
}

func benchPingPong(b *testing.B, addr string) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, 512)
	for b.Loop() {
		if _, err := c.Write(buf); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(c, buf); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRoundTripDirect and BenchmarkRoundTripRelayed are one 512-byte
// request and answer on a kept-alive loopback connection, without and with a
// relay between: their difference is what the relay adds to a request.
func BenchmarkRoundTripDirect(b *testing.B) {
	benchPingPong(b, pingPongServer(b).Addr().String())
}

func BenchmarkRoundTripRelayed(b *testing.B) {
	srv := pingPongServer(b)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	r := Serve(ln, dialTo(srv.Addr().String()))
	defer r.Close()
	benchPingPong(b, r.Addr().String())
}
