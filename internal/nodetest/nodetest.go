// Package nodetest runs a real single-node Kubernetes cluster for tests:
// etcd, kube-apiserver, kube-controller-manager, kube-scheduler, containerd
// 1.6 + runc and kubelet, with pods created by kubelet through containerd
// and networked by real CNI plugins (ours, from bin/).
//
// # Isolation
//
// Every component runs under a supervisor process (this test binary run
// again) that lives in a network namespace and a mount namespace of its own,
// created for the node and gone with it:
//
//   - Network: the node's "host" namespace has only lo, holding 127.0.0.1,
//     the node IP (NodeIP) and the kubernetes Service's IP. The components
//     talk over it; CNI plugins build the pod network inside it. The
//     machine's own namespace is never touched. Tests reach the apiserver
//     through a forwarder on the machine's loopback (Node.Config), kubelet's
//     exec/logs included; pods reach it at KubernetesServiceIP:443 (what
//     kubelet tells them), NodeIP:6443 or, hostNetwork, 127.0.0.1:6443.
//   - Files: the node sees the standard host paths (HostPaths: /etc/cni/net.d,
//     /opt/cni/bin, /var/lib/cni, /run/netns, /var/lib/kubelet, ...) as
//     directories of the test (Node.HostPath maps one to its real location),
//     so manifests with hostPath volumes work unchanged and nothing is
//     written to the machine's own /etc, /opt, /var or /run. Missing parents
//     appear through an overlay whose writes land in the test directory.
//   - Kernel settings: kubelet sets machine-wide sysctls at start
//     (vm.overcommit_memory, kernel.panic, ...). In the node's mount
//     namespace those /proc/sys files are covered by files holding the values
//     kubelet wants, so it finds nothing to change.
//   - Cgroups: everything runs in /patchbay-node-<id> of every hierarchy;
//     kubelet's cgroupRoot is that cgroup, so pods land inside it.
//
// # Lifetime
//
// Stop (or the end of the test, or of the test binary — even a SIGKILL or a
// -timeout panic) closes the supervisor's control pipe; the supervisor then
// kills everything in the node's cgroup, unmounts what it mounted, removes
// the cgroups and the test directory, and exits, which frees both
// namespaces. Stop waits for that, bounded, and finishes the job itself if
// the supervisor could not (see Stop).
//
// Start costs about 5 s with cached binaries, so a test binary shares one
// node: the package's TestMain calls Main, tests call Shared.
//
// # Binaries
//
// scripts/kube-deps.sh builds the kube binaries into a cache (see
// kubetest.Binary); scripts/node-deps.sh installs Debian's containerd, runc
// and busybox-static. `make test` runs both.
package nodetest

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/patchbay-cni/patchbay/internal/kubetest"
)

// Fixed names of the node. The node's namespace is private, so fixed ports
// and addresses cannot collide with anything.
const (
	NodeName = "patchbay-node"
	// NodeIP is the node's InternalIP, on its lo (TEST-NET-1: never routed).
	NodeIP = "192.0.2.1"
	// APIServerPort is the apiserver's port on the node (127.0.0.1 and NodeIP).
	APIServerPort = 6443
	// ServiceCIDR is the Service range. No kube-proxy runs: only the
	// kubernetes Service answers, at KubernetesServiceIP:443 (on the node's
	// lo, forwarded to the apiserver), so in-cluster clients work as kubelet
	// configures them; other Service IPs route nowhere.
	ServiceCIDR         = "10.96.0.0/16"
	KubernetesServiceIP = "10.96.0.1"
)

// Options configure a node.
type Options struct {
	// CNIBinDir's files (and links) are copied into the node's /opt/cni/bin.
	// Default: $PATCHBAY_BIN, `make build`'s bin/. It must hold a loopback
	// plugin (containerd's CRI runs one for every pod).
	CNIBinDir string
	// CNIConfig files are written into the node's /etc/cni/net.d before
	// start: file name → contents. BridgeConflist is a working default
	// network. With none, the node stays NotReady until one appears.
	CNIConfig map[string]string
	// Images are OCI archives imported (ctr -n k8s.io images import) before
	// kubelet starts, besides the PauseImage and BusyboxImage test images.
	Images []string
	// HostDirs are more host directories the node sees as empty test
	// directories, besides HostPaths (e.g. a daemon's socket directory).
	HostDirs []string
	// SkipReadyWait makes Start return once kubelet has registered the node,
	// without waiting for Ready (e.g. when a DaemonSet installs the network).
	SkipReadyWait bool
}

