package selection

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/patchbay-cni/patchbay/spec"
)

// PluginCaps is what the runtimeConfig rules need to know of one delegate
// plugin of an attachment: its type (for messages) and its "capabilities".
type PluginCaps struct {
	Type         string
	Capabilities map[string]bool
}

// PluginCapsOf lists the plugins of a parsed NetworkAttachmentDefinition config.
func PluginCapsOf(l *spec.ConfList) []PluginCaps {
	out := make([]PluginCaps, 0, len(l.Plugins))
	for _, p := range l.Plugins {
		out = append(out, PluginCaps{Type: p.Network.Type, Capabilities: p.Network.Capabilities})
	}
	return out
}

// Default burst bounds for "bandwidth" (§4.1.2.1.8.2 lets the implementation
// choose defaults because the reference bandwidth plugin refuses a rate
// without a burst). The default is one second of traffic at the rate, but
// at least one 1500-byte frame (a token bucket smaller than a frame drops
// every full-size packet) and below the reference plugin's 4 GiB limit.
const (
	minDefaultBurst = 1500 * 8
	maxDefaultBurst = (math.MaxUint32 - 1) * 8
)

func defaultBurst(rate uint64) uint64 { return min(max(rate, minDefaultBurst), maxDefaultBurst) }

// CapabilityArgs builds the runtimeConfig entries a selection asks for
// (§4.1.2.1.3.2 ips, .4.2 mac, .7.2 portMappings, .8.2 bandwidth, .10.2
// infinibandGUID), keyed by capability name. Each requested capability must
// be declared true by at least one plugin of the attachment, otherwise the
// attachment fails: the error (a *spec.Error, code 2) names every missing
// capability with its requested value and the plugins' declared ones.
// Multus drops such requests silently; failing is what the spec requires.
//
// Only the selection contributes: runtimeConfig the runtime passed to the
// delegating plugin itself belongs to the default network alone (§7.5).
func CapabilityArgs(s *Selection, plugins []PluginCaps) (map[string]any, error) {
	args := map[string]any{}
	if len(s.IPs) > 0 {
		args[spec.CapIPs] = slices.Clone(s.IPs)
	}
	if s.MAC != "" {
		args[spec.CapMAC] = s.MAC
	}
	if len(s.PortMappings) > 0 {
		args[spec.CapPortMappings] = slices.Clone(s.PortMappings)
	}
	if s.Bandwidth != nil {
		bw := *s.Bandwidth
		if bw.IngressRate != 0 && bw.IngressBurst == 0 {
			bw.IngressBurst = defaultBurst(bw.IngressRate)
		}
		if bw.EgressRate != 0 && bw.EgressBurst == 0 {
			bw.EgressBurst = defaultBurst(bw.EgressRate)
		}
		args[spec.CapBandwidth] = bw
	}
	if s.InfinibandGUID != "" {
		args[spec.CapInfinibandGUID] = s.InfinibandGUID
	}

	var missing []string
	for _, capName := range []string{spec.CapIPs, spec.CapMAC, spec.CapPortMappings, spec.CapBandwidth, spec.CapInfinibandGUID} {
		v, asked := args[capName]
		if !asked || slices.ContainsFunc(plugins, func(p PluginCaps) bool { return p.Capabilities[capName] }) {
			continue
		}
		b, _ := json.Marshal(v)
		missing = append(missing, fmt.Sprintf("%q (requested %s)", capName, b))
	}
	if len(missing) > 0 {
		return nil, spec.Errorf(spec.ErrUnsupportedField,
			"network %q: networks[%d] requests %s but no plugin of the network declares that capability (plugins: %s)",
			s.Ref(), s.Index, strings.Join(missing, ", "), describePlugins(plugins))
	}
	if len(args) == 0 {
		return nil, nil
	}
	return args, nil
}

func describePlugins(plugins []PluginCaps) string {
	if len(plugins) == 0 {
		return "none"
	}
	parts := make([]string, 0, len(plugins))
	for _, p := range plugins {
		var caps []string
		for c, on := range p.Capabilities {
			if on {
				caps = append(caps, c)
			}
		}
		slices.Sort(caps)
		if len(caps) == 0 {
			parts = append(parts, p.Type+" with no capabilities")
		} else {
			parts = append(parts, p.Type+" with "+strings.Join(caps, ", "))
		}
	}
	return strings.Join(parts, "; ")
}

// ForPlugin returns the entries of args that one plugin declared as
// capabilities: what goes into that plugin's runtimeConfig (as libcni
// does). nil when none.
func ForPlugin(args map[string]any, caps map[string]bool) map[string]any {
	var out map[string]any
	for k, v := range args {
		if caps[k] {
			if out == nil {
				out = map[string]any{}
			}
			out[k] = v
		}
	}
	return out
}

// MergeCNIArgs merges "cni-args" into one delegate plugin configuration's
// "args" (§4.1.2.1.6.2), under the "cni" namespace that CONVENTIONS
// reserves for runtime-provided args, as Multus does.
//
// Priority rule (§4.1.2.1.6.2 lists the sources highest first):
//  1. "cni-args" of the pod's selection annotation, then
//  2. "args" of the NetworkAttachmentDefinition's config.
//
// So for every key of cni-args, args.cni[key] is set to the annotation's
// value, replacing whatever the config had for that key (whole value, no
// deep merge). Keys only the config has are kept, as are other namespaces
// of "args" and every other key of the configuration. With no cni-args the
// configuration is returned unchanged. A config whose "args" or "args.cni"
// is not an object cannot be merged into: that fails (code 7).
func MergeCNIArgs(conf []byte, cniArgs map[string]json.RawMessage) ([]byte, error) {
	if len(cniArgs) == 0 {
		return conf, nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(conf, &m); err != nil || m == nil {
		return nil, spec.Errorf(spec.ErrDecodingFailure, "cannot merge cni-args: plugin configuration is not a JSON object")
	}
	args := map[string]json.RawMessage{}
	if raw, ok := m["args"]; ok && !isNull(raw) {
		if err := json.Unmarshal(raw, &args); err != nil || args == nil {
			return nil, spec.Errorf(spec.ErrInvalidNetworkConfig, "cannot merge cni-args: the configuration's \"args\" is not an object: %s", raw)
		}
	}
	cni := map[string]json.RawMessage{}
	if raw, ok := args["cni"]; ok && !isNull(raw) {
		if err := json.Unmarshal(raw, &cni); err != nil || cni == nil {
			return nil, spec.Errorf(spec.ErrInvalidNetworkConfig, "cannot merge cni-args: the configuration's \"args.cni\" is not an object: %s", raw)
		}
	}
	for k, v := range cniArgs { // the annotation wins
		cni[k] = v
	}
	var err error
	if args["cni"], err = json.Marshal(cni); err != nil {
		return nil, spec.Errorf(spec.ErrDecodingFailure, "cannot merge cni-args: %v", err)
	}
	if m["args"], err = json.Marshal(args); err != nil {
		return nil, spec.Errorf(spec.ErrDecodingFailure, "cannot merge cni-args: %v", err)
	}
	return json.Marshal(m)
}
