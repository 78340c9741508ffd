package daemon

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"time"

	"github.com/patchbay-cni/patchbay/multinet/plugin"
	"github.com/patchbay-cni/patchbay/multinet/shim"
)

// Defaults of the daemon's own keys.
const (
	DefaultConfigFile      = "/etc/cni/net.d/multinet.d/daemon-config.json"
	DefaultMetricsAddress  = "127.0.0.1:9091"
	DefaultMaxParallel     = 16
	DefaultRequestTimeout  = 5 * time.Minute
	DefaultShutdownTimeout = 30 * time.Second
)

// Config is the daemon's configuration file: Multus thick's daemon-config
// keys where Multus has them, the daemon's own, and every key of multinet's
// CNI configuration (clusterNetwork, confDir, cniDir, ...), which applies to
// every request as if the node's conflist held it.
type Config struct {
	// SocketDir holds the socket (multinet.sock) the shims connect to:
	// "socketDir" (Multus's daemon key) or "daemonSocketDir" (the shim's
	// key, accepted here too so that one value can be copied).
	SocketDir string `json:"-"`
	// ChrootDir, when set, is the host's root as the daemon sees it: the
	// delegates run chrooted there and binDir and CNI_PATH are host paths
	// (Multus's "chrootDir"). multinet's own paths are read in the
	// daemon's file system either way.
	ChrootDir string `json:"chrootDir"`
	// MetricsAddress is the metrics, /healthz and /readyz listener;
	// metricsPort (Multus's key) replaces its port.
	MetricsAddress string `json:"metricsAddress"`
	MetricsPort    *int   `json:"metricsPort"`
	// Kubeconfig reaches the apiserver; empty means the in-cluster service
	// account. Its token (or tokenFile) is re-read when the file changes.
	Kubeconfig string `json:"kubeconfig"`
	// NodeName overrides the node name (flag -node-name, NODE_NAME, the
	// hostname, in that order).
	NodeName string `json:"nodeName"`
	// MaxParallelRequests bounds the requests run at once; later ones
	// wait their turn.
	MaxParallelRequests int `json:"maxParallelRequests"`
	// RequestTimeoutSeconds bounds one request (delegates included).
	RequestTimeoutSeconds int `json:"requestTimeoutSeconds"`
	// ShutdownTimeoutSeconds bounds the wait for in-flight requests after
	// SIGTERM.
	ShutdownTimeoutSeconds int    `json:"shutdownTimeoutSeconds"`
	LogFile                string `json:"logFile"`
	LogLevel               string `json:"logLevel"`
	LogToStderr            bool   `json:"logToStderr"`

	// delegation is multinet's configuration: every key but the daemon's
	// own and the per-request ones.
	delegation map[string]json.RawMessage
	// Plugin is delegation parsed (defaults filled), for the daemon's use.
	// Neither it nor Ignored is a key of the file: without the tags, a
	// file's "plugin" or "ignored" key would fill them.
	Plugin *plugin.Config `json:"-"`
	// Ignored lists keys of the file that the daemon does not use.
	Ignored []string `json:"-"`
}

// daemonKeys are the daemon's own keys (not passed to the verbs).
var daemonKeys = map[string]bool{
	"socketDir": true, "daemonSocketDir": true, "chrootDir": true, "metricsAddress": true, "metricsPort": true,
	"kubeconfig": true, "nodeName": true, "maxParallelRequests": true, "requestTimeoutSeconds": true,
	"shutdownTimeoutSeconds": true,
}

// requestKeys belong to each request's configuration (the node's conflist
// as the runtime passes it); the daemon's file does not override them.
// Multus's daemon files carry some of them ("cniVersion"), and the keys of
// Multus's installer, which the daemon has no use for.
var requestKeys = map[string]bool{
	"cniVersion": true, "cniVersions": true, "name": true, "type": true, "capabilities": true,
	"runtimeConfig": true, "prevResult": true, "args": true, "plugins": true,
	"cniConfigDir": true, "multusConfigFile": true, "multusAutoconfigDir": true, "multusMasterCNI": true,
	"forceCNIVersion": true, "overrideNetworkName": true,
}

// LoadConfig reads and checks the daemon's configuration file.
func LoadConfig(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("daemon configuration: %w", err)
	}
	c, err := ParseConfig(data)
	if err != nil {
		return nil, fmt.Errorf("daemon configuration %s: %w", path, err)
	}
	return c, nil
}