// DefaultOptions is a node whose default network is our bridge +
// host-local (BridgeConflist), with the plugins of $PATCHBAY_BIN.
func DefaultOptions() Options {
	return Options{CNIConfig: map[string]string{"10-patchbay-bridge.conflist": BridgeConflist}}
}

// Default network of DefaultOptions: bridge cni0 + host-local from
// PodCIDR, host-local's files in the node's /var/lib/cni/networks. CNI
// 1.0.0: containerd 1.6's libcni refuses 1.1.0 results.
const (
	BridgeNetwork  = "patchbay-default"
	BridgeName     = "cni0"
	PodCIDR        = "10.244.0.0/24"
	BridgeConflist = `{
  "cniVersion": "1.0.0",
  "name": "` + BridgeNetwork + `",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "` + BridgeName + `",
      "isGateway": true,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "` + PodCIDR + `"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    }
  ]
}
`
)

// Node is a running single-node cluster.
type Node struct {
	// Dir is the test directory holding everything of the node (removed by
	// Stop); HostPath maps node paths into it.
	Dir string
	// Config reaches the apiserver as the admin (group system:masters)
	// through the forwarder on the machine's loopback; Client and Dynamic
	// use it.
	Config  *rest.Config
	Client  kubernetes.Interface
	Dynamic dynamic.Interface
	// Kubeconfig is a kubeconfig file for Config (for tools run by tests).
	Kubeconfig string
	// NodeKubeconfig is a kubeconfig for use inside the node (hostNetwork
	// pods, node-side commands): https://127.0.0.1:6443, admin token.
	NodeKubeconfig string
	// Credentials of the apiserver (CA, tokens).
	Credentials *kubetest.Credentials
	// Startup is how long the components took to be ready (supervisor
	// start to kubelet healthy); Ready, until the node was Ready (zero with
	// SkipReadyWait).
	Startup, Ready time.Duration

	opts      Options
	cgroup    string // cgroup name, /patchbay-node-<id> in every hierarchy
	apiAddr   string // the forwarder's address, on the machine's loopback
	sup       *exec.Cmd
	supPID    int
	control   io.WriteCloser
	listener  net.Listener
	events    chan event
	done      chan struct{} // closed when the supervisor exited
	pids      map[string]int
	netnsIno  uint64
	api       *apiHelpers
	mu        sync.Mutex
	exits     []string // unexpected component exits, as reported
	stopped   *event   // the supervisor's final report
	stopOnce  sync.Once
	stopErr   error
	keepDir   bool
	startedAt time.Time
}

// Start runs a node for this test and stops it when the test ends. It fails
// the test when not root, when a binary is missing, or when the node does
// not come up; then the components' log tails are printed.
func Start(t testing.TB, opts Options) *Node {
	t.Helper()
	requireRoot(t)
	n, err := New(opts)
	if err != nil {
		t.Fatalf("nodetest: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(n.LogTails(40))
		}
		if err := n.Stop(); err != nil {
			t.Errorf("nodetest: stop: %v", err)
		}
	})
	t.Logf("nodetest: node %s Ready in %v (components %v), dir %s", NodeName, n.Ready.Round(time.Millisecond), n.Startup.Round(time.Millisecond), n.Dir)
	return n
}

// New starts a node. The caller must Stop it (the supervisor also tears it
// down when this process exits). When the node does not come up, the error
// holds the components' log tails and everything started is removed.
func New(opts Options) (*Node, error) {
	n, err := start(opts)
	if err != nil {
		return nil, err
	}
	return n, nil
}

func start(opts Options) (n *Node, err error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("nodetest needs root (the test suite runs as root via `make test`)")
	}
	if opts.CNIBinDir == "" {
		opts.CNIBinDir = os.Getenv("PATCHBAY_BIN")
		if opts.CNIBinDir == "" {
			return nil, errors.New("Options.CNIBinDir unset and PATCHBAY_BIN unset: `make test` sets it to bin/ (run `make build` first)")
		}
	}
	bins, err := findBinaries()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "patchbay-node-")
	if err != nil {
		return nil, err
	}
	n = &Node{
		Dir:       dir,
		opts:      opts,
		cgroup:    "patchbay-node-" + filepath.Base(dir)[len("patchbay-node-"):],
		events:    make(chan event, 64),
		done:      make(chan struct{}),
		keepDir:   os.Getenv(keepEnv) != "",
		startedAt: time.Now(),
	}
	defer func() {
		if err != nil {
			err = fmt.Errorf("%v\n%s", err, n.LogTails(30))
			if serr := n.Stop(); serr != nil {
				err = fmt.Errorf("%v\nstop: %v", err, serr)
			}
		}
	}()
	// The forwarder's listener, on the machine's loopback: the supervisor
	// serves it from inside the node (see supervisor.forward).
	if n.listener, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		return n, err
	}
	n.apiAddr = n.listener.Addr().String()
	cfg, err := n.prepare(bins)
	if err != nil {
		return n, err
	}
	if err := n.startSupervisor(cfg); err != nil {
		return n, err
	}
	ready, err := n.waitEvent("ready", startTimeout)
	if err != nil {
		return n, err
	}
	n.pids = ready.PIDs
	n.Startup = time.Duration(ready.Millis) * time.Millisecond
	if err := n.connect(); err != nil {
		return n, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	if opts.SkipReadyWait {
		if err := n.waitNodeRegistered(ctx); err != nil {
			return n, err
		}
	} else {
		if _, err := n.WaitNodeReady(ctx); err != nil {
			return n, err
		}
		n.Ready = time.Since(n.startedAt)
	}
	// Pods are refused until the controller-manager made the default
	// ServiceAccount.
	if err := n.waitServiceAccount(ctx, "default"); err != nil {
		return n, err
	}
	return n, nil
}

