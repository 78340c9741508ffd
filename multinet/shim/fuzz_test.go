package shim

import (
	"bytes"
	"io"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/patchbay-cni/patchbay/spec"
)

// FuzzConf: the shim's own configuration (its conflist entry: cniVersion,
// daemonSocketDir, daemonWaitSeconds), read as Main reads it. The wait is
// never negative and "daemonWaitSeconds" of any size waits at least as
// long as a smaller one; the socket is multinet.sock in the directory; a
// failure is a CNI error in the configuration's version when we speak
// it, else in ours.
func FuzzConf(f *testing.F) {
	for _, s := range []string{
		`{"cniVersion":"1.1.0","name":"multinet","type":"multinet-shim","daemonSocketDir":"/run/multinet"}`,
		`{"cniVersion":"0.3.1","daemonWaitSeconds":0.5}`,
		`{"daemonWaitSeconds":0}`, `{"daemonWaitSeconds":-3}`,
		`{"daemonWaitSeconds":1e300,"cniVersion":"x"}`,
		`{"daemonWaitSeconds":"5"}`, `null`, `[]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, stdin []byte) {
		c := readConf(stdin)
		w := c.wait()
		if w < 0 {
			t.Fatalf("daemonWaitSeconds %v waits %v", *c.WaitSeconds, w)
		}
		if c.WaitSeconds != nil && *c.WaitSeconds > 1 && w < time.Second {
			t.Fatalf("daemonWaitSeconds %v waits only %v", *c.WaitSeconds, w)
		}
		if p := SocketPath(c.SocketDir); filepath.Base(p) != SocketName {
			t.Fatalf("socket %q", p)
		}
		var out bytes.Buffer
		if code := fail(&out, c.CNIVersion, spec.Errorf(spec.ErrTryAgainLater, "x")); code != 1 {
			t.Fatalf("fail exits %d", code)
		}
		e, ok := spec.ParseError(out.Bytes())
		if !ok || e.Code != spec.ErrTryAgainLater || !spec.IsSupported(e.CNIVersion) ||
			(spec.IsSupported(c.CNIVersion) && e.CNIVersion != c.CNIVersion) {
			t.Fatalf("failure %q for cniVersion %q (want a CNI error in that version, or ours)", out.Bytes(), c.CNIVersion)
		}
	})
}

// FuzzForward: whatever the daemon answers, Forward returns a response
// whose exit status means what the daemon said (0, or 1 with a CNI error
// to print) or a CNI error: 11 for no answer, 999 for an undecodable one.
func FuzzForward(f *testing.F) {
	for _, s := range []string{
		`{"exitCode":0,"stdout":"eyJjbmlWZXJzaW9uIjoiMS4xLjAifQ=="}`,
		`{"exitCode":1,"stdout":"eyJjb2RlIjo3LCJtc2ciOiJ4In0=","stderr":"bG9n"}`,
		`{"exitCode":256}`, `{"exitCode":-1}`, `{"stdout":"!"}`, `null`, ``, `{`,
	} {
		f.Add([]byte(s))
	}
	sock := filepath.Join(f.TempDir(), SocketName)
	ln, err := net.Listen("unix", sock)
	if err != nil {
		f.Fatal(err)
	}
	defer ln.Close()
	var mu sync.Mutex
	var answer []byte
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			io.Copy(io.Discard, conn)
			mu.Lock()
			a := answer
			mu.Unlock()
			conn.Write(a)
			conn.Close()
		}
	}()
	f.Fuzz(func(t *testing.T, data []byte) {
		mu.Lock()
		answer = data
		mu.Unlock()
		resp, err := Forward(sock, &Request{Env: []string{"CNI_COMMAND=ADD"}, Config: []byte(`{}`), Start: 1}, 0)
		if err != nil {
			ce, ok := err.(*spec.Error)
			if !ok || (ce.Code != spec.ErrTryAgainLater && ce.Code != spec.ErrInternal) {
				t.Fatalf("error %T %v", err, err)
			}
			if ce.Code == spec.ErrTryAgainLater && len(data) != 0 {
				t.Fatalf("an answer of %d bytes read as no answer: %v", len(data), err)
			}
			return
		}
		if resp.ExitCode != 0 && resp.ExitCode != 1 {
			t.Fatalf("exit status %d passed on (the process would exit %d)", resp.ExitCode, resp.ExitCode&0xff)
		}
	})
}
