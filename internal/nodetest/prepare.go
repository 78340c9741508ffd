package nodetest

import (
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/patchbay-cni/patchbay/internal/kubetest"
)

// HostPaths are the node's standard host directories; inside the node each
// is a test directory (Node.HostPath gives its real location), empty at
// start unless said otherwise:
//
//	/etc/kubernetes      PKI, kubeconfigs (admin.conf, kubelet.conf), kubelet.yaml
//	/etc/containerd      config.toml
//	/etc/cni/net.d       Options.CNIConfig
//	/opt/cni/bin         a copy of Options.CNIBinDir
//	/var/lib/cni         libcni's cache, host-local's default dataDir
//	/var/lib/kubelet     kubelet's root (a shared mount, as kubelet wants)
//	/run/netns           containerd's pod network namespaces (shared)
//	/var/lib/containerd, /run/containerd, /var/lib/etcd, /var/log/pods, /var/log/containers
var HostPaths = []string{
	"/etc/kubernetes", "/etc/containerd", "/etc/cni/net.d", "/opt/cni/bin",
	"/var/lib/cni", "/var/lib/kubelet", "/var/lib/containerd", "/var/lib/etcd",
	"/var/log/pods", "/var/log/containers", "/run/containerd", "/run/netns",
}

// sharedHostPaths are made shared mounts inside the node: kubelet wants its
// root shared (mount propagation of volumes), and pods mounting /run/netns
// with HostToContainer propagation must see namespaces created later.
var sharedHostPaths = map[string]bool{"/var/lib/kubelet": true, "/run/netns": true}

// HostPath returns where the node's path p (under HostPaths or
// Options.HostDirs) is on the machine, e.g. HostPath("/etc/cni/net.d").
func (n *Node) HostPath(p string) string {
	return filepath.Join(n.Dir, "host", filepath.Clean("/"+p))
}

// kubeletSysctls are the machine-wide settings kubelet writes at start
// (pkg/kubelet/cm setupKernelTunables) with the values it wants. Inside the
// node each /proc/sys file is covered by a file holding that value.
var kubeletSysctls = map[string]string{
	"vm/overcommit_memory":      "1",
	"vm/panic_on_oom":           "0",
	"kernel/panic":              "10",
	"kernel/panic_on_oops":      "1",
	"kernel/keys/root_maxkeys":  "1000000",
	"kernel/keys/root_maxbytes": "25000000",
}

// KubeletSysctls lists the /proc/sys files of kubeletSysctls (tests check
// that the machine's values never change).
func KubeletSysctls() []string {
	var out []string
	for k := range kubeletSysctls {
		out = append(out, "/proc/sys/"+k)
	}
	return out
}

// componentNames are the components (also their log names). etcd and
// containerd start first, the apiserver once etcd is ready, the rest once
// the apiserver (and, for kubelet, containerd) is.
var componentNames = []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "containerd", "kubelet"}