// Generous bounds: the machine is small and shared.
const (
	startTimeout = 3 * time.Minute
	readyTimeout = 2 * time.Minute
	stopTimeout  = time.Minute
)

// keepEnv, when set, keeps the test directory after Stop (for debugging;
// processes, mounts and cgroups are still removed).
const keepEnv = "PATCHBAY_NODETEST_KEEP"

// binaries are the programs a node runs.
type binaries struct {
	Etcd, APIServer, ControllerManager, Scheduler, Kubelet string
	Containerd, Runc, Ctr, Nsenter, Busybox, Go            string
}

func findBinaries() (binaries, error) {
	var b binaries
	var err error
	for _, k := range []struct {
		name string
		dst  *string
	}{{"etcd", &b.Etcd}, {"kube-apiserver", &b.APIServer}, {"kube-controller-manager", &b.ControllerManager}, {"kube-scheduler", &b.Scheduler}, {"kubelet", &b.Kubelet}} {
		if *k.dst, err = kubetest.Binary(k.name); err != nil {
			return b, err
		}
	}
	for _, k := range []struct {
		name string
		dst  *string
	}{{"containerd", &b.Containerd}, {"containerd-shim-runc-v2", nil}, {"runc", &b.Runc}, {"ctr", &b.Ctr}, {"nsenter", &b.Nsenter}, {"busybox", &b.Busybox}, {"go", &b.Go}} {
		p, err := exec.LookPath(k.name)
		if err != nil {
			return b, fmt.Errorf("%s not found: run scripts/node-deps.sh as root (or `make test`)", k.name)
		}
		if k.dst != nil {
			*k.dst = p
		}
	}
	return b, nil
}

// startSupervisor runs this binary again as the node's supervisor, in new
// network and mount namespaces and its own session (a Ctrl-C to the test's
// process group must not kill it before it cleaned up).
func (n *Node) startSupervisor(cfg *supervisorConfig) error {
	// The supervisor gets the listener; this process keeps none of it.
	lf, err := n.listener.(*net.TCPListener).File()
	n.listener.Close()
	if err != nil {
		return err
	}
	defer lf.Close()
	cfgPath := filepath.Join(n.Dir, "supervisor.json")
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(cfgPath, b, 0o600); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	logf, err := os.Create(filepath.Join(n.Dir, "logs", "supervisor.log"))
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), supervisorEnv+"="+cfgPath)
	cmd.Stderr = logf
	cmd.ExtraFiles = []*os.File{lf} // fd 3: the forwarder's listener
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWNET | syscall.CLONE_NEWNS,
		Setsid:     true,
	}
	if n.control, err = cmd.StdinPipe(); err != nil {
		return err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start supervisor: %w", err)
	}
	n.sup, n.supPID = cmd, cmd.Process.Pid
	var st syscall.Stat_t
	if err := syscall.Stat(fmt.Sprintf("/proc/%d/ns/net", n.supPID), &st); err == nil {
		n.netnsIno = st.Ino
	}
	go n.readEvents(out)
	return nil
}

// readEvents passes the supervisor's events on, recording unexpected exits
// and the final report, until its stdout closes; then it reaps it.
func (n *Node) readEvents(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			continue
		}
		n.mu.Lock()
		switch e.Event {
		case "exited":
			n.exits = append(n.exits, fmt.Sprintf("%s (pid %d) exited: %s", e.Component, e.PID, e.Error))
		case "stopped":
			ev := e
			n.stopped = &ev
		}
		n.mu.Unlock()
		select {
		case n.events <- e:
		default: // nobody waits for it; the record above is what counts
		}
	}
	n.sup.Wait()
	close(n.done)
}

