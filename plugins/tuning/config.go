package tuning

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"os"
	"regexp"
	"slices"
	"strings"

	"github.com/patchbay-cni/patchbay/internal/confcheck"
	"github.com/patchbay-cni/patchbay/skel"
	"github.com/patchbay-cni/patchbay/spec"
)

// Defaults of the reference tuning plugin v1.9.1.
const defaultDataDir = "/run/cni/tuning"

// allowlistPath is the reference's optional sysctl allowlist (one regular
// expression per line). A variable so tests can point it elsewhere.
var allowlistPath = "/etc/cni/tuning/allowlist.conf"

// netConf holds the tuning keys. Pointers tell "unset" from a zero value.
type netConf struct {
	// DataDir holds the saved previous values (reference key, default
	// /run/cni/tuning).
	DataDir  string            `json:"dataDir,omitempty"`
	SysCtl   map[string]string `json:"sysctl"`
	Promisc  *bool             `json:"promisc,omitempty"`
	MTU      int               `json:"mtu,omitempty"`
	TxQLen   *int              `json:"txQLen,omitempty"`
	Allmulti *bool             `json:"allmulti,omitempty"`

	// "mac", runtimeConfig.mac and CNI_ARGS MAC are read by
	// skel.RequestedMAC.
	Args *struct {
		CNI *cniArgs `json:"cni"`
	} `json:"args"`
}

// cniArgs is args.cni: each key overrides the plugin key of the same name.
type cniArgs struct {
	SysCtl   map[string]string `json:"sysctl"`
	Mac      *string           `json:"mac,omitempty"`
	Promisc  *bool             `json:"promisc,omitempty"`
	MTU      *int              `json:"mtu,omitempty"`
	Allmulti *bool             `json:"allmulti,omitempty"`
	TxQLen   *int              `json:"txQLen,omitempty"`
}

// envArgs is CNI_ARGS: MAC=... (read by skel.RequestedMAC); decoding it
// refuses other keys unless IgnoreUnknown is set, as the reference does.
type envArgs struct {
	MAC string
}

// config is the effective, validated configuration.
type config struct {
	dataDir  string
	sysctls  []sysctl // sorted by key
	mac      net.HardwareAddr
	macFrom  string // which key the MAC came from, for messages
	promisc  *bool
	mtu      int
	txQLen   *int
	allmulti *bool
}

// changesLink reports whether any link attribute is configured.
func (c *config) changesLink() bool {
	return c.mac != nil || c.promisc != nil || c.mtu != 0 || c.txQLen != nil || c.allmulti != nil
}