// prepare lays out the test directory and writes every file the components
// read; it returns the supervisor's configuration.
func (n *Node) prepare(b binaries) (*supervisorConfig, error) {
	hostDirs := append(append([]string(nil), HostPaths...), n.opts.HostDirs...)
	seen := map[string]bool{}
	for _, d := range hostDirs {
		if !filepath.IsAbs(d) || filepath.Clean(d) != d || d == "/" {
			return nil, fmt.Errorf("host directory %q: want a clean absolute path other than /", d)
		}
		if seen[d] {
			return nil, fmt.Errorf("host directory %q given twice (HostPaths has the standard ones)", d)
		}
		seen[d] = true
	}
	for _, d := range append([]string{"logs", "sysctl", "images"}, hostDirs...) {
		p := filepath.Join(n.Dir, d)
		if filepath.IsAbs(d) {
			p = n.HostPath(d)
		}
		if err := os.MkdirAll(p, 0o755); err != nil {
			return nil, err
		}
	}
	if err := os.Chmod(n.HostPath("/var/lib/etcd"), 0o700); err != nil {
		return nil, err
	}
	cfg := &supervisorConfig{
		Dir:         n.Dir,
		Cgroup:      n.cgroup,
		LoAddrs:     []string{NodeIP, KubernetesServiceIP},
		APIServer:   fmt.Sprintf("127.0.0.1:%d", APIServerPort),
		ServiceAddr: KubernetesServiceIP + ":443",
		KeepDir:     n.keepDir,
	}
	for _, d := range hostDirs {
		cfg.Binds = append(cfg.Binds, bindMount{Target: d, Source: n.HostPath(d), Shared: sharedHostPaths[d]})
	}
	for k, v := range kubeletSysctls {
		f := filepath.Join(n.Dir, "sysctl", strings.ReplaceAll(k, "/", "."))
		if err := os.WriteFile(f, []byte(v+"\n"), 0o644); err != nil {
			return nil, err
		}
		cfg.Sysctls = append(cfg.Sysctls, sysctlCover{Path: "/proc/sys/" + k, File: f})
	}

	// CNI: plugins and configuration.
	if err := copyDir(n.opts.CNIBinDir, n.HostPath("/opt/cni/bin")); err != nil {
		return nil, fmt.Errorf("CNI plugins: %w", err)
	}
	if _, err := os.Stat(n.HostPath("/opt/cni/bin/loopback")); err != nil {
		return nil, fmt.Errorf("CNI plugins: %s has no loopback plugin (containerd's CRI runs it for every pod)", n.opts.CNIBinDir)
	}
	for name, data := range n.opts.CNIConfig {
		if name != filepath.Base(name) || strings.HasPrefix(name, ".") {
			return nil, fmt.Errorf("CNI config file name %q: want a plain file name", name)
		}
		if err := os.WriteFile(filepath.Join(n.HostPath("/etc/cni/net.d"), name), []byte(data), 0o644); err != nil {
			return nil, err
		}
	}

	// Credentials: the admin (tests, controller-manager, scheduler) and the
	// node's own identity for kubelet (the Node authorizer wants it).
	kdir := n.HostPath("/etc/kubernetes")
	cr, err := kubetest.WriteCredentials(kdir, []net.IP{net.ParseIP(NodeIP), net.ParseIP(KubernetesServiceIP)},
		kubetest.StaticUser{Name: "system:node:" + NodeName, Groups: []string{"system:nodes"}})
	if err != nil {
		return nil, fmt.Errorf("credentials: %w", err)
	}
	n.Credentials = cr
	inNode := fmt.Sprintf("https://127.0.0.1:%d", APIServerPort)
	n.NodeKubeconfig = filepath.Join(kdir, "admin.conf")
	n.Kubeconfig = filepath.Join(n.Dir, "kubeconfig")
	kubeletConf := filepath.Join(kdir, "kubelet.conf")
	for _, f := range []struct {
		path string
		data []byte
	}{
		{n.NodeKubeconfig, kubetest.Kubeconfig(inNode, cr.CAPEM, cr.AdminToken)},
		{kubeletConf, kubetest.Kubeconfig(inNode, cr.CAPEM, cr.Tokens["system:node:"+NodeName])},
		{n.Kubeconfig, kubetest.Kubeconfig("https://"+n.apiAddr, cr.CAPEM, cr.AdminToken)},
		{filepath.Join(kdir, "resolv.conf"), []byte("# nodetest: no DNS server on the node\n")},
		{filepath.Join(kdir, "kubelet.yaml"), []byte(kubeletConfig(n.cgroup, filepath.Join(kdir, "resolv.conf"), filepath.Join(kdir, "manifests")))},
		{filepath.Join(n.HostPath("/etc/containerd"), "config.toml"), []byte(containerdConfig(b.Runc))},
	} {
		if err := os.WriteFile(f.path, f.data, 0o600); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(filepath.Join(kdir, "manifests"), 0o755); err != nil {
		return nil, err
	}

	// Images: the pause and busybox test images, then the caller's.
	testImages, err := buildTestImages(filepath.Join(n.Dir, "images"), b)
	if err != nil {
		return nil, fmt.Errorf("test images: %w", err)
	}
	sock := "/run/containerd/containerd.sock"
	var imports [][]string
	for _, img := range append([]string{testImages}, n.opts.Images...) {
		abs, err := filepath.Abs(img)
		if err != nil {
			return nil, err
		}
		if st, err := os.Stat(abs); err != nil || !st.Mode().IsRegular() {
			return nil, fmt.Errorf("image archive %s: not a file (%v)", img, err)
		}
		imports = append(imports, []string{b.Ctr, "--address", sock, "-n", "k8s.io", "images", "import", abs})
	}

	certDir := filepath.Join(n.Dir, "apiserver-certs")
	apiserver := setFlags(kubetest.APIServerFlags(cr, "http://127.0.0.1:2379", NodeIP, APIServerPort, certDir),
		"--bind-address=0.0.0.0", // the node's namespace only
		"--service-cluster-ip-range="+ServiceCIDR,
		"--authorization-mode=Node,RBAC",
		"--allow-privileged=true", // CNI installers run privileged
		"--kubelet-preferred-address-types=InternalIP",
	)
	serving := []string{"--bind-address=127.0.0.1", "--tls-cert-file=" + cr.CertFile, "--tls-private-key-file=" + cr.KeyFile}
	cfg.Components = []component{
		{
			Name:  "etcd",
			Argv:  append([]string{b.Etcd}, kubetest.EtcdFlags(n.HostPath("/var/lib/etcd")+"/data", "http://127.0.0.1:2379", "http://127.0.0.1:2380")...),
			Ready: probe{URL: "http://127.0.0.1:2379/health", TimeoutSeconds: 30},
		},
		{
			Name:  "kube-apiserver",
			Argv:  append([]string{b.APIServer}, apiserver...),
			Ready: probe{URL: inNode + "/readyz", CAFile: cr.CAFile, Token: cr.AdminToken, TimeoutSeconds: 90},
			After: []string{"etcd"},
		},
		{
			Name: "kube-controller-manager",
			Argv: append([]string{b.ControllerManager,
				"--kubeconfig=" + n.NodeKubeconfig,
				"--authentication-kubeconfig=" + n.NodeKubeconfig,
				"--authorization-kubeconfig=" + n.NodeKubeconfig,
				"--leader-elect=false",
				"--service-account-private-key-file=" + cr.SAKey,
				"--root-ca-file=" + cr.CAFile,
				"--use-service-account-credentials=false",
			}, serving...),
			Ready: probe{URL: "https://127.0.0.1:10257/healthz", CAFile: cr.CAFile, TimeoutSeconds: 60},
			After: []string{"kube-apiserver"},
		},
		{
			Name: "kube-scheduler",
			Argv: append([]string{b.Scheduler,
				"--kubeconfig=" + n.NodeKubeconfig,
				"--authentication-kubeconfig=" + n.NodeKubeconfig,
				"--authorization-kubeconfig=" + n.NodeKubeconfig,
				"--leader-elect=false",
			}, serving...),
			Ready: probe{URL: "https://127.0.0.1:10259/healthz", CAFile: cr.CAFile, TimeoutSeconds: 60},
			After: []string{"kube-apiserver"},
		},
		{
			Name:  "containerd",
			Argv:  []string{b.Containerd, "--config", "/etc/containerd/config.toml"},
			Ready: probe{Command: []string{b.Ctr, "--address", sock, "version"}, TimeoutSeconds: 30},
			Then:  imports,
		},
		{
			Name: "kubelet",
			Argv: []string{b.Kubelet,
				"--config=" + filepath.Join(kdir, "kubelet.yaml"),
				"--kubeconfig=" + kubeletConf,
				"--hostname-override=" + NodeName,
				"--node-ip=" + NodeIP,
				"--v=2",
			},
			Ready: probe{URL: "http://127.0.0.1:10248/healthz", TimeoutSeconds: 60},
			After: []string{"kube-apiserver", "containerd"},
		},
	}
	return cfg, nil
}

// setFlags replaces flags of args (--name=value) by the given ones, and
// appends those args lacks.
func setFlags(args []string, flags ...string) []string {
	out := append([]string(nil), args...)
	for _, f := range flags {
		name := f[:strings.Index(f, "=")+1]
		replaced := false
		for i, a := range out {
			if strings.HasPrefix(a, name) {
				out[i], replaced = f, true
			}
		}
		if !replaced {
			out = append(out, f)
		}
	}
	return out
}

// kubeletConfig is the KubeletConfiguration measured to work here (see
// DESIGN.md "A real node"): cgroupfs under the node's cgroup, no swap or
// eviction checks, no image GC, anonymous AlwaysAllow access (kubectl
// exec/logs; the port is inside the node's namespace only), every path in
// the node's own directories.
func kubeletConfig(cgroup, resolvConf, staticPods string) string {
	return `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 0.0.0.0
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
cgroupDriver: cgroupfs
cgroupsPerQOS: true
cgroupRoot: /` + cgroup + `
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
failSwapOn: false
oomScoreAdj: 0
evictionHard: {}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
protectKernelDefaults: false
makeIPTablesUtilChains: false
serializeImagePulls: false
resolvConf: ` + resolvConf + `
staticPodPath: ` + staticPods + `
podLogsDir: /var/log/pods
volumePluginDir: /var/lib/kubelet/volumeplugins
`
}

// containerdConfig is containerd 1.6's configuration measured to work here:
// restrict_oom_score_adj (no CAP_SYS_RESOURCE), no AppArmor, runc with
// cgroupfs, the test's pause image, CNI from the node's standard dirs.
func containerdConfig(runc string) string {
	return `version = 2
# Snapshotters this machine cannot use: skipped without trying.
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs"]
root = "/var/lib/containerd"
state = "/run/containerd"
[grpc]
  address = "/run/containerd/containerd.sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "` + PauseImage + `"
  restrict_oom_score_adj = true
  disable_apparmor = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = "` + runc + `"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/opt/cni/bin"
    conf_dir = "/etc/cni/net.d"
    max_conf_num = 1
`
}

// copyDir copies the regular files and symbolic links of src (not
// subdirectories, not *.tar archives) into dst, keeping modes and link
// targets.
func copyDir(src, dst string) error {
	des, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	for _, de := range des {
		name := de.Name()
		if de.IsDir() || strings.HasSuffix(name, ".tar") {
			continue
		}
		from, to := filepath.Join(src, name), filepath.Join(dst, name)
		if de.Type()&os.ModeSymlink != 0 {
			target, err := os.Readlink(from)
			if err != nil {
				return err
			}
			if err := os.Symlink(target, to); err != nil {
				return err
			}
			continue
		}
		if !de.Type().IsRegular() {
			continue
		}
		if err := copyFile(from, to); err != nil {
			return err
		}
	}
	return nil
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return err
	}
	out, err := os.OpenFile(to, os.O_CREATE|os.O_EXCL|os.O_WRONLY, st.Mode().Perm())
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
