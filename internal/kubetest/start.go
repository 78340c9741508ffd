package kubetest

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Readiness deadlines are generous: the machine is small and shared.
const (
	etcdReadyTimeout      = 30 * time.Second
	apiserverReadyTimeout = 90 * time.Second
)

// start brings up etcd and kube-apiserver with their state in dir.
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

	etcdURL, err := c.startEtcd(etcdBin)
	if err != nil {
		return c, err
	}

	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(cr.CAPEM)
	c.Client = &http.Client{
		Timeout:   30 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, MaxIdleConnsPerHost: 8},
	}
	if err := c.startAPIServer(apiBin, etcdURL, cr); err != nil {
		return c, err
	}
	if err := c.WriteKubeconfig(c.Kubeconfig, c.Token); err != nil {
		return c, err
	}
	c.Startup = time.Since(t0)
	return c, nil
}

func (c *Cluster) startEtcd(bin string) (string, error) {
	data := filepath.Join(c.Dir, "etcd")
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ { // free ports can be taken between probe and bind
		ports, err := freePorts(2)
		if err != nil {
			return "", err
		}
		client := "http://127.0.0.1:" + strconv.Itoa(ports[0])
		peer := "http://127.0.0.1:" + strconv.Itoa(ports[1])
		os.RemoveAll(data)
		p, err := startProcess("etcd", filepath.Join(c.Dir, "etcd.log"), bin, EtcdFlags(data, client, peer)...)
		if err != nil {
			return "", err
		}
		c.etcd = p
		lastErr = waitReady(p, etcdReadyTimeout, func() bool {
			resp, err := http.Get(client + "/health")
			if err != nil {
				return false
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode == http.StatusOK && strings.Contains(string(b), `"health":"true"`)
		})
		if lastErr == nil {
			return client, nil
		}
		p.stop(5 * time.Second)
		if !logMentions(filepath.Join(c.Dir, "etcd.log"), "address already in use") {
			break
		}
	}
	return "", lastErr
}

func (c *Cluster) startAPIServer(bin, etcdURL string, cr *Credentials) error {
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		ports, err := freePorts(1)
		if err != nil {
			return err
		}
		c.URL = "https://127.0.0.1:" + strconv.Itoa(ports[0])
		c.apiBin, c.apiArgs = bin, APIServerFlags(cr, etcdURL, "127.0.0.1", ports[0], filepath.Join(c.Dir, "apiserver-certs"))
		if lastErr = c.runAPIServer(); lastErr == nil {
			return nil
		}
		if !logMentions(filepath.Join(c.Dir, "kube-apiserver.log"), "address already in use") {
			break
		}
	}
	return lastErr
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
	p, err := startProcess("kube-apiserver", filepath.Join(c.Dir, "kube-apiserver.log"), c.apiBin, c.apiArgs...)
	if err != nil {
		return err
	}
	c.apiserver = p
	err = waitReady(p, apiserverReadyTimeout, func() bool {
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

// freePorts asks the kernel for n distinct free TCP ports on 127.0.0.1.
func freePorts(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func logMentions(path, s string) bool {
	b, _ := os.ReadFile(path)
	return strings.Contains(string(b), s)
}
