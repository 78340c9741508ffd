package dhcp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/gob"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/patchbay-cni/patchbay/spec"
)

// FuzzRPC: any bytes a client writes to the daemon's socket, served by
// serveRPC with the daemon's methods (an empty daemon; Allocate and Check
// only decode and parse their argument, as they do first: beyond that they
// would enter the namespace the argument names). The server returns once
// the client is done, never panics, and answers the way net/rpc's client
// reads: the CONNECT answer, then per call a response header and a body,
// whose error is a CNI error (ours) or net/rpc's "rpc: ..." text; to
// anything but a CONNECT it answers 405.
func FuzzRPC(f *testing.F) {
	for _, calls := range [][]struct {
		method string
		arg    any
	}{
		{{"DHCP.Status", struct{}{}}},
		{{"DHCP.Release", WireArgs{ContainerID: "c", IfName: "eth0", StdinData: []byte(`{"name":"n"}`)}}, {"DHCP.Release", WireArgs{StdinData: []byte(`{`)}}},
		{{"DHCP.GC", GCArgs{Network: "n", Valid: []spec.Attachment{{ContainerID: "c", IfName: "eth0"}}}}, {"DHCP.Nope", WireArgs{}}},
		{{"DHCP.Allocate", WireArgs{ContainerID: "c", IfName: "eth0", Netns: "/run/netns/x", StdinData: []byte(`{"cniVersion":"1.0.0","name":"n","ipam":{"type":"dhcp","request":[{"option":"routers"}]}}`)}},
			{"DHCP.Check", WireArgs{StdinData: []byte(`{"name":"n","ipam":{"provide":[{"option":"bogus"}]}}`)}}},
	} {
		var b bytes.Buffer
		b.WriteString("CONNECT " + rpcPath + " HTTP/1.0\n\n")
		enc := gob.NewEncoder(&b)
		for i, c := range calls {
			enc.Encode(&rpcRequest{ServiceMethod: c.method, Seq: uint64(i)})
			enc.Encode(c.arg)
		}
		f.Add(b.Bytes())
	}
	f.Add([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
	f.Add([]byte("\n\nCONNECT /_goRPC_ HTTP/1.0\r\nX: y\r\n\r\n\x00\x01"))
	d := &daemon{log: slog.New(slog.DiscardHandler), ctx: context.Background(), dir: f.TempDir(),
		leases: map[string]*lease{}, locks: map[string]*keyLock{}, pending: map[string]context.CancelFunc{}}
	methods := d.methods()
	parseOnly := func(dec func(any) error) (any, error) {
		a, err := decodeInto[WireArgs](dec)
		if err != nil {
			return nil, err
		}
		if _, _, err := parseConf(a.StdinData, a.ContainerID, a.IfName, a.Args); err != nil {
			return nil, rpcError(err)
		}
		return &WireResult{CNIVersion: "1.0.0"}, nil
	}
	methods["DHCP.Allocate"], methods["DHCP.Check"] = parseOnly, parseOnly
	f.Fuzz(func(t *testing.T, data []byte) {
		client, server := socketPair(t)
		defer client.Close()
		served := make(chan error, 1)
		go func() { served <- serveRPC(server, methods) }()
		answer := make(chan []byte, 1)
		go func() {
			b, _ := io.ReadAll(client)
			answer <- b
		}()
		client.Write(data) // fails when the server stopped reading
		client.CloseWrite()
		select {
		case <-served:
		case <-time.After(5 * time.Second):
			t.Fatal("serveRPC did not return after the client finished writing")
		}
		out := <-answer
		checkAnswer(t, data, out)
	})
}

// checkAnswer reads the server's answer as net/rpc's client would.
func checkAnswer(t *testing.T, in, out []byte) {
	t.Helper()
	head, err := readHTTPHead(bufio.NewReader(bytes.NewReader(in)))
	if err != nil {
		return // no complete head: the server hung up (or answered 405)
	}
	if method, path, _ := strings.Cut(head, " "); method != "CONNECT" || !strings.HasPrefix(path, rpcPath+" ") {
		if !bytes.HasPrefix(out, []byte("HTTP/1.0 405 ")) {
			t.Fatalf("answer to %q: %q", head, out)
		}
		return
	}
	connected := []byte("HTTP/1.0 " + rpcConnected + "\n\n")
	if !bytes.HasPrefix(out, connected) {
		t.Fatalf("answer to a CONNECT: %q", out)
	}
	dec := gob.NewDecoder(bytes.NewReader(out[len(connected):]))
	for {
		var resp rpcResponse
		if err := dec.Decode(&resp); err != nil {
			if errors.Is(err, io.EOF) {
				return
			}
			t.Fatalf("response header does not decode: %v", err)
		}
		if err := dec.DecodeValue(reflect.Value{}); err != nil {
			t.Fatalf("response body of %s does not decode: %v", resp.ServiceMethod, err)
		}
		if e := resp.Error; e != "" && !strings.HasPrefix(e, "rpc: ") {
			if ce, ok := spec.ParseError([]byte(e)); !ok || ce.Msg == "" {
				t.Fatalf("%s: error %q is neither a CNI error nor net/rpc's", resp.ServiceMethod, e)
			}
		}
	}
}

// socketPair is a connected pair of unix stream sockets (net.Pipe has no
// half close, which the protocol's end of input needs).
func socketPair(t *testing.T) (*net.UnixConn, net.Conn) {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conn := func(fd int) net.Conn {
		f := os.NewFile(uintptr(fd), "socketpair")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	return conn(fds[0]).(*net.UnixConn), conn(fds[1])
}
