package spec

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// NetConf holds the keys of a plugin configuration object that the protocol
// and the well-known conventions define. Plugins embed it in their own config
// struct; runtimes read it from PluginConf.Network.
type NetConf struct {
	CNIVersion   string          `json:"cniVersion,omitempty"`
	Name         string          `json:"name,omitempty"`
	Type         string          `json:"type,omitempty"`
	Capabilities map[string]bool `json:"capabilities,omitempty"`
	IPAM         IPAM            `json:"ipam,omitzero"`
	DNS          DNS             `json:"dns,omitzero"`

	// RawPrevResult is the prevResult as given; PrevResult is filled by the
	// plugin SDK after decoding it in the config's version.
	RawPrevResult json.RawMessage `json:"prevResult,omitempty"`
	PrevResult    *Result         `json:"-"`

	// ValidAttachments is GC's list; the SDK also accepts the older key
	// cni.dev/attachments and merges it here.
	ValidAttachments []Attachment `json:"cni.dev/valid-attachments,omitempty"`
	OldAttachments   []Attachment `json:"cni.dev/attachments,omitempty"`
}

// IPAM is the common part of the ipam dictionary.
type IPAM struct {
	Type string `json:"type,omitempty"`
}

// Attachment names one attachment: (CNI_CONTAINERID, CNI_IFNAME).
type Attachment struct {
	ContainerID string `json:"containerID"`
	IfName      string `json:"ifname"`
}

// Attachments returns GC's valid attachments from either key.
func (n *NetConf) Attachments() []Attachment {
	if len(n.ValidAttachments) > 0 {
		return n.ValidAttachments
	}
	return n.OldAttachments
}

// Keys the runtime writes into request configurations.
const (
	KeyValidAttachments = "cni.dev/valid-attachments"
	KeyOldAttachments   = "cni.dev/attachments"
)

// PluginConf is one plugin configuration object: the parsed well-known keys
// and the original bytes, which carry plugin-specific keys untouched.
type PluginConf struct {
	Network NetConf
	Bytes   []byte
}

// ParsePluginConf parses and validates a plugin configuration object.
func ParsePluginConf(data []byte) (*PluginConf, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, NewError(ErrDecodingFailure, "failed to decode plugin configuration", err.Error())
	}
	if raw == nil {
		return nil, Errorf(ErrDecodingFailure, "plugin configuration is not a JSON object")
	}
	var n NetConf
	if err := json.Unmarshal(data, &n); err != nil {
		return nil, NewError(ErrDecodingFailure, "failed to decode plugin configuration", err.Error())
	}
	if n.Type == "" {
		return nil, Errorf(ErrInvalidNetworkConfig, "plugin configuration: missing required key \"type\"")
	}
	if err := ValidatePluginType("type", n.Type); err != nil {
		return nil, err
	}
	if n.IPAM.Type != "" {
		if err := ValidatePluginType("ipam.type", n.IPAM.Type); err != nil {
			return nil, err
		}
	}
	return &PluginConf{Network: n, Bytes: bytes.Clone(data)}, nil
}

// ConfList is a network configuration (a list of plugin configurations).
type ConfList struct {
	CNIVersion             string
	CNIVersions            []string
	Name                   string
	DisableCheck           bool
	DisableGC              bool
	LoadOnlyInlinedPlugins bool
	Plugins                []*PluginConf
	// Bytes is the original file content (for legacy .conf files, the .conf).
	Bytes []byte
	// Legacy is true when the list was read from a single-plugin .conf/.json.
	Legacy bool
}

// Version is the protocol version a runtime uses for this list: the highest
// of cniVersion and cniVersions that we support (0.2.0 if none is given).
func (l *ConfList) Version() string {
	if l.CNIVersion == "" && len(l.CNIVersions) == 0 {
		return V020
	}
	return HighestCommon(l.CNIVersion, l.CNIVersions, nil)
}

// flexBool reads a boolean key that may also be written as the string
// "true" or "false" (any case), as libcni accepts. Absent or null is false.
// Errors name the key and the value.
func flexBool(key string, raw json.RawMessage) (bool, error) {
	if raw == nil {
		return false, nil
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return false, NewError(ErrDecodingFailure, fmt.Sprintf("failed to decode %q", key), err.Error())
	}
	switch b := v.(type) {
	case nil:
		return false, nil
	case bool:
		return b, nil
	case string:
		switch strings.ToLower(b) {
		case "true":
			return true, nil
		case "false":
			return false, nil
		}
		return false, Errorf(ErrInvalidNetworkConfig, "%q value %q is invalid: must be true or false", key, b)
	}
	return false, Errorf(ErrDecodingFailure, "%q value %s is invalid: must be a boolean", key, raw)
}

