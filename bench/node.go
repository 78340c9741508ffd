package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/patchbay-cni/patchbay/internal/install"
	"github.com/patchbay-cni/patchbay/internal/nodetest"
)

// The node workload: pod ADD and DEL through kubelet's runtime path
// (kubelet → containerd 1.6 CRI → the CNI plugin) on a real single-node
// cluster (internal/nodetest), for multinet and Multus v4.3.0, thin and
// thick, on the same node with the same delegates (our bridge with
// host-local for the cluster network and for one NAD), and the daemons'
// memory under a burst of pods.
//
// How a pod's ADD is timed: every CNI plugin involved — the meta plugin the
// runtime runs (multinet, multinet-shim, multus, multus-shim) and the
// delegate (bridge) — is wrapped by cnitime (bench/cnitime), which logs
// each exec's wall time with the pod's name. A pod's meta plugin time is
// what containerd waited for; its delegates' time is the sum of the bridge
// runs for that pod (the cluster network's and the NAD's), each plus the
// wrapper's own cost (measured beside, subtracted); the meta plugin's own
// overhead is the difference. DEL the same, with the first DEL kubelet
// asks for (the one with the network namespace).

// nodeSubject is one meta plugin configuration.
type nodeSubject struct {
	label    string
	metaType string // the CNI type the runtime runs
	conf     string // 00-bench.conflist
	thick    bool
	daemon   *exec.Cmd // thick: the daemon process on the node
	adds     []nodeSample
	dels     []nodeSample
	fails    int
	firstErr string
	peakRSS  int64         // thick: the daemon's peak RSS in the burst (bytes)
	burst    time.Duration // the burst's pods all Running
	burstErr string
	unavail  string
}

// nodeSample is one pod's verb: the meta plugin's time and its delegates'.
type nodeSample struct{ meta, delegates time.Duration }

func (s nodeSample) overhead(wrapper time.Duration, n int) time.Duration {
	return s.meta - s.delegates - time.Duration(n)*wrapper
}

// nodeEnv is the node workload's state.
type nodeEnv struct {
	n         *nodetest.Node
	work      string
	ours      string
	multus    string
	wrapper   time.Duration // cnitime's own cost per exec
	subjects  []*nodeSubject
	kubecfg   string // node path of the meta plugins' kubeconfig
	ns        string
	logPath   string // node path of cnitime's log
	burstPods int
	perMeta   int // pods per meta plugin
}

const (
	nodeBenchNS   = "bench"
	clusterConf   = "/etc/cni/net.d/10-patchbay-bridge.conflist"
	benchConfName = "00-bench.conflist"
	cnitimeLog    = "/var/lib/cni/cnitime.log"
)

func (e *env) nodeWorkload(ctx context.Context, o *options) error {
	ne := &nodeEnv{ours: o.ours, multus: o.multus, work: filepath.Join(e.work, "node"), burstPods: o.nodeBurst, perMeta: o.nodeN, ns: nodeBenchNS, logPath: cnitimeLog}
	if err := os.MkdirAll(ne.work, 0o755); err != nil {
		return err
	}
	for _, b := range []string{"multus", "multus-daemon", "multus-shim"} {
		if _, err := os.Stat(filepath.Join(ne.multus, b)); err != nil {
			return fmt.Errorf("the Multus v4.3.0 binary %s: %w (scripts/bench-deps.sh builds it; -multus names the directory)", b, err)
		}
	}
	opts := nodetest.DefaultOptions()
	opts.CNIBinDir = ne.ours
	opts.HostDirs = []string{"/etc/cni/multus/net.d", "/run/multinet", "/run/multus", "/run/k8s.cni.cncf.io", "/run/secrets"}
	n, err := nodetest.New(opts)
	if err != nil {
		return err
	}
	defer func() {
		for _, s := range ne.subjects {
			s.stopDaemon()
		}
		if err := n.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "bench: node stop:", err)
		}
	}()
	ne.n = n
	if err := ne.setup(ctx); err != nil {
		return err
	}
	if ne.wrapper, err = wrapperCost(ctx, ne.work); err != nil {
		return err
	}
	for i := 0; i < o.nodeN; i++ {
		for _, s := range ne.subjects {
			if s.unavail != "" {
				continue
			}
			if err := ne.sample(ctx, s, fmt.Sprintf("p%03d", i)); err != nil {
				s.fails++
				if s.firstErr == "" {
					s.firstErr = oneLine(err.Error())
				}
				if len(s.adds) == 0 && s.fails >= 2 {
					s.unavail = "no sample succeeded: " + s.firstErr
				}
			}
			if err := ctx.Err(); err != nil {
				return err
			}
		}
	}
	for _, s := range ne.subjects {
		if s.thick && s.unavail == "" {
			if err := ne.memoryBurst(ctx, s); err != nil {
				s.burstErr = oneLine(err.Error())
			}
		}
	}
	e.node = ne
	return nil
}

