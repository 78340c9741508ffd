// Package plugin is the multinet CNI delegating plugin (multi-net spec v1.3):
// configuration, the ADD/DEL/CHECK/GC/STATUS verbs, the per-container cache
// and lock, and the install (readiness) command.
package plugin

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/patchbay-cni/patchbay/spec"
)

// Defaults (the same as Multus where Multus has the key).
const (
	DefaultConfDir          = "/etc/cni/multus/net.d"
	DefaultCNIDir           = "/var/lib/cni/multus"
	DefaultBinDir           = "/opt/cni/bin"
	DefaultMultusNamespace  = "kube-system"
	DefaultGlobalNamespace  = "default"
	DefaultReadinessTimeout = 45 * time.Second
	DefaultAPITimeout       = 10 * time.Second
	DefaultInterfacePrefix  = "net"
	statusWriteAttempts     = 5
	// MaxTimeoutSeconds is the largest number of seconds a time.Duration
	// holds (about 292 years).
	MaxTimeoutSeconds = math.MaxInt64 / int(time.Second)
)

// Config is multinet's own CNI configuration (the object the runtime hands us).
type Config struct {
	spec.NetConf
	// Kubeconfig is the file to reach the apiserver; empty means in-cluster
	// (service account), and without either only the cluster network is
	// attached.
	Kubeconfig string `json:"kubeconfig,omitempty"`
	// ClusterNetwork is the cluster-wide default network: an absolute path
	// to a .conf/.conflist file or to a directory (its first configuration
	// file, in name order), else a network name in ConfDir, else a
	// NetworkAttachmentDefinition "name" (in MultusNamespace) or "ns/name".
	ClusterNetwork string `json:"clusterNetwork"`
	// DefaultNetworks are attached to every pod (except those of
	// SystemNamespaces) after the cluster network, before the annotation's:
	// NetworkAttachmentDefinitions "name" (in MultusNamespace) or "ns/name".
	DefaultNetworks []string `json:"defaultNetworks,omitempty"`
	// ConfDir holds on-disk configurations for NetworkAttachmentDefinitions
	// without spec.config (§3.4.1 rules 2 and 3) and cluster network names.
	ConfDir string `json:"confDir,omitempty"`
	// CNIDir is the cache: per-container plan files, locks, and the
	// delegates' result cache (CNIDir/results).
	CNIDir string `json:"cniDir,omitempty"`
	// BinDir is searched for delegate plugins before the runtime's CNI_PATH.
	BinDir string `json:"binDir,omitempty"`
	// NamespaceIsolation restricts pods to NetworkAttachmentDefinitions of
	// their own namespace and GlobalNamespaces (§7.4).
	NamespaceIsolation bool `json:"namespaceIsolation,omitempty"`
	// GlobalNamespaces is a comma-separated list (Multus's format; a JSON
	// list is accepted too). Unset or empty means ["default"], Multus's
	// default, so that a Multus configuration keeps its meaning.
	GlobalNamespaces stringList `json:"globalNamespaces,omitempty"`
	// ReadinessIndicatorFile must exist before the cluster network counts
	// as ready (§6.1): ADD waits for it up to ReadinessTimeout, STATUS
	// reports code 50 without it, and `multinet install` waits for it.
	ReadinessIndicatorFile string `json:"readinessindicatorfile,omitempty"`
	// ReadinessTimeoutSeconds bounds ADD's wait; 0 means 45 s.
	ReadinessTimeoutSeconds int    `json:"readinessTimeoutSeconds,omitempty"`
	LogFile                 string `json:"logFile,omitempty"`
	// LogLevel: debug, verbose (= info), error, panic (= error only), or
	// the slog names; warn is the default.
	LogLevel        string `json:"logLevel,omitempty"`
	LogToStderr     bool   `json:"logToStderr,omitempty"`
	MultusNamespace string `json:"multusNamespace,omitempty"`
	// SystemNamespaces get only the cluster network (no defaultNetworks),
	// as in Multus; nil means ["kube-system"].
	SystemNamespaces []string `json:"systemNamespaces,omitempty"`
	// APITimeoutSeconds bounds each apiserver request; 0 means 10 s.
	APITimeoutSeconds int `json:"apiTimeoutSeconds,omitempty"`
	// AsyncNetworkStatus writes the network-status annotation from a
	// detached process after ADD returned, instead of before: ADD is
	// faster, but a failed write is only logged.
	AsyncNetworkStatus bool `json:"asyncNetworkStatus,omitempty"`
	// InterfacePrefix names generated secondary interfaces (net1, net2, ...).
	InterfacePrefix string `json:"interfacePrefix,omitempty"`
	// NADPolicy is the operator policy for NetworkAttachmentDefinitions
	// outside the exempt namespaces (multinet/policy); unset means the
	// built-in policy. NADPolicyFile is the same in a file (JSON or YAML,
	// read again when it changes); give one of the two. Neither is read
	// before an ADD needs it.
	NADPolicy     json.RawMessage `json:"nadPolicy,omitempty"`
	NADPolicyFile string          `json:"nadPolicyFile,omitempty"`
	// RuntimeConfig is what the runtime passes for our declared
	// capabilities; it goes to the cluster network only (§7.5).
	RuntimeConfig map[string]json.RawMessage `json:"runtimeConfig,omitempty"`
	// Args is the runtime's "args" (CONVENTIONS); unused, kept for logs.
	Args json.RawMessage `json:"args,omitempty"`
}

