package kubetest

// The benchmarks are in the package itself for BenchmarkGetPodNoRelay; the
// others use only what users do.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"testing"
)

// benchPod creates a pod to read and returns its URL path.
func benchPod(b *testing.B, c *Cluster) string {
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
	c := Shared(b)
	path := benchPod(b, c)
	for b.Loop() {
		if _, _, err := c.Do("GET", path, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkGetPodNoRelay is BenchmarkGetPod with the cluster's client
// dialling straight into the cluster's namespace, bypassing the relay: the
// difference is what the relay costs a request. (It swaps Client for its
// duration: no test runs beside a benchmark.)
func BenchmarkGetPodNoRelay(b *testing.B) {
	c := Shared(b)
	path := benchPod(b, c)
	tr := c.Client.Transport.(*http.Transport).Clone()
	tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) { return c.dialAPIServer(ctx) }
	relayed := c.Client
	c.Client = &http.Client{Transport: tr, Timeout: relayed.Timeout}
	defer func() { c.Client = relayed }()
	for b.Loop() {
		if _, _, err := c.Do("GET", path, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkGetPodNewConnection is the GET on a new TCP and TLS connection
// each time, as each exec of a CNI plugin makes one.
func BenchmarkGetPodNewConnection(b *testing.B) {
	c := Shared(b)
	path := benchPod(b, c)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(c.CAPEM)
	getPod(b, &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, DisableKeepAlives: true}}, c, path)
}

// getPod GETs path with client, on a fresh request each time.
func getPod(b *testing.B, client *http.Client, c *Cluster, path string) {
	for b.Loop() {
		req, _ := http.NewRequest("GET", c.URL+path, nil)
		req.Header.Set("Accept", "application/json")
		req.Header.Set("Authorization", "Bearer "+c.Token)
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
}