// waitEvent waits for the named event; a "failed" event or the supervisor's
// exit ends the wait with an error.
func (n *Node) waitEvent(name string, timeout time.Duration) (event, error) {
	deadline := time.After(timeout)
	for {
		select {
		case e := <-n.events:
			switch e.Event {
			case name:
				return e, nil
			case "failed":
				return e, fmt.Errorf("node start failed: %s", e.Error)
			}
		case <-n.done:
			return event{}, fmt.Errorf("supervisor (pid %d) exited before %q: %v", n.supPID, name, n.sup.ProcessState)
		case <-deadline:
			return event{}, fmt.Errorf("no %q from the supervisor (pid %d) after %v", name, n.supPID, timeout)
		}
	}
}

// PIDs returns the process IDs of the components by name (etcd,
// kube-apiserver, kube-controller-manager, kube-scheduler, containerd,
// kubelet) and of the supervisor ("supervisor").
func (n *Node) PIDs() map[string]int {
	m := map[string]int{"supervisor": n.supPID}
	for k, v := range n.pids {
		m[k] = v
	}
	return m
}

// Exits lists the components that exited while the node ran (none is
// expected: each is a failure of the node).
func (n *Node) Exits() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string(nil), n.exits...)
}

// NetnsPath is the node's network namespace (valid while the node runs).
func (n *Node) NetnsPath() string { return fmt.Sprintf("/proc/%d/ns/net", n.supPID) }

// NetnsInode identifies the node's network namespace, also after Stop (to
// check that no process is left in it).
func (n *Node) NetnsInode() uint64 { return n.netnsIno }

// Cgroup is the node's cgroup (the same path in every hierarchy).
func (n *Node) Cgroup() string { return "/" + n.cgroup }

// Stop tears the node down: it closes the supervisor's control pipe and
// waits (bounded) for its report and exit. If the supervisor does not
// finish, Stop kills it by PID and removes what is left itself: the
// processes in the node's cgroup, the cgroups and the directory. It returns
// an error naming anything left behind. Safe to call more than once.
func (n *Node) Stop() error {
	n.stopOnce.Do(func() { n.stopErr = n.stop() })
	return n.stopErr
}

func (n *Node) stop() error {
	if n.listener != nil {
		n.listener.Close() // if the supervisor never got it
	}
	var problems []string
	if n.sup != nil {
		n.control.Close()
		select {
		case <-n.done:
		case <-time.After(stopTimeout):
			problems = append(problems, fmt.Sprintf("supervisor (pid %d) did not finish in %v: killed", n.supPID, stopTimeout))
			n.sup.Process.Kill()
			select {
			case <-n.done:
			case <-time.After(10 * time.Second):
				problems = append(problems, fmt.Sprintf("supervisor (pid %d) did not exit after SIGKILL", n.supPID))
			}
		}
		n.mu.Lock()
		st := n.stopped
		n.mu.Unlock()
		if st == nil {
			problems = append(problems, "no report from the supervisor")
		} else {
			problems = append(problems, st.Leftovers...)
		}
	}
	// Whatever the supervisor could not do, or never got to do.
	problems = append(problems, killCgroup(n.cgroup, 0)...)
	problems = append(problems, removeCgroups(n.cgroup)...)
	if !n.keepDir {
		if err := removeDir(n.Dir); err != nil {
			problems = append(problems, err.Error())
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("left behind: %s", strings.Join(dedupe(problems), "; "))
	}
	return nil
}

func dedupe(s []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, x := range s {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}

// LogTails returns the last n lines of every component's log.
func (n *Node) LogTails(lines int) string {
	var b strings.Builder
	for _, name := range append([]string{"supervisor"}, componentNames...) {
		path := filepath.Join(n.Dir, "logs", name+".log")
		if _, err := os.Stat(path); err != nil {
			continue
		}
		fmt.Fprintf(&b, "--- last %d lines of %s ---\n%s\n", lines, name, tailFile(path, lines))
	}
	if ex := n.Exits(); len(ex) > 0 {
		fmt.Fprintf(&b, "--- component exits ---\n%s\n", strings.Join(ex, "\n"))
	}
	return b.String()
}

// LogPath is the log file of a component (see PIDs for the names).
func (n *Node) LogPath(component string) string {
	return filepath.Join(n.Dir, "logs", component+".log")
}

func tailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	for i, l := range lines {
		if len(l) > 400 {
			lines[i] = l[:400] + "…"
		}
	}
	return strings.Join(lines, "\n")
}

func requireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("nodetest needs root (the test suite runs as root via `make test`)")
	}
}

func itoa(i int) string { return strconv.Itoa(i) }
