package plugin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/patchbay-cni/patchbay/internal/atomicfile"
	"github.com/patchbay-cni/patchbay/internal/install"
	"github.com/patchbay-cni/patchbay/spec"
)

// Install is the readiness method of §6.1/§6.1.1: it waits until the
// cluster network is ready — its configuration resolves from disk (when
// clusterNetwork is a path or a confDir name) and the readiness indicator
// file exists (when configured) — and only then writes multinet's
// configuration (the file src, a .conf or .conflist holding a "multinet"
// plugin) atomically into destDir, the directory kubelet/the CRI runtime
// reads. It fails after timeout (0: wait forever) without writing anything.
// (`multinet install -config FILE -dest DIR`: a hand-written file installed
// as it is; the DaemonSet uses InstallNode.)
func Install(ctx context.Context, src, destDir string, timeout time.Duration) (string, error) {
	data, err := os.ReadFile(src)
	if err != nil {
		return "", err
	}
	l, err := spec.ParseAny(data)
	if err != nil {
		return "", fmt.Errorf("%s: %w", src, err)
	}
	var cfg *Config
	for _, p := range l.Plugins {
		if p.Network.Type == "multinet" {
			if cfg, err = ParseConfig(p.Bytes); err != nil {
				return "", fmt.Errorf("%s: %w", src, err)
			}
		}
	}
	if cfg == nil {
		return "", fmt.Errorf("%s: no plugin of type \"multinet\"", src)
	}
	if err := waitReady(ctx, cfg, timeout, nil); err != nil {
		return "", fmt.Errorf("%w; %s not written", err, src)
	}
	dest := filepath.Join(destDir, filepath.Base(src))
	if err := writeAtomic(dest, data); err != nil {
		return "", err
	}
	return dest, nil
}

