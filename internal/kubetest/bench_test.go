package kubetest_test

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"testing"

	"github.com/patchbay-cni/patchbay/internal/kubetest"
)

// benchPod creates a pod to read and returns its URL path.
func benchPod(b *testing.B, c *kubetest.Cluster) string {
	b.Helper()
	ns := c.UniqueNamespace(b, "bench")
	pod := `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"` + ns + `"},
		"spec":{"containers":[{"name":"main","image":"busybox"}]}}`
	if _, err := c.Create(pod); err != nil {
		b.Fatal(err)
	}
	path, err := c.ObjectPath("v1", "Pod", ns, "p")
	if err != nil {
		b.Fatal(err)
	}
	return path
}

// BenchmarkGetPod is one GET of a pod with the cluster's client at
// Cluster.URL, on a kept-alive connection: what a test's or a daemon's
// request costs.
func BenchmarkGetPod(b *testing.B) {
	c := kubetest.Shared(b)
	path := benchPod(b, c)
	for b.Loop() {
		if _, _, err := c.Do("GET", path, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkGetPodNewConnection is the same GET on a new TCP and TLS
// connection each time, as each exec of a CNI plugin makes one.
func BenchmarkGetPodNewConnection(b *testing.B) {
	c := kubetest.Shared(b)
	path := benchPod(b, c)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(c.CAPEM)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, DisableKeepAlives: true}}
	for b.Loop() {
		req, _ := http.NewRequest("GET", c.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+c.Token)
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
}