// writeNode prints the node workload's table and notes after the main one.
func (e *env) writeNode(w io.Writer) {
	if e.node == nil {
		return
	}
	fmt.Fprintln(w)
	g := e.node.grid()
	writeMarkdown(w, g[0], g[1:], e.node.nodeNotes())
}

// setup installs the wrappers, the RBAC, credentials, the NAD, and starts
// the thick daemons.
func (ne *nodeEnv) setup(ctx context.Context) error {
	n := ne.n
	cnitime := filepath.Join(ne.work, "cnitime")
	build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", cnitime, "./bench/cnitime")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("build cnitime: %v: %s", err, out)
	}
	bin := n.HostPath("/opt/cni/bin")
	if err := os.MkdirAll(filepath.Join(bin, ".real"), 0o755); err != nil {
		return err
	}
	reals := map[string]string{ // wrapped type → the real program
		"bridge":      "", // the link to patchbay-plugins
		"multinet":    filepath.Join(ne.ours, "multinet"),
		"multus":      filepath.Join(ne.multus, "multus"),
		"multus-shim": filepath.Join(ne.multus, "multus-shim"),
	}
	if _, err := os.Stat(filepath.Join(ne.ours, "multinet-shim")); err == nil {
		reals["multinet-shim"] = filepath.Join(ne.ours, "multinet-shim")
	}
	for t, src := range reals {
		real := filepath.Join(bin, ".real", t)
		var err error
		if src == "" {
			err = os.Symlink("../patchbay-plugins", real)
		} else {
			err = install.AtomicCopy(src, real)
		}
		if err == nil {
			err = install.AtomicCopy(cnitime, filepath.Join(bin, t))
		}
		if err != nil {
			return err
		}
	}
	repo, _ := os.Getwd()
	for _, f := range []string{"deploy/crds/network-attachment-definitions.yaml", "deploy/crds/ipamclaims.yaml", "deploy/multinet/rbac.yaml"} {
		if _, err := n.ApplyFiles(ctx, filepath.Join(repo, f)); err != nil {
			return err
		}
	}
	// Each peer runs with its own manifests' RBAC: multinet's
	// deploy/multinet/rbac.yaml, Multus's ClusterRole from its
	// deployments/multus-daemonset-thick.yml (it updates pods/status).
	if err := applyMultusRBAC(ctx, n); err != nil {
		return err
	}
	credDir := n.HostPath("/etc/cni/net.d/bench.d")
	os.MkdirAll(credDir, 0o700)
	for _, sa := range []string{"multinet", "multus"} {
		exp := int64(4 * 3600)
		tr, err := n.Client.CoreV1().ServiceAccounts("kube-system").CreateToken(ctx, sa, &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		kc, _ := json.Marshal(map[string]any{
			"apiVersion": "v1", "kind": "Config", "current-context": "c",
			"clusters": []any{map[string]any{"name": "c", "cluster": map[string]any{"server": "https://127.0.0.1:6443", "certificate-authority-data": n.Credentials.CAPEM}}},
			"users":    []any{map[string]any{"name": "u", "user": map[string]any{"token": tr.Status.Token}}},
			"contexts": []any{map[string]any{"name": "c", "context": map[string]any{"cluster": "c", "user": "u"}}},
		})
		if err := os.WriteFile(filepath.Join(credDir, sa+".kubeconfig"), kc, 0o600); err != nil {
			return err
		}
		// In-cluster credentials for the daemons (processes on the node,
		// where /run/secrets is the test's): Multus reads the standard
		// path, multinet's daemon -serviceaccount-dir.
		dir := n.HostPath("/run/secrets/" + sa)
		if sa == "multus" {
			dir = n.HostPath("/run/secrets/kubernetes.io/serviceaccount")
		}
		os.MkdirAll(dir, 0o700)
		os.WriteFile(filepath.Join(dir, "token"), []byte(tr.Status.Token), 0o600)
		os.WriteFile(filepath.Join(dir, "ca.crt"), n.Credentials.CAPEM, 0o600)
		os.WriteFile(filepath.Join(dir, "namespace"), []byte("kube-system"), 0o600)
	}
	ne.kubecfg = "/etc/cni/net.d/bench.d/multinet.kubeconfig"

	if _, err := n.Client.CoreV1().Namespaces().Create(ctx, nsObj(ne.ns), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	nad := `{"apiVersion":"k8s.cni.cncf.io/v1","kind":"NetworkAttachmentDefinition","metadata":{"name":"blue","namespace":"` + ne.ns + `"},
		"spec":{"config":"{\"cniVersion\":\"1.0.0\",\"plugins\":[{\"type\":\"bridge\",\"bridge\":\"blue0\",\"ipam\":{\"type\":\"host-local\",\"subnet\":\"10.78.0.0/16\"}}]}"}}`
	if _, err := n.Apply(ctx, []byte(nad)); err != nil {
		return err
	}
	if err := waitSA(ctx, n, ne.ns); err != nil {
		return err
	}

	thinMultinet := fmt.Sprintf(`{"cniVersion":"1.0.0","name":"multinet","plugins":[{"type":"multinet","kubeconfig":%q,"clusterNetwork":%q}]}`, ne.kubecfg, clusterConf)
	thinMultus := fmt.Sprintf(`{"cniVersion":"1.0.0","name":"multus-cni-network","plugins":[{"type":"multus","kubeconfig":%q,"clusterNetwork":%q,"cniDir":"/var/lib/cni/multus","logLevel":"error"}]}`, "/etc/cni/net.d/bench.d/multus.kubeconfig", clusterConf)
	// Multus removes and re-creates its socketDir: a directory below the
	// node's /run/multus (a mount point).
	thickMultus := `{"cniVersion":"1.0.0","name":"multus-cni-network","plugins":[{"type":"multus-shim","daemonSocketDir":"/run/multus/sock","logLevel":"error","clusterNetwork":"` + clusterConf + `"}]}`
	ne.subjects = []*nodeSubject{
		{label: "multinet thick", metaType: "multinet-shim", thick: true},
		{label: "multinet thin", metaType: "multinet", conf: thinMultinet},
		{label: "Multus thick", metaType: "multus-shim", conf: thickMultus, thick: true},
		{label: "Multus thin", metaType: "multus", conf: thinMultus},
	}
	if reals["multinet-shim"] == "" {
		ne.subjects[0].unavail = "bin/multinet-shim not built (thick mode not in this tree)"
	} else {
		ne.subjects[0].conf = `{"cniVersion":"1.0.0","name":"multinet","plugins":[{"type":"multinet-shim","daemonSocketDir":"/run/multinet"}]}`
		cfg := fmt.Sprintf(`{"clusterNetwork":%q,"daemonSocketDir":"/run/multinet","logLevel":"error"}`, clusterConf)
		if err := ne.startDaemon(ctx, ne.subjects[0], []string{filepath.Join(ne.ours, "multinet"), "daemon", "-serviceaccount-dir", "/run/secrets/multinet", "-config"}, cfg); err != nil {
			ne.subjects[0].unavail = oneLine(err.Error())
		}
	}
	// Multus v4.3.0's daemon exits at once unless multusConfigFile is
	// "auto" (its main waits only for the auto-configuration's goroutines):
	// it gets a directory of its own to watch and to write its generated
	// conflist into, away from the node's /etc/cni/net.d, which the bench
	// controls; delegation uses clusterNetwork from this file.
	auto := n.HostPath("/etc/cni/multus/net.d")
	for _, d := range []string{"auto", "out"} {
		if err := os.MkdirAll(filepath.Join(auto, d), 0o755); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(auto, "auto", "10-patchbay-bridge.conflist"), []byte(nodetest.BridgeConflist), 0o644); err != nil {
		return err
	}
	multusCfg := fmt.Sprintf(`{"chrootDir":"","cniVersion":"1.0.0","logLevel":"error","logToStderr":true,"cniConfigDir":"/etc/cni/multus/net.d/out","multusAutoconfigDir":"/etc/cni/multus/net.d/auto","multusConfigFile":"auto","socketDir":"/run/multus/sock","clusterNetwork":%q}`, clusterConf)
	if err := ne.startDaemon(ctx, ne.subjects[2], []string{filepath.Join(ne.multus, "multus-daemon"), "-config"}, multusCfg); err != nil {
		ne.subjects[2].unavail = oneLine(err.Error())
	}
	return nil
}

// applyMultusRBAC applies the ServiceAccount, ClusterRole and binding of
// Multus's own thick manifest, from the module cache.
func applyMultusRBAC(ctx context.Context, n *nodetest.Node) error {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMODCACHE").Output()
	if err != nil {
		return err
	}
	path := filepath.Join(strings.TrimSpace(string(out)), "gopkg.in/k8snetworkplumbingwg/multus-cni.v4@v4.3.0/deployments/multus-daemonset-thick.yml")
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("the Multus manifest (scripts/bench-deps.sh downloads the module): %w", err)
	}
	objs, err := nodetest.DecodeManifests(b)
	if err != nil {
		return err
	}
	for _, o := range objs {
		switch o.GetKind() {
		case "ServiceAccount", "ClusterRole", "ClusterRoleBinding":
			j, err := o.MarshalJSON()
			if err != nil {
				return err
			}
			if _, err := n.Apply(ctx, j); err != nil {
				return err
			}
		}
	}
	return nil
}