// waitReady polls until notReady says nothing, or timeout (0: none) or ctx
// ends. log, if set, hears the reason once per change.
func waitReady(ctx context.Context, cfg *Config, timeout time.Duration, log *slog.Logger) error {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	last := ""
	for {
		why := notReady(cfg)
		if why == "" {
			return nil
		}
		if why != last && log != nil {
			log.Info("waiting for the cluster network", "why", why)
		}
		last = why
		select {
		case <-ctx.Done():
			if timeout > 0 {
				return fmt.Errorf("the cluster network is not ready after %v (%s)", timeout, why)
			}
			return fmt.Errorf("the cluster network is not ready (%s): %w", why, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// notReady says why the cluster network is not ready, or "".
func notReady(cfg *Config) string {
	if f := cfg.ReadinessIndicatorFile; f != "" {
		if _, err := os.Stat(f); err != nil {
			return "readiness indicator file: " + err.Error()
		}
	}
	if _, onDisk, err := clusterFromDisk(cfg); onDisk && err != nil {
		return "clusterNetwork: " + err.Error()
	}
	return ""
}

func writeAtomic(dest string, data []byte) error {
	if !json.Valid(data) {
		return fmt.Errorf("refusing to write invalid JSON to %s", dest)
	}
	return atomicfile.Write(dest, data, 0o644, true)
}

// Installation modes: thick (the multinet-shim plugin, which asks the
// node's `multinet daemon`) or thin (the multinet plugin itself, which
// talks to the apiserver on every call).
const (
	ModeThick = "thick"
	ModeThin  = "thin"
)

// Names of our files in the image and in the node's CNI bin dir.
const (
	MultinetBinary = "multinet"
	ShimBinary     = "multinet-shim"    // thick mode's CNI plugin (type multinet-shim)
	PluginsBinary  = "patchbay-plugins" // every plugin of ours; the types are links to it
	ShimType       = ShimBinary
	// DefaultDaemonSocketDir is where the daemon listens (daemonSocketDir).
	DefaultDaemonSocketDir = "/run/multinet"
	// ConfName is the name of multinet's conflist, unless another file would
	// sort before it (then a name that sorts first is derived).
	ConfName = "00-multinet.conflist"
	// CredentialsDir (in the CNI conf dir) holds the thin plugin's
	// kubeconfig, token and CA, as Multus keeps multus.d there.
	CredentialsDir = "multinet.d"
	KubeconfigName = "multinet.kubeconfig"
)

// Where the thin plugin's token comes from.
const (
	tokenNodeBound = "node-bound TokenRequest"
	tokenPod       = "pod token"
)

// Plugin binaries policy: which of our plugin types to put in the node's
// CNI bin dir.
const (
	// PluginsMissing installs a type where the name is free or is already
	// ours (a link to patchbay-plugins); another vendor's binary stays.
	PluginsMissing = "missing"
	// PluginsReplace installs every type, replacing what is there.
	PluginsReplace = "replace"
	// PluginsNone installs no plugin type (multinet and the shim only).
	PluginsNone = "none"
)

// NodeInstall is what `multinet install -mode ...` does on a node (the
// DaemonSet's install step). Paths are the node's: the DaemonSet mounts
// each host directory at the same path in the container.
type NodeInstall struct {
	Mode string
	// Config is multinet's configuration, a JSON object with the multinet
	// plugin's keys (the ConfigMap's multinet.json): thin mode writes it
	// into the conflist, thick mode's daemon reads the same file.
	Config []byte
	// SrcDir holds our binaries (the image's root); empty copies none.
	SrcDir string
	// BinDir and ConfDir are the node's CNI directories.
	BinDir, ConfDir string
	Plugins         string // PluginsMissing (default), PluginsReplace, PluginsNone
	// CNIVersion of the conflist: "" or "auto" chooses from the node's
	// container runtime (RuntimeCNIVersion), else exactly this version.
	CNIVersion string
	NodeName   string
	// API reaches the apiserver as the DaemonSet's service account; nil
	// means no API (the runtime is then assumed current and the thin
	// plugin gets the pod's own token).
	API *InstallAPI
	// SADir is the pod's service account directory (ServiceAccountDir).
	SADir string
	// KubeServer is the apiserver URL the thin plugin's kubeconfig names
	// (default: the API's).
	KubeServer string
	// TokenLifetime of the thin plugin's node-bound token (default 24 h;
	// renewed at half of it).
	TokenLifetime time.Duration
	Timeout       time.Duration // waiting for the cluster network; 0: forever
	Log           *slog.Logger
}

// Installed describes what InstallNode wrote.
type Installed struct {
	ConfPath      string   // multinet's conflist
	CNIVersion    string   // its cniVersion
	CNIVersions   []string // its cniVersions
	VersionReason string   // why that version
	Binaries      []string // files written in BinDir
	Kept          []string // plugin names left alone (another vendor's binary)
	Kubeconfig    string   // thin: the kubeconfig written
	TokenSource   string   // thin: tokenNodeBound or tokenPod
	nodeUID       string
	tokenRenew    time.Time
	projected     []byte // thin, pod token: what was copied
}

func (o *NodeInstall) defaults() error {
	switch o.Mode {
	case ModeThick, ModeThin:
	default:
		return fmt.Errorf("-mode %q: want %q or %q", o.Mode, ModeThick, ModeThin)
	}
	switch o.Plugins {
	case "":
		o.Plugins = PluginsMissing
	case PluginsMissing, PluginsReplace, PluginsNone:
	default:
		return fmt.Errorf("-plugins %q: want %q, %q or %q", o.Plugins, PluginsMissing, PluginsReplace, PluginsNone)
	}
	if o.CNIVersion == "auto" {
		o.CNIVersion = ""
	}
	if o.CNIVersion != "" && (!spec.IsSupported(o.CNIVersion) || !spec.GreaterOrEqual(o.CNIVersion, spec.V040)) {
		return fmt.Errorf("cniVersion %q: want auto, 0.4.0, 1.0.0 or 1.1.0", o.CNIVersion)
	}
	if o.BinDir == "" || o.ConfDir == "" {
		return errors.New("the CNI bin and conf directories are required")
	}
	if o.SADir == "" {
		o.SADir = ServiceAccountDir
	}
	if o.TokenLifetime <= 0 {
		o.TokenLifetime = 24 * time.Hour
	}
	if o.Log == nil {
		o.Log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	return nil
}

// parse reads the configuration the way the plugin (or daemon) will, so
// that a bad ConfigMap fails here, in the DaemonSet's logs, not in every
// pod's ADD.
func (o *NodeInstall) parse() (*Config, map[string]json.RawMessage, error) {
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(o.Config, &keys); err != nil {
		return nil, nil, fmt.Errorf("multinet configuration: want a JSON object of multinet's keys: %w", err)
	}
	for _, k := range []string{"type", "name", "cniVersion", "cniVersions", "plugins"} {
		if _, ok := keys[k]; ok {
			return nil, nil, fmt.Errorf("multinet configuration: %q is written by the installer; remove it (the file holds the multinet plugin's own keys)", k)
		}
	}
	cfg, err := ParseConfig(o.Config)
	if err != nil {
		return nil, nil, fmt.Errorf("multinet configuration: %w", err)
	}
	// An inline NAD policy is checked too (every ADD that needs it would
	// fail). A policy file is not: it is a path on the node, which this
	// container may not see, and it is read again whenever it changes.
	if len(cfg.NADPolicy) > 0 {
		if _, err := cfg.Policy(); err != nil {
			return nil, nil, fmt.Errorf("multinet configuration: %w", err)
		}
	}
	return cfg, keys, nil
}

// InstallNode installs multinet on the node: it copies our binaries into
// BinDir atomically (each file written beside its target and renamed over
// it, so a plugin being executed is never written: no "text file busy"),
// waits until the cluster network is ready (§6.1: its configuration is on
// disk, by default the first other configuration in ConfDir, and the
// readiness indicator file exists), chooses a cniVersion the node's runtime
// accepts, writes the thin plugin's credentials, and then writes
// multinet's conflist under a name that sorts before every other
// configuration in ConfDir (so the runtime uses it), removing any other
// multinet conflist there. Nothing is written in ConfDir before the cluster
// network is ready.
func InstallNode(ctx context.Context, o *NodeInstall) (*Installed, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	cfg, keys, err := o.parse()
	if err != nil {
		return nil, err
	}
	inst := &Installed{}
	if o.SrcDir != "" {
		if inst.Binaries, inst.Kept, err = InstallBinaries(o.SrcDir, o.BinDir, o.Mode, o.Plugins); err != nil {
			return nil, err
		}
		o.Log.Info("binaries installed", "dir", o.BinDir, "files", strings.Join(inst.Binaries, " "))
		if len(inst.Kept) > 0 {
			o.Log.Info("plugins left alone (not ours; -plugins=replace replaces them)", "names", strings.Join(inst.Kept, " "))
		}
	}
	if err := waitReady(ctx, cfg, o.Timeout, o.Log); err != nil {
		return nil, fmt.Errorf("%w; multinet's configuration not written", err)
	}
	inst.CNIVersion, inst.CNIVersions, inst.VersionReason = o.CNIVersion, nil, "set in the configuration"
	if o.CNIVersion == "" || o.Mode == ModeThin {
		var rt string
		if o.API != nil && o.NodeName != "" {
			var err error
			if inst.nodeUID, rt, err = o.API.NodeRuntime(ctx, o.NodeName); err != nil {
				o.Log.Warn("cannot read the node's container runtime", "node", o.NodeName, "err", err)
			}
		}
		if o.CNIVersion == "" {
			inst.CNIVersion, inst.CNIVersions, inst.VersionReason = RuntimeCNIVersion(rt)
		}
	}
	if o.Mode == ModeThin {
		if err := o.writeCredentials(ctx, keys, inst); err != nil {
			return nil, err
		}
	}
	if err := o.writeConf(keys, inst); err != nil {
		return nil, err
	}
	o.Log.Info("multinet installed", "mode", o.Mode, "conf", inst.ConfPath, "cniVersion", inst.CNIVersion,
		"cniVersions", strings.Join(inst.CNIVersions, ","), "why", inst.VersionReason, "clusterNetwork", cfg.ClusterNetwork)
	return inst, nil
}

// RuntimeCNIVersion chooses the conflist's cniVersion and cniVersions for
// a container runtime as kubelet reports it (containerRuntimeVersion,
// "containerd://1.6.20"). The runtime parses the conflist and its plugins'
// results with the libcni it vendors: libcni v1.0–v1.1 (containerd 1.6/1.7,
// CRI-O 1.24–1.30) read only cniVersion and refuse 1.1.0 results; v1.2+
// (containerd 2.x, CRI-O 1.31+) pick the highest of cniVersion and
// cniVersions they know; libcni < 1.0 (containerd ≤ 1.5, CRI-O ≤ 1.23)
// knows nothing past 0.4.0. So: 0.4.0 for the old ones, else 1.0.0 with
// cniVersions [1.0.0, 1.1.0], which every newer runtime reads as 1.1.0.
func RuntimeCNIVersion(runtime string) (version string, versions []string, why string) {
	current := []string{spec.V100, spec.V110}
	name, ver, ok := strings.Cut(runtime, "://")
	if !ok || runtime == "" {
		return spec.V100, current, fmt.Sprintf("runtime unknown (%q): assuming libcni ≥ 1.0 (containerd ≥ 1.6, CRI-O ≥ 1.24); set cniVersion in the ConfigMap otherwise", runtime)
	}
	major, minor, okv := majorMinor(ver)
	old := func(maj, min int) bool { return okv && (major < maj || major == maj && minor < min) }
	switch name {
	case "containerd":
		if old(1, 6) {
			return spec.V040, nil, runtime + " vendors libcni < 1.0 (results up to 0.4.0)"
		}
	case "cri-o":
		if old(1, 24) {
			return spec.V040, nil, runtime + " vendors libcni < 1.0 (results up to 0.4.0)"
		}
	default:
		return spec.V100, current, fmt.Sprintf("runtime %s not known to multinet: assuming libcni ≥ 1.0; set cniVersion in the ConfigMap otherwise", runtime)
	}
	if !okv {
		return spec.V100, current, fmt.Sprintf("runtime %s: version not understood, assuming a current one", runtime)
	}
	return spec.V100, current, runtime + " vendors libcni ≥ 1.0: cniVersion 1.0.0 (libcni 1.0–1.1), cniVersions up to 1.1.0 (libcni ≥ 1.2)"
}

// majorMinor reads "1.6.20", "v1.7.13-k3s1", "2.0.0-rc.1".
func majorMinor(v string) (int, int, bool) {
	v = strings.TrimPrefix(v, "v")
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return 0, 0, false
	}
	digits := func(s string) string {
		i := 0
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		return s[:i]
	}
	maj, err1 := strconv.Atoi(digits(parts[0]))
	min, err2 := strconv.Atoi(digits(parts[1]))
	return maj, min, err1 == nil && err2 == nil
}

// InstallBinaries copies our binaries from src (the image's root) into
// bin: multinet, and the shim in thick mode (always replaced: these names
// are ours), patchbay-plugins and a link to it for each plugin type it
// reports, following policy. Every file and link is written beside its
// target and renamed over it, so a runtime executing the old file keeps
// running it and a new exec sees the old or the new file, never a partial
// one (and never ETXTBSY). It returns the names written and the plugin
// names left alone.
func InstallBinaries(src, bin, mode, policy string) (written, kept []string, err error) {
	names := []string{MultinetBinary}
	if mode == ModeThick {
		names = append(names, ShimBinary)
	}
	if policy != PluginsNone {
		names = append(names, PluginsBinary)
	}
	for _, n := range names {
		if err := install.AtomicCopy(filepath.Join(src, n), filepath.Join(bin, n)); err != nil {
			return written, kept, err
		}
		written = append(written, n)
	}
	if policy == PluginsNone {
		return written, nil, nil
	}
	types, err := pluginTypes(filepath.Join(src, PluginsBinary))
	if err != nil {
		return written, kept, err
	}
	for _, t := range types {
		dst := filepath.Join(bin, t)
		if policy == PluginsMissing && !freeOrOurs(dst) {
			kept = append(kept, t)
			continue
		}
		if err := linkAtomic(PluginsBinary, dst); err != nil {
			return written, kept, err
		}
		written = append(written, t)
	}
	return written, kept, nil
}

// pluginTypes asks the multi-call binary which types it holds.
func pluginTypes(path string) ([]string, error) {
	out, err := exec.Command(path, "types").Output()
	if err != nil {
		return nil, fmt.Errorf("%s types: %w", path, err)
	}
	types := strings.Fields(string(out))
	for _, t := range types {
		if t != filepath.Base(t) || t == "." || t == ".." || t == MultinetBinary || t == ShimBinary || t == PluginsBinary {
			return nil, fmt.Errorf("%s types: unexpected type %q", path, t)
		}
	}
	return types, nil
}

// freeOrOurs: nothing at path, or a link to patchbay-plugins.
func freeOrOurs(path string) bool {
	st, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return true
	}
	if err != nil || st.Mode()&fs.ModeSymlink == 0 {
		return false
	}
	target, err := os.Readlink(path)
	return err == nil && filepath.Base(target) == PluginsBinary
}

// linkAtomic makes dst a symbolic link to target, replacing whatever was
// there in one rename.
func linkAtomic(target, dst string) error {
	if cur, err := os.Readlink(dst); err == nil && cur == target {
		return nil
	}
	tmp := filepath.Join(filepath.Dir(dst), "."+filepath.Base(dst)+".tmp-link")
	os.Remove(tmp)
	if err := os.Symlink(target, tmp); err != nil {
		return fmt.Errorf("install %s: %w", dst, err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("install %s: %w", dst, err)
	}
	return nil
}

// writeCredentials gives the thin plugin, which the runtime runs on the
// host, a kubeconfig with a token file and the CA (multinet.d in ConfDir).
// The token is a node-bound TokenRequest when the apiserver grants one,
// else a copy of this pod's projected token (which dies with the pod: Watch
// keeps either fresh). A kubeconfig set in the configuration is used as it
// is instead.
func (o *NodeInstall) writeCredentials(ctx context.Context, keys map[string]json.RawMessage, inst *Installed) error {
	if _, ok := keys["kubeconfig"]; ok {
		inst.TokenSource = "the configuration's kubeconfig"
		return nil
	}
	dir := filepath.Join(o.ConfDir, CredentialsDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	ca, err := os.ReadFile(filepath.Join(o.SADir, "ca.crt"))
	if err != nil {
		return fmt.Errorf("thin mode needs the service account's CA: %w", err)
	}
	if err := atomicfile.Write(filepath.Join(dir, "ca.crt"), ca, 0o600, true); err != nil {
		return err
	}
	if err := o.refreshToken(ctx, inst, true); err != nil {
		return err
	}
	server := o.KubeServer
	if server == "" && o.API != nil {
		server = o.API.Server
	}
	if server == "" {
		return errors.New("thin mode: no apiserver URL for the kubeconfig (in-cluster environment missing; pass -kube-server)")
	}
	kc, err := json.MarshalIndent(map[string]any{
		"apiVersion":      "v1",
		"kind":            "Config",
		"current-context": "multinet",
		"clusters":        []any{map[string]any{"name": "cluster", "cluster": map[string]any{"server": server, "certificate-authority": "ca.crt"}}},
		"users":           []any{map[string]any{"name": "multinet", "user": map[string]any{"tokenFile": "token"}}},
		"contexts":        []any{map[string]any{"name": "multinet", "context": map[string]any{"cluster": "cluster", "user": "multinet"}}},
	}, "", "  ")
	if err != nil {
		return err
	}
	inst.Kubeconfig = filepath.Join(dir, KubeconfigName)
	// JSON is YAML: the kubeconfig is read by a YAML reader.
	return atomicfile.Write(inst.Kubeconfig, append(kc, '\n'), 0o600, true)
}

// refreshToken writes the token file when it is due: a node-bound token
// at half its lifetime, a copied pod token when kubelet rotated it.
func (o *NodeInstall) refreshToken(ctx context.Context, inst *Installed, first bool) error {
	path := filepath.Join(o.ConfDir, CredentialsDir, "token")
	if !first && !inst.tokenRenew.IsZero() && time.Now().Before(inst.tokenRenew) {
		if _, err := os.Stat(path); err == nil {
			return nil
		}
	}
	if o.API != nil && o.NodeName != "" && inst.nodeUID != "" && (first || inst.TokenSource == tokenNodeBound) {
		tok, exp, err := o.API.NodeToken(ctx, o.NodeName, inst.nodeUID, o.TokenLifetime)
		if err == nil {
			if err := atomicfile.Write(path, []byte(tok), 0o600, true); err != nil {
				return err
			}
			issued := time.Now()
			if exp.IsZero() || exp.Before(issued) {
				exp = issued.Add(o.TokenLifetime)
			}
			inst.TokenSource, inst.tokenRenew = tokenNodeBound, issued.Add(exp.Sub(issued)/2)
			o.Log.Info("thin plugin token written", "source", inst.TokenSource, "expires", exp.UTC().Format(time.RFC3339), "renew", inst.tokenRenew.UTC().Format(time.RFC3339))
			return nil
		}
		if !first {
			return fmt.Errorf("renewing the node-bound token: %w", err)
		}
		o.Log.Warn("no node-bound token (Kubernetes < 1.31, or RBAC without serviceaccounts/token create): the thin plugin gets this pod's token, which stops working when this pod is deleted", "err", err)
	}
	b, err := os.ReadFile(filepath.Join(o.SADir, "token"))
	if err != nil {
		return fmt.Errorf("thin mode needs the service account token: %w", err)
	}
	if _, err := os.Stat(path); err == nil && bytes.Equal(b, inst.projected) {
		return nil
	}
	if err := atomicfile.Write(path, b, 0o600, true); err != nil {
		return err
	}
	inst.TokenSource, inst.projected, inst.tokenRenew = tokenPod, b, time.Time{}
	o.Log.Info("thin plugin token written", "source", inst.TokenSource)
	return nil
}

// conf renders multinet's conflist: thin, the multinet plugin with the
// configuration's keys (and the kubeconfig written for it); thick, the
// shim with the daemon's socket directory and the capabilities.
func (o *NodeInstall) conf(keys map[string]json.RawMessage, inst *Installed) ([]byte, error) {
	plugin := map[string]json.RawMessage{}
	str := func(s string) json.RawMessage { b, _ := json.Marshal(s); return b }
	switch o.Mode {
	case ModeThin:
		for k, v := range keys {
			plugin[k] = v
		}
		plugin["type"] = str(MultinetBinary)
		if inst.Kubeconfig != "" {
			plugin["kubeconfig"] = str(inst.Kubeconfig)
		}
	case ModeThick:
		plugin["type"] = str(ShimType)
		// The daemon's socket directory: daemonSocketDir, or Multus's
		// socketDir (the daemon reads either).
		plugin["daemonSocketDir"] = str(DefaultDaemonSocketDir)
		for _, k := range []string{"socketDir", "daemonSocketDir"} {
			if v, ok := keys[k]; ok {
				plugin["daemonSocketDir"] = v
			}
		}
		if v, ok := keys["capabilities"]; ok {
			plugin["capabilities"] = v
		}
	}
	p, err := json.Marshal(plugin)
	if err != nil {
		return nil, err
	}
	l := struct {
		CNIVersion  string            `json:"cniVersion"`
		CNIVersions []string          `json:"cniVersions,omitempty"`
		Name        string            `json:"name"`
		Plugins     []json.RawMessage `json:"plugins"`
	}{inst.CNIVersion, inst.CNIVersions, "multinet", []json.RawMessage{p}}
	b, err := json.MarshalIndent(l, "", "  ")
	if err != nil {
		return nil, err
	}
	// What the runtime will read must parse (the version pair included).
	if _, err := spec.ParseConfList(b); err != nil {
		return nil, fmt.Errorf("multinet's conflist would not load: %w", err)
	}
	return append(b, '\n'), nil
}

// writeConf writes the conflist under the name that sorts first and
// removes other multinet conflists, unless the right file is there already.
func (o *NodeInstall) writeConf(keys map[string]json.RawMessage, inst *Installed) error {
	data, err := o.conf(keys, inst)
	if err != nil {
		return err
	}
	name, ours, err := confName(o.ConfDir)
	if err != nil {
		return err
	}
	inst.ConfPath = filepath.Join(o.ConfDir, name)
	if cur, err := os.ReadFile(inst.ConfPath); err != nil || !bytes.Equal(cur, data) {
		if err := writeAtomic(inst.ConfPath, data); err != nil {
			return err
		}
	}
	for _, p := range ours {
		if p != inst.ConfPath {
			if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
			o.Log.Info("removed an older multinet configuration", "path", p)
		}
	}
	return nil
}

// confFiles lists dir's configuration files as the runtime's libcni does
// (.conf, .conflist, .json, sorted by name) and tells ours apart (a plugin
// of type multinet or multinet-shim).
func confFiles(dir string) (others, ours []string, err error) {
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, err
	}
	var names []string
	for _, de := range des {
		switch filepath.Ext(de.Name()) {
		case ".conf", ".conflist", ".json":
			if !de.IsDir() {
				names = append(names, de.Name())
			}
		}
	}
	sort.Strings(names)
	for _, n := range names {
		p := filepath.Join(dir, n)
		if isOurConf(p) {
			ours = append(ours, p)
		} else {
			others = append(others, p)
		}
	}
	return others, ours, nil
}

func isOurConf(path string) bool {
	l, err := loadConfFile(path)
	return err == nil && isMultinet(l)
}

// confName is the name multinet's conflist gets in dir: ConfName, or, if
// another configuration's name sorts before it, a name that sorts before
// that one (its prefix up to its first character above '0', then "0"), so
// the runtime, which uses the first file, uses ours. It also returns the
// paths of our configurations there now.
func confName(dir string) (string, []string, error) {
	others, ours, err := confFiles(dir)
	if err != nil {
		return "", nil, err
	}
	if len(others) == 0 || ConfName < filepath.Base(others[0]) {
		return ConfName, ours, nil
	}
	first := filepath.Base(others[0])
	i := 0
	for i < len(first) && first[i] <= '0' {
		i++
	}
	// Every configuration name ends in a letter (its extension), so i is
	// inside the name and first[:i] + "0" < first.
	return first[:i] + "0-multinet.conflist", ours, nil
}

// InstalledConf reports whether a multinet configuration is the one the
// runtime uses in dir (the first), for a readiness probe.
func InstalledConf(dir string) (string, bool) {
	others, ours, err := confFiles(dir)
	if err != nil || len(ours) == 0 {
		return "", false
	}
	if len(others) > 0 && filepath.Base(others[0]) < filepath.Base(ours[0]) {
		return ours[0], false
	}
	return ours[0], true
}

// Watch keeps the installation right until ctx ends (thin mode's
// long-running container): every interval it renews the thin plugin's
// token when due, and rewrites the conflist if it was removed, changed,
// or no longer sorts first (another configuration appeared before it).
func Watch(ctx context.Context, o *NodeInstall, inst *Installed, interval time.Duration) error {
	_, keys, err := o.parse()
	if err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(interval):
		}
		if o.Mode == ModeThin && inst.Kubeconfig != "" {
			if err := o.refreshToken(ctx, inst, false); err != nil {
				o.Log.Error("token renewal failed; retrying", "err", err)
			}
		}
		if err := o.writeConf(keys, inst); err != nil {
			o.Log.Error("cannot rewrite multinet's configuration", "err", err)
		}
	}
}

// Uninstall removes multinet's configurations from confDir (so the runtime
// goes back to the cluster network alone for new pods) and the thin
// plugin's credentials; with bin set, also our binaries there (multinet,
// the shim, patchbay-plugins and the links to it). Pods attached before
// keep their interfaces until deleted; DEL then runs without multinet, so
// their secondary attachments are not undone: delete such pods first.
func Uninstall(confDir, bin string) ([]string, error) {
	_, ours, err := confFiles(confDir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	var removed []string
	var errs []error
	rm := func(p string) {
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, err)
			return
		}
		removed = append(removed, p)
	}
	for _, p := range ours {
		rm(p)
	}
	if _, err := os.Stat(filepath.Join(confDir, CredentialsDir)); err == nil {
		rm(filepath.Join(confDir, CredentialsDir))
	}
	if bin != "" {
		des, _ := os.ReadDir(bin)
		for _, de := range des {
			p := filepath.Join(bin, de.Name())
			if n := de.Name(); n == MultinetBinary || n == ShimBinary || n == PluginsBinary || (de.Type()&fs.ModeSymlink != 0 && freeOrOurs(p)) {
				rm(p)
			}
		}
	}
	return removed, errors.Join(errs...)
}
