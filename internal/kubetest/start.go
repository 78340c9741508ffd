package kubetest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/patchbay-cni/patchbay/internal/tcprelay"
)

// Readiness deadlines are generous: the machine is small and shared.
// Tests running the cluster inside the test VM (QEMU without KVM, several
// times slower) raise them before the first Start or Shared.
var (
	EtcdReadyTimeout      = 30 * time.Second
	APIServerReadyTimeout = 90 * time.Second
)

// Fixed addresses inside the cluster's own network namespace, where nothing
// else listens: no port probing, no retries on a taken port.
const (
	etcdClientURL = "http://127.0.0.1:2379"
	etcdPeerURL   = "http://127.0.0.1:2380"
	apiServerAddr = "127.0.0.1"
	apiServerPort = 6443
)

// start brings up etcd and kube-apiserver with their state in dir, inside
// a network namespace of their own; the URL is a relay on the machine's
// loopback into it.
func start(dir string) (c *Cluster, err error) {
	etcdBin, apiBin, err := binaries()
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	cr, err := WriteCredentials(dir, nil)
	if err != nil {
		return nil, fmt.Errorf("credentials: %v", err)
	}
	c = &Cluster{
		Dir:        dir,
		Token:      cr.AdminToken,
		UserToken:  cr.UserToken,
		CAFile:     cr.CAFile,
		CAPEM:      cr.CAPEM,
		Kubeconfig: filepath.Join(dir, "kubeconfig"),
	}
	defer func() {
		if err != nil {
			err = fmt.Errorf("%v\n%s", err, c.LogTails(30))
			c.Stop()
		}
	}()
	if c.ns, err = newNetns(); err != nil {
		return c, err
	}
	// The relay on the machine's loopback is the cluster's address for
	// every client: its port stays the same across apiserver restarts, and
	// TLS runs end to end (the certificate is for 127.0.0.1).
	ln, err := listenHost()
	if err != nil {
		return c, err
	}
	c.URL = "https://" + ln.Addr().String()
	c.relays = append(c.relays, tcprelay.Serve(ln, c.dialAPIServer))

	if err := c.startEtcd(etcdBin); err != nil {
		return c, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(cr.CAPEM)
	c.Client = &http.Client{
		Timeout:   30 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, MaxIdleConnsPerHost: 8},
	}
	c.apiBin = apiBin
	c.apiArgs = APIServerFlags(cr, etcdClientURL, apiServerAddr, apiServerPort, filepath.Join(c.Dir, "apiserver-certs"))
	if err := c.runAPIServer(); err != nil {
		return c, err
	}
	if err := c.WriteKubeconfig(c.Kubeconfig, c.Token); err != nil {
		return c, err
	}
	c.Startup = time.Since(t0)
	return c, nil
}

// dialAPIServer connects to the apiserver inside the cluster's namespace
// (for the relays).
func (c *Cluster) dialAPIServer(ctx context.Context) (net.Conn, error) {
	return c.ns.dial(ctx, "tcp", net.JoinHostPort(apiServerAddr, strconv.Itoa(apiServerPort)))
}

func (c *Cluster) startEtcd(bin string) error {
	data := filepath.Join(c.Dir, "etcd")
	p, err := c.startProcess("etcd", filepath.Join(c.Dir, "etcd.log"), bin, EtcdFlags(data, etcdClientURL, etcdPeerURL)...)
	if err != nil {
		return err
	}
	c.etcd = p
	// etcd's health, asked inside the namespace (etcd is not relayed).
	tr := &http.Transport{DialContext: c.ns.dial, DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	return waitReady(p, EtcdReadyTimeout, func() bool {
		resp, err := client.Get(etcdClientURL + "/health")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode == http.StatusOK && strings.Contains(string(b), `"health":"true"`)
	})
}

// EtcdFlags are the flags of a one-member etcd with its data in dataDir,
// serving clients at clientURL and peers at peerURL (http://127.0.0.1:port).
func EtcdFlags(dataDir, clientURL, peerURL string) []string {
	return []string{
		"--name=kubetest",
		"--data-dir=" + dataDir,
		"--listen-client-urls=" + clientURL,
		"--advertise-client-urls=" + clientURL,
		"--listen-peer-urls=" + peerURL,
		"--initial-advertise-peer-urls=" + peerURL,
		"--initial-cluster=kubetest=" + peerURL,
		"--initial-cluster-state=new",
		"--logger=zap",
		"--log-outputs=stderr",
	}
}

// APIServerFlags are the kube-apiserver flags that work here (see
// DESIGN.md): the credentials of cr, etcd at etcdURL, serving on
// address:port, RBAC authorization, no endpoint reconciler (internal/nodetest
// replaces some, e.g. adds the Node authorizer).
func APIServerFlags(cr *Credentials, etcdURL, address string, port int, certDir string) []string {
	return []string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=" + address,
		"--advertise-address=" + address,
		"--secure-port=" + strconv.Itoa(port),
		"--cert-dir=" + certDir,
		"--tls-cert-file=" + cr.CertFile,
		"--tls-private-key-file=" + cr.KeyFile,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + cr.SAPub,
		"--service-account-signing-key-file=" + cr.SAKey,
		// A configuration value only: nothing routes to this range.
		"--service-cluster-ip-range=10.0.0.0/24",
		"--authorization-mode=RBAC",
		"--token-auth-file=" + cr.TokenFile,
		"--endpoint-reconciler-type=none",
		"--profiling=false",
	}
}

// runAPIServer starts kube-apiserver with c.apiArgs and waits until it is
// ready (or stops it again).
func (c *Cluster) runAPIServer() error {
	p, err := c.startProcess("kube-apiserver", filepath.Join(c.Dir, "kube-apiserver.log"), c.apiBin, c.apiArgs...)
	if err != nil {
		return err
	}
	c.apiserver = p
	err = waitReady(p, APIServerReadyTimeout, func() bool {
		status, _, err := c.Do("GET", "/readyz", nil)
		return err == nil && status == http.StatusOK
	})
	if err != nil {
		p.stop(5 * time.Second)
	}
	return err
}

// RestartAPIServer stops kube-apiserver (SIGTERM, as a rolling update
// does), waits down, and starts it again on the same address; etcd and
// its data stay. It returns once the new one is ready.
func (c *Cluster) RestartAPIServer(down time.Duration) error {
	if err := c.apiserver.stop(10 * time.Second); err != nil {
		return err
	}
	time.Sleep(down)
	var err error
	for attempt := 0; attempt < 20; attempt++ { // the port may linger briefly
		if err = c.runAPIServer(); err == nil {
			return nil
		}
		time.Sleep(250 * time.Millisecond)
	}
	return fmt.Errorf("restart kube-apiserver: %w", err)
}

// waitReady polls ready until it holds, the process exits, or timeout.
func waitReady(p *process, timeout time.Duration, ready func() bool) error {
	deadline := time.Now().Add(timeout)
	for {
		if done, err := p.Exited(); done {
			return fmt.Errorf("%s (pid %d) exited before becoming ready: %v", p.name, p.Pid(), err)
		}
		if ready() {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s (pid %d) not ready after %v", p.name, p.Pid(), timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