// ParseConfList parses and validates a network configuration list.
func ParseConfList(data []byte) (*ConfList, error) {
	var w struct {
		CNIVersion             string            `json:"cniVersion"`
		CNIVersions            []string          `json:"cniVersions"`
		Name                   string            `json:"name"`
		DisableCheck           json.RawMessage   `json:"disableCheck"`
		DisableGC              json.RawMessage   `json:"disableGC"`
		LoadOnlyInlinedPlugins json.RawMessage   `json:"loadOnlyInlinedPlugins"`
		Plugins                []json.RawMessage `json:"plugins"`
	}
	if err := json.Unmarshal(data, &w); err != nil {
		return nil, NewError(ErrDecodingFailure, "failed to decode network configuration list", err.Error())
	}
	if bytes.Equal(bytes.TrimSpace(data), []byte("null")) {
		return nil, Errorf(ErrDecodingFailure, "network configuration list is not a JSON object")
	}
	if err := ValidateNetworkName(w.Name); err != nil {
		return nil, err
	}
	l := &ConfList{CNIVersion: w.CNIVersion, CNIVersions: w.CNIVersions, Name: w.Name, Bytes: bytes.Clone(data)}
	for _, b := range []struct {
		key string
		raw json.RawMessage
		dst *bool
	}{
		{"disableCheck", w.DisableCheck, &l.DisableCheck},
		{"disableGC", w.DisableGC, &l.DisableGC},
		{"loadOnlyInlinedPlugins", w.LoadOnlyInlinedPlugins, &l.LoadOnlyInlinedPlugins},
	} {
		v, err := flexBool(b.key, b.raw)
		if err != nil {
			ce := AsError(err, ErrDecodingFailure)
			ce.Msg = fmt.Sprintf("network %q: %s", w.Name, ce.Msg)
			return nil, ce
		}
		*b.dst = v
	}
	if err := l.checkVersion(); err != nil {
		return nil, err
	}
	if l.LoadOnlyInlinedPlugins && w.Plugins == nil {
		return nil, Errorf(ErrInvalidNetworkConfig, "network %q: \"loadOnlyInlinedPlugins\" is true but there is no \"plugins\" key", w.Name)
	}
	for i, raw := range w.Plugins {
		p, err := ParsePluginConf(raw)
		if err != nil {
			ce := AsError(err, ErrInvalidNetworkConfig)
			ce.Msg = fmt.Sprintf("network %q: plugins[%d]: %s", w.Name, i, ce.Msg)
			return nil, ce
		}
		l.Plugins = append(l.Plugins, p)
	}
	return l, nil
}

func (l *ConfList) checkVersion() error {
	if l.CNIVersion == "" && len(l.CNIVersions) == 0 {
		return nil
	}
	for _, v := range append([]string{l.CNIVersion}, l.CNIVersions...) {
		if v != "" {
			if _, err := ParseVersion(v); err != nil {
				return Errorf(ErrDecodingFailure, "network %q: invalid cniVersion %q", l.Name, v)
			}
		}
	}
	if l.Version() == "" {
		return Errorf(ErrIncompatibleVersion, "network %q: none of cniVersion %q / cniVersions %v is supported (supported: %v)",
			l.Name, l.CNIVersion, l.CNIVersions, AllVersions)
	}
	return nil
}

// ConfListFromConf wraps a legacy single-plugin configuration as a one-plugin list.
func ConfListFromConf(data []byte) (*ConfList, error) {
	p, err := ParsePluginConf(data)
	if err != nil {
		return nil, err
	}
	if err := ValidateNetworkName(p.Network.Name); err != nil {
		return nil, err
	}
	l := &ConfList{CNIVersion: p.Network.CNIVersion, Name: p.Network.Name, Plugins: []*PluginConf{p}, Bytes: bytes.Clone(data), Legacy: true}
	if err := l.checkVersion(); err != nil {
		return nil, err
	}
	return l, nil
}

// ParseAny parses either a conflist (has "plugins") or a single-plugin conf.
func ParseAny(data []byte) (*ConfList, error) {
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(data, &probe); err != nil {
		return nil, NewError(ErrDecodingFailure, "failed to decode network configuration", err.Error())
	}
	if _, ok := probe["plugins"]; ok {
		return ParseConfList(data)
	}
	return ConfListFromConf(data)
}

// BuildRequest derives the request configuration for one plugin invocation
// (spec §3 "Deriving request configuration"): cniVersion and name are
// inserted, capabilities and any cni.dev/ keys are removed, runtimeConfig is
// set when non-empty, prevResult when non-nil (encoded in version), and extra
// keys (e.g. cni.dev/valid-attachments for GC) are added. Every other key
// passes through unaltered.
func BuildRequest(p *PluginConf, name, version string, prev *Result, runtimeConfig map[string]any, extra map[string]any) ([]byte, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(p.Bytes, &m); err != nil {
		return nil, NewError(ErrDecodingFailure, "failed to decode plugin configuration", err.Error())
	}
	for k := range m {
		if strings.HasPrefix(k, "cni.dev/") {
			delete(m, k)
		}
	}
	delete(m, "capabilities")
	delete(m, "runtimeConfig")
	delete(m, "prevResult")
	set := func(k string, v any) error {
		b, err := json.Marshal(v)
		if err != nil {
			return NewError(ErrDecodingFailure, "failed to encode "+k, err.Error())
		}
		m[k] = b
		return nil
	}
	if err := set("cniVersion", version); err != nil {
		return nil, err
	}
	if err := set("name", name); err != nil {
		return nil, err
	}
	if len(runtimeConfig) > 0 {
		if err := set("runtimeConfig", runtimeConfig); err != nil {
			return nil, err
		}
	}
	if prev != nil {
		b, err := prev.Encode(version)
		if err != nil {
			return nil, err
		}
		m["prevResult"] = b
	}
	for k, v := range extra {
		if err := set(k, v); err != nil {
			return nil, err
		}
	}
	return json.Marshal(m)
}
