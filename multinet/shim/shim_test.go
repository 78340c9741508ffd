package shim

import (
	"encoding/json"
	"io"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/patchbay-cni/patchbay/spec"
)

// The shim is on every pod's critical path and must stay small: no
// Kubernetes client, no YAML, no Prometheus, no HTTP stack.
func TestShimLinksNoKubernetesClient(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/patchbay-cni/patchbay/cmd/multinet-shim").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v: %s", err, out)
	}
	deps := strings.Fields(string(out))
	for _, d := range deps {
		for _, bad := range []string{"k8s.io/", "sigs.k8s.io/", "github.com/prometheus/", "github.com/k8snetworkplumbingwg/",
			"net/http", "github.com/patchbay-cni/patchbay/multinet/kube", "github.com/patchbay-cni/patchbay/multinet/plugin"} {
			if strings.HasPrefix(d, bad) {
				t.Errorf("cmd/multinet-shim depends on %s", d)
			}
		}
	}
	if len(deps) < 10 {
		t.Fatalf("go list -deps printed %q", out)
	}
}

// The thin plugin keeps its lean start: the daemon's libraries live in
// multinet-daemon, not in multinet ("multinet daemon" execs it).
func TestThinPluginLinksNoDaemonLibraries(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/patchbay-cni/patchbay/cmd/multinet").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v: %s", err, out)
	}
	for _, d := range strings.Fields(string(out)) {
		for _, bad := range []string{"k8s.io/", "github.com/prometheus/", "github.com/k8snetworkplumbingwg/",
			"github.com/patchbay-cni/patchbay/multinet/daemon"} {
			if strings.HasPrefix(d, bad) {
				t.Errorf("cmd/multinet depends on %s", d)
			}
		}
	}
}

func TestForwardDaemonDown(t *testing.T) {
	sock := filepath.Join(t.TempDir(), SocketName)
	_, err := Forward(sock, &Request{}, 0)
	ce := spec.AsError(err, 0)
	if ce == nil || ce.Code != spec.ErrTryAgainLater || !strings.Contains(ce.Msg, sock) || !strings.Contains(ce.Msg, "daemon") {
		t.Errorf("daemon down: %v, want code 11 naming the socket", err)
	}
}

// A daemon that starts listening while the shim waits (a DaemonSet
// rollout) gets the request; one that does not appear within the wait is
// code 11, after about the wait and not much longer.
func TestForwardWaitsForTheDaemon(t *testing.T) {
	sock := filepath.Join(t.TempDir(), SocketName)
	go func() {
		time.Sleep(300 * time.Millisecond)
		ln, err := net.Listen("unix", sock)
		if err != nil {
			return
		}
		defer ln.Close()
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		io.ReadAll(c)
		resp, _ := json.Marshal(&Response{Stdout: []byte("ok")})
		c.Write(resp)
	}()
	resp, err := Forward(sock, &Request{}, 30*time.Second)
	if err != nil || string(resp.Stdout) != "ok" {
		t.Fatalf("a daemon appearing after 300 ms: %+v, %v", resp, err)
	}
	missing := filepath.Join(t.TempDir(), SocketName)
	start := time.Now()
	_, err = Forward(missing, &Request{}, 500*time.Millisecond)
	if ce := spec.AsError(err, 0); ce == nil || ce.Code != spec.ErrTryAgainLater {
		t.Errorf("no daemon within the wait: %v, want code 11", err)
	}
	if took := time.Since(start); took < 500*time.Millisecond {
		t.Errorf("gave up after %v, before the 500 ms wait", took)
	}
}

func TestWaitFromConfig(t *testing.T) {
	for in, want := range map[string]time.Duration{
		`{}`:                        DefaultWait,
		`{"daemonWaitSeconds":0}`:   0,
		`{"daemonWaitSeconds":2.5}`: 2500 * time.Millisecond,
		`{"daemonWaitSeconds":-1}`:  0,
	} {
		var c conf
		if err := json.Unmarshal([]byte(in), &c); err != nil {
			t.Fatal(err)
		}
		if got := c.wait(); got != want {
			t.Errorf("%s: wait %v, want %v", in, got, want)
		}
	}
}

// A daemon that accepts and closes without answering (it is going away).
func TestForwardNoAnswer(t *testing.T) {
	sock := filepath.Join(t.TempDir(), SocketName)
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			io.ReadAll(c)
			c.Close()
		}
	}()
	_, err = Forward(sock, &Request{}, time.Second)
	if ce := spec.AsError(err, 0); ce == nil || ce.Code != spec.ErrTryAgainLater || !strings.Contains(ce.Details, "without answering") {
		t.Errorf("no answer: %v, want code 11", err)
	}
}

func TestForwardRoundTrip(t *testing.T) {
	sock := SocketPath(t.TempDir())
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		var req Request
		b, _ := io.ReadAll(c)
		json.Unmarshal(b, &req)
		resp, _ := json.Marshal(&Response{ExitCode: 1, Stdout: req.Config, Stderr: []byte(strings.Join(req.Env, ","))})
		c.Write(resp)
	}()
	resp, err := Forward(sock, &Request{Env: []string{"CNI_COMMAND=ADD"}, Config: []byte(`{"a":1}`), Start: 5}, 0)
	if err != nil || resp.ExitCode != 1 || string(resp.Stdout) != `{"a":1}` || string(resp.Stderr) != "CNI_COMMAND=ADD" {
		t.Errorf("round trip: %+v, %v", resp, err)
	}
}

// BenchmarkForward: one request and answer over the socket (the protocol's
// own cost; the daemon side here only echoes).
func BenchmarkForward(b *testing.B) {
	sock := SocketPath(b.TempDir())
	ln, err := net.Listen("unix", sock)
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				var req Request
				data, _ := io.ReadAll(c)
				json.Unmarshal(data, &req)
				resp, _ := json.Marshal(&Response{Stdout: req.Config})
				c.Write(resp)
			}()
		}
	}()
	env := make([]string, 30)
	for i := range env {
		env[i] = "VARIABLE_NUMBER_" + strings.Repeat("x", i) + "=/some/value/of/a/path"
	}
	req := &Request{Env: env, Config: []byte(strings.Repeat(`{"cniVersion":"1.0.0","name":"multinet","type":"multinet-shim"}`, 8))}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := Forward(sock, req, 0); err != nil {
			b.Fatal(err)
		}
	}
}