// ParseConfig decodes and checks a daemon configuration; errors name the key.
func ParseConfig(data []byte) (*Config, error) {
	var all map[string]json.RawMessage
	if err := json.Unmarshal(data, &all); err != nil {
		return nil, fmt.Errorf("not a JSON object: %v", err)
	}
	var c Config
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, err
	}
	var socketDir, daemonSocketDir string
	if err := str(all, "socketDir", &socketDir); err != nil {
		return nil, err
	}
	if err := str(all, "daemonSocketDir", &daemonSocketDir); err != nil {
		return nil, err
	}
	switch {
	case socketDir != "" && daemonSocketDir != "" && socketDir != daemonSocketDir:
		return nil, fmt.Errorf("\"socketDir\" %q and \"daemonSocketDir\" %q differ: give one", socketDir, daemonSocketDir)
	case socketDir != "":
		c.SocketDir = socketDir
	case daemonSocketDir != "":
		c.SocketDir = daemonSocketDir
	default:
		c.SocketDir = shim.DefaultSocketDir
	}
	if c.MetricsAddress == "" {
		c.MetricsAddress = DefaultMetricsAddress
	}
	host, port, err := net.SplitHostPort(c.MetricsAddress)
	if err != nil {
		return nil, fmt.Errorf("\"metricsAddress\" %q: %v", c.MetricsAddress, err)
	}
	if c.MetricsPort != nil {
		if *c.MetricsPort < 0 || *c.MetricsPort > 65535 {
			return nil, fmt.Errorf("\"metricsPort\" %d is not a port", *c.MetricsPort)
		}
		port = strconv.Itoa(*c.MetricsPort)
	}
	c.MetricsAddress = net.JoinHostPort(host, port)
	// The port (a number or a service name) is checked here: the start
	// would otherwise fail at the listener, without naming the key.
	if _, err := net.LookupPort("tcp", port); err != nil {
		return nil, fmt.Errorf("\"metricsAddress\" %q: %v", c.MetricsAddress, err)
	}
	if c.MaxParallelRequests < 0 || c.RequestTimeoutSeconds < 0 || c.ShutdownTimeoutSeconds < 0 {
		return nil, fmt.Errorf("\"maxParallelRequests\" %d, \"requestTimeoutSeconds\" %d, \"shutdownTimeoutSeconds\" %d: none may be negative",
			c.MaxParallelRequests, c.RequestTimeoutSeconds, c.ShutdownTimeoutSeconds)
	}
	// Larger values overflow time.Duration into a negative timeout: every
	// request would fail at once.
	if c.RequestTimeoutSeconds > plugin.MaxTimeoutSeconds || c.ShutdownTimeoutSeconds > plugin.MaxTimeoutSeconds {
		return nil, fmt.Errorf("\"requestTimeoutSeconds\" %d, \"shutdownTimeoutSeconds\" %d: at most %d",
			c.RequestTimeoutSeconds, c.ShutdownTimeoutSeconds, plugin.MaxTimeoutSeconds)
	}
	if c.MaxParallelRequests == 0 {
		c.MaxParallelRequests = DefaultMaxParallel
	}
	if c.ChrootDir != "" {
		if st, err := os.Stat(c.ChrootDir); err != nil || !st.IsDir() {
			return nil, fmt.Errorf("\"chrootDir\" %q is not a directory", c.ChrootDir)
		}
		// Host paths are mapped into it and back by prefix (inRoot,
		// unchroot): "/host/" must be "/host".
		c.ChrootDir = filepath.Clean(c.ChrootDir)
	}
	c.delegation = map[string]json.RawMessage{}
	for k, v := range all {
		switch {
		case daemonKeys[k]:
		case requestKeys[k]:
			c.Ignored = append(c.Ignored, k)
		default:
			c.delegation[k] = v
		}
	}
	sort.Strings(c.Ignored)
	// The verbs' own check, on a request-like configuration: a bad key
	// fails the daemon's start, not every pod.
	sample, err := c.RequestConfig([]byte(`{"cniVersion":"1.1.0","name":"multinet"}`))
	if err != nil {
		return nil, err
	}
	if c.Plugin, err = plugin.ParseConfig(sample); err != nil {
		return nil, err
	}
	// The NAD policy too (a file is read again whenever it changes; a
	// later broken version fails only the pods it applies to).
	if _, err := c.Plugin.Policy(); err != nil {
		return nil, err
	}
	return &c, nil
}

func str(m map[string]json.RawMessage, key string, into *string) error {
	v, ok := m[key]
	if !ok {
		return nil
	}
	if err := json.Unmarshal(v, into); err != nil {
		return fmt.Errorf("%q: must be a string (got %s)", key, v)
	}
	return nil
}

// RequestConfig is the configuration a request's verbs run with: the
// request's (the shim's conflist entry: cniVersion, name, capabilities,
// runtimeConfig, prevResult, ...) with type "multinet", without the shim's
// keys, and with every multinet key of the daemon's file, which win.
func (c *Config) RequestConfig(req []byte) ([]byte, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(req, &m); err != nil || m == nil {
		return nil, fmt.Errorf("the network configuration is not a JSON object")
	}
	delete(m, "daemonSocketDir")
	m["type"] = json.RawMessage(`"multinet"`)
	for k, v := range c.delegation {
		m[k] = v
	}
	if c.ChrootDir != "" {
		// binDir names a host directory: found through the chroot.
		var bin string
		if err := str(m, "binDir", &bin); err != nil {
			return nil, err
		}
		if bin != "" {
			m["binDir"], _ = json.Marshal(inRoot(c.ChrootDir, bin))
		}
	}
	return json.Marshal(m)
}

// inRoot is where the host path p is under root: the path as the host
// resolves it, so that ".." cannot climb out of root and a relative path
// does not run into root's name ("/host" + "bin").
func inRoot(root, p string) string {
	return filepath.Join(root, filepath.Clean("/"+p))
}

func (c *Config) requestTimeout() time.Duration {
	if c.RequestTimeoutSeconds > 0 {
		return time.Duration(c.RequestTimeoutSeconds) * time.Second
	}
	return DefaultRequestTimeout
}

func (c *Config) shutdownTimeout() time.Duration {
	if c.ShutdownTimeoutSeconds > 0 {
		return time.Duration(c.ShutdownTimeoutSeconds) * time.Second
	}
	return DefaultShutdownTimeout
}