func nsObj(name string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

// waitSA waits for the namespace's default ServiceAccount (pods are
// refused before the controller-manager made it).
func waitSA(ctx context.Context, n *nodetest.Node, ns string) error {
	deadline := time.Now().Add(time.Minute)
	for {
		_, err := n.Client.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("namespace %s: no default ServiceAccount: %w", ns, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// startDaemon runs a thick daemon as a process in the node's namespaces
// (in-cluster credentials from the node's /var/run/secrets) and waits for
// its socket.
func (ne *nodeEnv) startDaemon(ctx context.Context, s *nodeSubject, argv []string, config string) error {
	cfgPath := filepath.Join(ne.work, strings.ReplaceAll(s.label, " ", "-")+".json")
	if err := os.WriteFile(cfgPath, []byte(config), 0o644); err != nil {
		return err
	}
	logf, err := os.Create(cfgPath + ".log")
	if err != nil {
		return err
	}
	defer logf.Close()
	args := append([]string{"--target", strconv.Itoa(ne.n.PIDs()["supervisor"]), "--net", "--mount", "--"}, argv...)
	args = append(args, cfgPath)
	cmd := exec.Command("nsenter", args...)
	cmd.Env = append(os.Environ(), "KUBERNETES_SERVICE_HOST=127.0.0.1", "KUBERNETES_SERVICE_PORT=6443",
		"MULTUS_NODE_NAME="+nodetest.NodeName, "NODE_NAME="+nodetest.NodeName)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	s.daemon = cmd
	sock := map[string]string{"multinet-shim": "/run/multinet", "multus-shim": "/run/multus/sock"}[s.metaType]
	deadline := time.Now().Add(60 * time.Second)
	for {
		des, _ := os.ReadDir(ne.n.HostPath(sock))
		for _, de := range des {
			if de.Type()&os.ModeSocket != 0 {
				return nil
			}
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(cfgPath + ".log")
			return fmt.Errorf("%s: no socket in %s after 60 s: %s", s.label, sock, lastLines(string(b), 3))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (s *nodeSubject) stopDaemon() {
	if s.daemon != nil && s.daemon.Process != nil {
		s.daemon.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { s.daemon.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			s.daemon.Process.Kill()
			<-done
		}
		s.daemon = nil
	}
}

// daemonPID is the daemon's own PID (nsenter execs it, so the same).
func (s *nodeSubject) daemonPID() int {
	if s.daemon == nil || s.daemon.Process == nil {
		return 0
	}
	return s.daemon.Process.Pid
}

// use makes s the node's network configuration and waits until the
// runtime uses it (a probe pod's ADD runs s's meta plugin).
func (ne *nodeEnv) use(ctx context.Context, s *nodeSubject) error {
	p := filepath.Join(ne.n.HostPath("/etc/cni/net.d"), benchConfName)
	if cur, err := os.ReadFile(p); err == nil && string(cur) == s.conf {
		return nil
	}
	if err := os.WriteFile(p+".tmp", []byte(s.conf), 0o644); err != nil {
		return err
	}
	if err := os.Rename(p+".tmp", p); err != nil {
		return err
	}
	var last error
	deadline := time.Now().Add(2 * time.Minute)
	for i := 0; time.Now().Before(deadline); i++ {
		name := fmt.Sprintf("probe-%s-%d", strings.ReplaceAll(strings.ToLower(s.label), " ", "-"), i)
		meta, _, err := ne.podADD(ctx, name, s.metaType)
		if err == nil && meta > 0 {
			return nil
		}
		last = err
		time.Sleep(500 * time.Millisecond)
	}
	return fmt.Errorf("pods do not run %s's plugin (%v)", s.label, last)
}

// sample creates and deletes one pod under s and records its ADD and DEL.
func (ne *nodeEnv) sample(ctx context.Context, s *nodeSubject, name string) error {
	if err := ne.use(ctx, s); err != nil {
		return err
	}
	name = strings.ReplaceAll(strings.ToLower(s.label), " ", "-") + "-" + name
	_, _, err := ne.podADD(ctx, name, s.metaType)
	if err != nil {
		return err
	}
	lines, err := ne.readLog(name)
	if err != nil {
		return err
	}
	add, ok := verbSample(lines, s.metaType, "ADD")
	if !ok {
		return fmt.Errorf("pod %s: no %s ADD with its delegates in the timing log", name, s.metaType)
	}
	del, ok := verbSample(lines, s.metaType, "DEL")
	if !ok {
		return fmt.Errorf("pod %s: no %s DEL with its delegates in the timing log", name, s.metaType)
	}
	s.adds = append(s.adds, add)
	s.dels = append(s.dels, del)
	return nil
}

// podADD creates pod name (with the NAD), waits until it runs, deletes it
// and waits until it is gone; it returns the meta plugin's ADD time.
func (ne *nodeEnv) podADD(ctx context.Context, name, metaType string) (time.Duration, time.Duration, error) {
	n := ne.n
	pod := fmt.Sprintf(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":%q,"namespace":%q,"annotations":{"k8s.v1.cni.cncf.io/networks":"blue"}},
		"spec":{"terminationGracePeriodSeconds":1,"containers":[{"name":"c","image":%q,"imagePullPolicy":"Never","command":["sleep","3600"]}]}}`, name, ne.ns, nodetest.BusyboxImage)
	c, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	if _, err := n.Apply(c, []byte(pod)); err != nil {
		return 0, 0, err
	}
	_, runErr := n.WaitPodRunning(c, ne.ns, name)
	if err := n.Client.CoreV1().Pods(ne.ns).Delete(c, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return 0, 0, err
	}
	if err := n.WaitPodGone(c, ne.ns, name); err != nil {
		return 0, 0, err
	}
	if runErr != nil {
		return 0, 0, fmt.Errorf("pod %s: %s", name, oneLine(runErr.Error()))
	}
	// The pod object can be gone before kubelet stopped the sandbox: wait
	// for the meta plugin's DEL, so that it runs under this configuration
	// (containerd DELs with the configuration it has at that moment).
	var lines []logLine
	for deadline := time.Now().Add(30 * time.Second); ; {
		var err error
		if lines, err = ne.readLog(name); err != nil {
			return 0, 0, err
		}
		if hasRun(lines, metaType, "DEL") || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, l := range lines {
		if l.typ == metaType && l.verb == "ADD" && l.code == 0 {
			return l.took, 0, nil
		}
	}
	return 0, 0, nil
}

func hasRun(lines []logLine, typ, verb string) bool {
	for _, l := range lines {
		if l.typ == typ && l.verb == verb {
			return true
		}
	}
	return false
}

// logLine is one cnitime record.
type logLine struct {
	typ, verb, container, ifname, pod string
	start                             time.Time
	took                              time.Duration
	code                              int
}

// readLog returns the timing records of pod name.
func (ne *nodeEnv) readLog(name string) ([]logLine, error) {
	return ne.readLogFile(ne.n.HostPath(ne.logPath), name)
}

func (ne *nodeEnv) readLogFile(path, name string) ([]logLine, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []logLine
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fl := strings.Fields(sc.Text())
		if len(fl) != 8 || fl[4] != name {
			continue
		}
		start, _ := strconv.ParseInt(fl[5], 10, 64)
		took, _ := strconv.ParseInt(fl[6], 10, 64)
		code, _ := strconv.Atoi(fl[7])
		out = append(out, logLine{typ: fl[0], verb: fl[1], container: fl[2], ifname: fl[3], pod: fl[4],
			start: time.Unix(0, start), took: time.Duration(took), code: code})
	}
	return out, sc.Err()
}

// verbSample finds the first successful meta plugin run of verb and the
// bridge runs of the same verb within it (the cluster network's and the
// NAD's), and returns their times.
func verbSample(lines []logLine, metaType, verb string) (nodeSample, bool) {
	for _, m := range lines {
		if m.typ != metaType || m.verb != verb || m.code != 0 {
			continue
		}
		end := m.start.Add(m.took)
		var del time.Duration
		count := 0
		for _, d := range lines {
			if d.typ == "bridge" && d.verb == verb && !d.start.Before(m.start) && !d.start.Add(d.took).After(end) {
				del += d.took
				count++
			}
		}
		if count != 2 {
			return nodeSample{}, false
		}
		return nodeSample{meta: m.took, delegates: del}, true
	}
	return nodeSample{}, false
}

// wrapperCost measures what cnitime adds to one exec: /bin/true run
// through it against /bin/true run directly, interleaved, median of the
// differences.
func wrapperCost(ctx context.Context, work string) (time.Duration, error) {
	dir := filepath.Join(work, "wrapcost")
	os.MkdirAll(filepath.Join(dir, ".real"), 0o755)
	truePath, err := exec.LookPath("true")
	if err != nil {
		return 0, err
	}
	if err := os.Symlink(truePath, filepath.Join(dir, ".real", "true")); err != nil && !os.IsExist(err) {
		return 0, err
	}
	if err := install.AtomicCopy(filepath.Join(work, "cnitime"), filepath.Join(dir, "true")); err != nil {
		return 0, err
	}
	run := func(p string) (time.Duration, error) {
		cmd := exec.CommandContext(ctx, p)
		cmd.Env = append(os.Environ(), "CNITIME_LOG="+filepath.Join(dir, "log"))
		t0 := time.Now()
		err := cmd.Run()
		return time.Since(t0), err
	}
	var diffs []time.Duration
	for i := 0; i < 40; i++ {
		w, err := run(filepath.Join(dir, "true"))
		if err != nil {
			return 0, err
		}
		d, err := run(truePath)
		if err != nil {
			return 0, err
		}
		diffs = append(diffs, w-d)
	}
	m, _ := median(diffs)
	return max(m, 0), nil
}

// memoryBurst creates burstPods pods at once under thick subject s and
// samples its daemon's RSS until all run and are deleted again.
func (ne *nodeEnv) memoryBurst(ctx context.Context, s *nodeSubject) error {
	if err := ne.use(ctx, s); err != nil {
		return err
	}
	pid := s.daemonPID()
	if pid == 0 {
		return fmt.Errorf("no daemon")
	}
	stop := make(chan struct{})
	peak := make(chan int64, 1)
	go func() {
		var p int64
		for {
			if v := rssBytes(pid, "VmRSS:"); v > p {
				p = v
			}
			select {
			case <-stop:
				if v := rssBytes(pid, "VmHWM:"); v > p {
					p = v
				}
				peak <- p
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	prefix := strings.ReplaceAll(strings.ToLower(s.label), " ", "-") + "-burst-"
	sel := "burst=" + prefix[:len(prefix)-1]
	start := time.Now()
	errs := make(chan error, ne.burstPods)
	for i := 0; i < ne.burstPods; i++ {
		go func() {
			pod := fmt.Sprintf(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"%s%03d","namespace":%q,"labels":{"burst":%q},"annotations":{"k8s.v1.cni.cncf.io/networks":"blue"}},
				"spec":{"terminationGracePeriodSeconds":1,"containers":[{"name":"c","image":%q,"imagePullPolicy":"Never","command":["sleep","3600"]}]}}`,
				prefix, i, ne.ns, prefix[:len(prefix)-1], nodetest.BusyboxImage)
			_, err := ne.n.Apply(ctx, []byte(pod))
			errs <- err
		}()
	}
	var first error
	for i := 0; i < ne.burstPods; i++ {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	// One LIST a second (not a poll per pod: the client would throttle).
	running := func() (int, int, error) {
		l, err := ne.n.Client.CoreV1().Pods(ne.ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			return 0, 0, err
		}
		r := 0
		for _, p := range l.Items {
			if p.Status.Phase == corev1.PodRunning {
				r++
			}
		}
		return r, len(l.Items), nil
	}
	deadline := time.Now().Add(5 * time.Minute)
	for first == nil {
		r, _, err := running()
		if err == nil && r == ne.burstPods {
			s.burst = time.Since(start)
			break
		}
		if time.Now().After(deadline) {
			first = fmt.Errorf("%d of %d pods Running after 5 minutes (%v)", r, ne.burstPods, err)
		}
		time.Sleep(time.Second)
	}
	if err := ne.n.Client.CoreV1().Pods(ne.ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: sel}); err != nil && first == nil {
		first = err
	}
	for deadline := time.Now().Add(5 * time.Minute); ; {
		_, n, err := running()
		if err == nil && n == 0 {
			break
		}
		if time.Now().After(deadline) {
			if first == nil {
				first = fmt.Errorf("%d pods left after 5 minutes (%v)", n, err)
			}
			break
		}
		time.Sleep(time.Second)
	}
	close(stop)
	s.peakRSS = <-peak
	return first
}

func rssBytes(pid int, key string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == key {
			v, _ := strconv.ParseInt(f[1], 10, 64)
			return v * 1024
		}
	}
	return 0
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, " | ")
}

// grid is the node workload's table.
func (ne *nodeEnv) grid() [][]string {
	cells := [][]string{{"node workload (kubelet → containerd 1.6 → CNI)"}}
	for _, s := range ne.subjects {
		cells[0] = append(cells[0], s.label)
	}
	cells[0] = append(cells[0], "target", "result")
	med := func(ss []nodeSample, f func(nodeSample) time.Duration) (time.Duration, bool) {
		var d []time.Duration
		for _, s := range ss {
			d = append(d, f(s))
		}
		return median(d)
	}
	rowOf := func(name string, f func(*nodeSubject) string) []string {
		r := []string{name}
		for _, s := range ne.subjects {
			if s.unavail != "" && s.adds == nil {
				r = append(r, "n/a")
				continue
			}
			r = append(r, f(s))
		}
		return r
	}
	timeOf := func(samples func(*nodeSubject) []nodeSample, f func(nodeSample) time.Duration) func(*nodeSubject) string {
		return func(s *nodeSubject) string {
			if m, ok := med(samples(s), f); ok {
				return ms(m)
			}
			return fmt.Sprintf("failed ×%d", s.fails)
		}
	}
	adds := func(s *nodeSubject) []nodeSample { return s.adds }
	dels := func(s *nodeSubject) []nodeSample { return s.dels }
	w := ne.wrapper
	overheadAdd := timeOf(adds, func(x nodeSample) time.Duration { return x.overhead(w, 2) })
	cells = append(cells,
		append(rowOf("pod ADD: meta plugin (what containerd waited for)", timeOf(adds, func(x nodeSample) time.Duration { return x.meta })), "-", "-"),
		append(rowOf("pod ADD: its delegates (cluster network + NAD)", timeOf(adds, func(x nodeSample) time.Duration { return x.delegates + 2*w })), "-", "-"),
		append(rowOf("pod ADD: meta plugin's own overhead", overheadAdd), "multinet thick ≤ 1 ms", ne.verdictOverhead()),
		append(rowOf("pod DEL: meta plugin", timeOf(dels, func(x nodeSample) time.Duration { return x.meta })), "-", "-"),
		append(rowOf("pod DEL: its delegates", timeOf(dels, func(x nodeSample) time.Duration { return x.delegates + 2*w })), "-", "-"),
		append(rowOf("pod DEL: meta plugin's own overhead", timeOf(dels, func(x nodeSample) time.Duration { return x.overhead(w, 2) })), "-", "-"),
		append(rowOf(fmt.Sprintf("%d pods at once: daemon peak RSS", ne.burstPods), func(s *nodeSubject) string {
			if !s.thick {
				return "-"
			}
			if s.peakRSS == 0 {
				return "n/a"
			}
			return bytesMB(s.peakRSS)
		}), "multinet ≤ ¼ Multus thick", ne.verdictMemory()),
		append(rowOf(fmt.Sprintf("%d pods at once: all Running after", ne.burstPods), func(s *nodeSubject) string {
			if !s.thick || s.burst == 0 {
				return "-"
			}
			return fmt.Sprintf("%.1f s", s.burst.Seconds())
		}), "-", "-"),
	)
	return cells
}

func (ne *nodeEnv) verdictOverhead() string {
	s := ne.subjects[0]
	m, ok := median(overheads(s.adds, ne.wrapper))
	return verdict(ok && s.fails == 0 && m <= time.Millisecond, ok)
}

func overheads(ss []nodeSample, w time.Duration) []time.Duration {
	var d []time.Duration
	for _, s := range ss {
		d = append(d, s.overhead(w, 2))
	}
	return d
}

func (ne *nodeEnv) verdictMemory() string {
	ours, multus := ne.subjects[0].peakRSS, ne.subjects[2].peakRSS
	return verdict(ours > 0 && multus > 0 && ours*4 <= multus, ours > 0 && multus > 0)
}

// nodeNotes explains the node table.
func (ne *nodeEnv) nodeNotes() []string {
	notes := []string{
		fmt.Sprintf("medians of %d pods per meta plugin, the four taking turns pod by pod", ne.perMeta),
		fmt.Sprintf("each plugin exec is timed by a wrapper (bench/cnitime) that reads the plugin's whole configuration first (a plugin started early and held by its caller is timed from when it could work); the wrapper's own cost, %s per exec here (median, /bin/true wrapped vs direct), is added to each delegate exec in the delegates' rows and taken out of the overhead", ms(ne.wrapper)),
		"overhead = the meta plugin's time − its two bridge execs (cluster network eth0 + NAD net1, host-local in-process) − the wrapper per delegate; it holds the meta plugin's own exec and start, its API reads and status write (thin), or the shim's exec and the daemon's work (thick); DEL: the first DEL kubelet asks for (StopPodSandbox, with the network namespace)",
		"all four on one node in turn (the node's first configuration rewritten, containerd's reload awaited with a probe pod), the same pod (cluster network + one NAD, our bridge + host-local for both); multinet with deploy/multinet/rbac.yaml's service account, Multus with its own manifest's; the daemons run as processes in the node's namespaces",
	}
	for _, s := range ne.subjects {
		if s.unavail != "" {
			notes = append(notes, fmt.Sprintf("%s: not measured: %s", s.label, s.unavail))
		}
		if s.firstErr != "" {
			notes = append(notes, fmt.Sprintf("%s: %d samples failed; first: %s", s.label, s.fails, s.firstErr))
		}
		if s.burstErr != "" {
			notes = append(notes, fmt.Sprintf("%s: burst: %s", s.label, s.burstErr))
		}
	}
	return notes
}