// stringList accepts "a,b" or ["a","b"].
type stringList []string

func (s *stringList) UnmarshalJSON(b []byte) error {
	var str string
	if err := json.Unmarshal(b, &str); err == nil {
		*s = nil
		for _, part := range strings.Split(str, ",") {
			if part = strings.TrimSpace(part); part != "" {
				*s = append(*s, part)
			}
		}
		return nil
	}
	var list []string
	if err := json.Unmarshal(b, &list); err != nil {
		return fmt.Errorf("\"globalNamespaces\" must be a comma-separated string or a list of strings (got %s)", b)
	}
	*s = list
	return nil
}

// ParseConfig decodes and validates our configuration, filling defaults.
func ParseConfig(data []byte) (*Config, error) {
	var c Config
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, spec.NewError(spec.ErrDecodingFailure, "failed to decode the configuration", err.Error())
	}
	if c.ClusterNetwork == "" {
		return nil, spec.Errorf(spec.ErrInvalidNetworkConfig, "\"clusterNetwork\" is required (a NetworkAttachmentDefinition name, a network name in confDir, or a conf/conflist file or directory path)")
	}
	if c.ConfDir == "" {
		c.ConfDir = DefaultConfDir
	}
	if c.CNIDir == "" {
		c.CNIDir = DefaultCNIDir
	}
	if c.MultusNamespace == "" {
		c.MultusNamespace = DefaultMultusNamespace
	}
	if len(c.GlobalNamespaces) == 0 {
		c.GlobalNamespaces = []string{DefaultGlobalNamespace}
	}
	if c.SystemNamespaces == nil {
		c.SystemNamespaces = []string{"kube-system"}
	}
	if c.InterfacePrefix == "" {
		c.InterfacePrefix = DefaultInterfacePrefix
	}
	if c.ReadinessTimeoutSeconds < 0 || c.APITimeoutSeconds < 0 {
		return nil, spec.Errorf(spec.ErrInvalidNetworkConfig, "readinessTimeoutSeconds and apiTimeoutSeconds must not be negative (got %d, %d)", c.ReadinessTimeoutSeconds, c.APITimeoutSeconds)
	}
	// Larger values overflow time.Duration into a negative timeout: every
	// ADD would fail at once instead of waiting.
	for _, k := range []struct {
		key string
		v   int
	}{{"readinessTimeoutSeconds", c.ReadinessTimeoutSeconds}, {"apiTimeoutSeconds", c.APITimeoutSeconds}} {
		if k.v > MaxTimeoutSeconds {
			return nil, spec.Errorf(spec.ErrInvalidNetworkConfig, "%q %d is too large (at most %d)", k.key, k.v, MaxTimeoutSeconds)
		}
	}
	if _, err := parseLevel(c.LogLevel); err != nil {
		return nil, spec.Errorf(spec.ErrInvalidNetworkConfig, "\"logLevel\" %q: %v", c.LogLevel, err)
	}
	return &c, nil
}

func (c *Config) readinessTimeout() time.Duration {
	if c.ReadinessTimeoutSeconds > 0 {
		return time.Duration(c.ReadinessTimeoutSeconds) * time.Second
	}
	return DefaultReadinessTimeout
}

func (c *Config) apiTimeout() time.Duration { return c.APITimeout() }

// APITimeout bounds each apiserver request.
func (c *Config) APITimeout() time.Duration {
	if c.APITimeoutSeconds > 0 {
		return time.Duration(c.APITimeoutSeconds) * time.Second
	}
	return DefaultAPITimeout
}

// capabilityArgs decodes the runtime's runtimeConfig for the cluster network.
func (c *Config) capabilityArgs() map[string]any {
	if len(c.RuntimeConfig) == 0 {
		return nil
	}
	out := make(map[string]any, len(c.RuntimeConfig))
	for k, v := range c.RuntimeConfig {
		out[k] = v
	}
	return out
}
