package multinet

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/patchbay-cni/patchbay/multinet/api"
	"github.com/patchbay-cni/patchbay/multinet/kube"
)

// The status write goes through pods/status, carries the pod's UID as a
// precondition (a re-created pod of the same name is never written) and
// reports a missing pod as not found.
func TestStatusWriteAgainstAPIServer(t *testing.T) {
	e := newEnv(t)
	p := e.pod("p1", nil)
	path := e.dir + "/direct-kubeconfig"
	e.writeKubeconfig(path, e.c.URL, true)
	cfg, err := kube.LoadKubeconfig(path)
	if err != nil {
		t.Fatal(err)
	}
	c, err := kube.New(cfg, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := c.SetNetworkStatus(ctx, p.ns, p.name, p.uid, `[{"name":"a/b","default":true}]`, 3); err != nil {
		t.Fatal(err)
	}
	if v := e.podAnnotations(p)[api.NetworkStatusAnnotation]; v != `[{"name":"a/b","default":true}]` {
		t.Errorf("annotation = %q", v)
	}
	err = c.SetNetworkStatus(ctx, p.ns, p.name, "00000000-0000-0000-0000-000000000000", "[]", 3)
	if !errors.Is(err, kube.ErrPodReplaced) {
		t.Errorf("write with another UID = %v, want ErrPodReplaced", err)
	}
	if err := c.SetNetworkStatus(ctx, p.ns, "nope", "", "[]", 3); !kube.IsNotFound(err) {
		t.Errorf("write to a missing pod = %v, want not found", err)
	}
	pod, err := c.GetPod(ctx, p.ns, p.name, false)
	if err != nil || pod.Metadata.UID != p.uid {
		t.Fatalf("GetPod = %+v, %v", pod, err)
	}
	if err := c.CreateEvent(ctx, pod, kube.EventWarning, "Test", strings.Repeat("x", 2000), "multinet", "node1"); err != nil {
		t.Errorf("CreateEvent with a long message: %v", err)
	}
}

// A sandbox whose K8S_POD_UID is not the pod's (the pod was re-created)
// is refused, and the cluster network attached meanwhile is rolled back.
func TestStalePodUIDRefused(t *testing.T) {
	e := newEnv(t)
	p := e.pod("p1", nil)
	p.uid = "11111111-2222-3333-4444-555555555555"
	_, err := e.add(p)
	if err == nil || !strings.Contains(err.Error(), "re-created") {
		t.Fatalf("ADD = %v", err)
	}
	e.nothingLeft(p, "left")
}

// One ADD opens one TLS connection to the apiserver: the pod GET, the NAD
// GETs (in parallel) and the status PATCH share it (HTTP/2).
func TestOneAPIConnectionPerADD(t *testing.T) {
	e := newEnv(t)
	e.kubeconfig = e.tlsKube
	e.nad("", "blue", e.bridgeNAD("", 1, nil))
	e.nad("", "red", e.bridgeNAD("", 2, nil))
	p := e.pod("p1", map[string]string{api.NetworksAnnotation: "blue,red"})
	before := e.tlsConns.Load()
	e.mustAdd(p)
	if n := e.tlsConns.Load() - before; n != 1 {
		t.Errorf("ADD opened %d connections to the apiserver, want 1", n)
	}
	if st := statusOf(t, e, p); len(st) != 3 {
		t.Errorf("status = %+v", st)
	}
	e.mustDel(p)
}
