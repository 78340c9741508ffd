package shim

import (
	"encoding/json"
	"io"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

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

func TestForwardDaemonDown(t *testing.T) {
	sock := filepath.Join(t.TempDir(), SocketName)
	_, err := Forward(sock, &Request{})
	ce := spec.AsError(err, 0)
	if ce == nil || ce.Code != spec.ErrTryAgainLater || !strings.Contains(ce.Msg, sock) || !strings.Contains(ce.Msg, "daemon") {
		t.Errorf("daemon down: %v, want code 11 naming the socket", err)
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
	_, err = Forward(sock, &Request{})
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
	resp, err := Forward(sock, &Request{Env: []string{"CNI_COMMAND=ADD"}, Config: []byte(`{"a":1}`), Start: 5})
	if err != nil || resp.ExitCode != 1 || string(resp.Stdout) != `{"a":1}` || string(resp.Stderr) != "CNI_COMMAND=ADD" {
		t.Errorf("round trip: %+v, %v", resp, err)
	}
}