// load decodes and validates the configuration. The MAC comes from, lowest
// precedence first: "mac", CNI_ARGS MAC, runtimeConfig.mac (capability
// "mac"), args.cni.mac — the reference's order. Sysctl keys are checked
// here for their shape; whether one exists in the container's namespace is
// checked there.
func load(a *skel.CmdArgs) (*config, error) {
	if err := checkDuplicateSysctls(a.StdinData); err != nil {
		return nil, err
	}
	var n netConf
	if err := a.DecodeConf(&n); err != nil {
		return nil, err
	}
	c := &config{dataDir: n.DataDir, promisc: n.Promisc, mtu: n.MTU, txQLen: n.TxQLen, allmulti: n.Allmulti}
	if c.dataDir == "" {
		c.dataDir = defaultDataDir
	}
	sysctls := map[string]string{}
	for k, v := range n.SysCtl {
		sysctls[k] = v
	}
	var mtuFromArgs, txQLenFromArgs bool

	var ea envArgs
	if err := a.LoadArgs(&ea); err != nil {
		return nil, err
	}
	// An args.cni.mac that is present but empty asks for no MAC whatever
	// the other places say (the reference's override).
	if n.Args == nil || n.Args.CNI == nil || n.Args.CNI.Mac == nil || *n.Args.CNI.Mac != "" {
		mac, from, err := a.RequestedMAC(skel.MACKey, skel.MACCNIArgs, skel.MACRuntimeConfig, skel.MACArgs)
		if err != nil {
			return nil, err
		}
		c.mac, c.macFrom = mac, string(from)
	}
	if n.Args != nil && n.Args.CNI != nil {
		ca := n.Args.CNI
		for k, v := range ca.SysCtl {
			sysctls[k] = v
		}
		if ca.Promisc != nil {
			c.promisc = ca.Promisc
		}
		if ca.MTU != nil {
			c.mtu, mtuFromArgs = *ca.MTU, true
		}
		if ca.Allmulti != nil {
			c.allmulti = ca.Allmulti
		}
		if ca.TxQLen != nil {
			c.txQLen, txQLenFromArgs = ca.TxQLen, true
		}
	}

	// The kernel takes the MTU as an int and txQLen as a u32: larger values
	// would be truncated into other ones.
	if err := confcheck.Int(keyOf("mtu", mtuFromArgs), int64(c.mtu), 0, confcheck.MaxMTU); err != nil {
		return nil, err
	}
	if c.txQLen != nil {
		if err := confcheck.Int(keyOf("txQLen", txQLenFromArgs), int64(*c.txQLen), 0, confcheck.MaxU32); err != nil {
			return nil, err
		}
	}
	if strings.ContainsRune(c.dataDir, 0) {
		return nil, spec.Errorf(spec.ErrInvalidNetworkConfig, "dataDir %q is invalid: contains a NUL byte", c.dataDir)
	}

	allow, err := readAllowlist()
	if err != nil {
		return nil, err
	}
	for _, k := range slices.Sorted(maps.Keys(sysctls)) {
		s, err := parseSysctl(k, sysctls[k], a.IfName)
		if err != nil {
			return nil, err
		}
		if allow != nil && !allowed(k, allow) {
			return nil, spec.Errorf(spec.ErrInvalidNetworkConfig, "sysctl %q (value %q) is not allowed by %s", k, sysctls[k], allowlistPath)
		}
		c.sysctls = append(c.sysctls, s)
	}
	return c, nil
}

// checkDuplicateSysctls refuses a "sysctl" object naming a key twice (JSON
// decoding would silently keep the last), as the reference does.
func checkDuplicateSysctls(data []byte) error {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		return nil // DecodeConf reports it
	}
	raw, ok := top["sysctl"]
	if !ok {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil // null, or not an object: DecodeConf reports a wrong type
	}
	seen := map[string]bool{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil
		}
		k, _ := t.(string)
		if seen[k] {
			return spec.Errorf(spec.ErrInvalidNetworkConfig, "sysctl key %q appears more than once", k)
		}
		seen[k] = true
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return nil
		}
	}
	return nil
}

// readAllowlist returns the allowlist's patterns, or nil when there is no
// allowlist file (then every valid key is allowed).
func readAllowlist() ([]*regexp.Regexp, error) {
	data, err := os.ReadFile(allowlistPath)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, spec.Errorf(spec.ErrIOFailure, "read sysctl allowlist: %v", err)
	}
	out := []*regexp.Regexp{}
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		re, err := regexp.Compile(line)
		if err != nil {
			return nil, spec.Errorf(spec.ErrInvalidNetworkConfig, "%s line %d: invalid pattern %q: %v", allowlistPath, i+1, line, err)
		}
		out = append(out, re)
	}
	return out, nil
}

// allowed matches the key as written, unanchored, like the reference.
func allowed(key string, allow []*regexp.Regexp) bool {
	for _, re := range allow {
		if re.MatchString(key) {
			return true
		}
	}
	return false
}

func boolStr(b bool) string { return fmt.Sprint(b) }

// keyOf names a link key for messages: args.cni.<key> when args.cni set it.
func keyOf(key string, fromArgs bool) string {
	if fromArgs {
		return "args.cni." + key
	}
	return key
}
