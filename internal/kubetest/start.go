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
// Tests running the cluster inside the test VM (QEMU without KVM, several
// times slower) raise them before the first Start or Shared.
var (
	EtcdReadyTimeout      = 30 * time.Second
	APIServerReadyTimeout = 90 * time.Second
)

// start brings up etcd and kube-apiserver with their state in dir.
func start(dir string) (c *Cluster, err error) {
	etcdBin, apiBin, err := binaries()
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	cr, err := writeCredentials(dir)
	if err != nil {
		return nil, fmt.Errorf("credentials: %v", err)
	}
	c = &Cluster{
		Dir:        dir,
		Token:      cr.adminToken,
		UserToken:  cr.userToken,
		CAFile:     cr.caFile,
		CAPEM:      cr.caPEM,
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
	pool.AppendCertsFromPEM(cr.caPEM)
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
		p, err := startProcess("etcd", filepath.Join(c.Dir, "etcd.log"), bin,
			"--name=kubetest",
			"--data-dir="+data,
			"--listen-client-urls="+client,
			"--advertise-client-urls="+client,
			"--listen-peer-urls="+peer,
			"--initial-advertise-peer-urls="+peer,
			"--initial-cluster=kubetest="+peer,
			"--initial-cluster-state=new",
			"--logger=zap",
			"--log-outputs=stderr",
		)
		if err != nil {
			return "", err
		}
		c.etcd = p
		lastErr = waitReady(p, EtcdReadyTimeout, func() bool {
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

func (c *Cluster) startAPIServer(bin, etcdURL string, cr *credentials) error {
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		ports, err := freePorts(1)
		if err != nil {
			return err
		}
		c.URL = "https://127.0.0.1:" + strconv.Itoa(ports[0])
		p, err := startProcess("kube-apiserver", filepath.Join(c.Dir, "kube-apiserver.log"), bin,
			"--etcd-servers="+etcdURL,
			"--bind-address=127.0.0.1",
			"--advertise-address=127.0.0.1",
			"--secure-port="+strconv.Itoa(ports[0]),
			"--cert-dir="+filepath.Join(c.Dir, "apiserver-certs"),
			"--tls-cert-file="+cr.certFile,
			"--tls-private-key-file="+cr.keyFile,
			"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
			"--service-account-key-file="+cr.saPub,
			"--service-account-signing-key-file="+cr.saKey,
			// A configuration value only: nothing routes to this range.
			"--service-cluster-ip-range=10.0.0.0/24",
			"--authorization-mode=RBAC",
			"--token-auth-file="+cr.tokenFile,
			"--endpoint-reconciler-type=none",
			"--profiling=false",
		)
		if err != nil {
			return err
		}
		c.apiserver = p
		lastErr = waitReady(p, APIServerReadyTimeout, func() bool {
			status, _, err := c.Do("GET", "/readyz", nil)
			return err == nil && status == http.StatusOK
		})
		if lastErr == nil {
			return nil
		}
		p.stop(5 * time.Second)
		if !logMentions(filepath.Join(c.Dir, "kube-apiserver.log"), "address already in use") {
			break
		}
	}
	return lastErr
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
