package kube

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// statusServer answers PATCH pods/status with the given codes in turn
// (Kubernetes Status bodies), then 200; it records the bodies.
func statusServer(t *testing.T, codes []int, msgs []string) (*Client, *[]string) {
	t.Helper()
	var mu sync.Mutex
	var bodies []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		n := len(bodies)
		bodies = append(bodies, string(b))
		mu.Unlock()
		if r.Method != http.MethodPatch || r.URL.Path != "/api/v1/namespaces/ns/pods/p/status" ||
			r.Header.Get("Content-Type") != "application/merge-patch+json" {
			http.Error(w, "unexpected request "+r.Method+" "+r.URL.Path, http.StatusBadRequest)
			return
		}
		if n < len(codes) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(codes[n])
			fmt.Fprintf(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","message":%q,"reason":"Conflict","code":%d}`, msgs[n], codes[n])
			return
		}
		w.Write([]byte(`{"kind":"Pod","apiVersion":"v1","metadata":{"name":"p"}}`))
	}))
	t.Cleanup(srv.Close)
	c, err := New(&Config{Server: srv.URL}, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return c, &bodies
}

// Conflicts (409) and unavailability are retried; the same patch is sent
// each time.
func TestSetNetworkStatusRetriesConflicts(t *testing.T) {
	c, bodies := statusServer(t, []int{409, 409, 503},
		[]string{`Operation cannot be fulfilled on pods "p": the object has been modified; please apply your changes to the latest version and try again`,
			"etcd leader changed", "unavailable"})
	if err := c.SetNetworkStatus(context.Background(), "ns", "p", "uid-1", `[{"name":"a/b","default":true}]`, 5); err != nil {
		t.Fatalf("SetNetworkStatus: %v", err)
	}
	if len(*bodies) != 4 {
		t.Fatalf("%d requests, want 4 (3 refused, 1 accepted)", len(*bodies))
	}
	for _, b := range *bodies {
		if b != (*bodies)[0] || !strings.Contains(b, `"uid":"uid-1"`) || !strings.Contains(b, "network-status") {
			t.Errorf("patch %s differs from the first or lacks uid/annotation", b)
		}
	}
}

// Attempts are bounded; the last error is returned.
func TestSetNetworkStatusGivesUp(t *testing.T) {
	c, bodies := statusServer(t, []int{409, 409, 409}, []string{"modified", "modified", "modified"})
	err := c.SetNetworkStatus(context.Background(), "ns", "p", "", "[]", 3)
	if !IsConflict(err) || !strings.Contains(err.Error(), "after 3 attempts") || len(*bodies) != 3 {
		t.Errorf("err = %v after %d requests, want a 409 after 3 attempts", err, len(*bodies))
	}
}

// A UID precondition failure is not retried: the pod was re-created.
func TestSetNetworkStatusReplacedPodNotRetried(t *testing.T) {
	c, bodies := statusServer(t, []int{409}, []string{"Precondition failed: UID in precondition: uid-1, UID in object meta: uid-2"})
	err := c.SetNetworkStatus(context.Background(), "ns", "p", "uid-1", "[]", 5)
	if !errors.Is(err, ErrPodReplaced) || len(*bodies) != 1 {
		t.Errorf("err = %v after %d requests, want ErrPodReplaced after 1", err, len(*bodies))
	}
	c, bodies = statusServer(t, []int{422}, []string{`Pod "p" is invalid: metadata.uid: Invalid value: "uid-1": field is immutable`})
	err = c.SetNetworkStatus(context.Background(), "ns", "p", "uid-1", "[]", 5)
	if !errors.Is(err, ErrPodReplaced) || len(*bodies) != 1 {
		t.Errorf("err = %v after %d requests, want ErrPodReplaced after 1", err, len(*bodies))
	}
}
