package api

import (
	"encoding/json"
	"strings"

	"github.com/patchbay-cni/patchbay/spec"
)

// ParseConfig returns the CNI configuration of a NetworkAttachmentDefinition
// (§3.4.1 rule 1), or nil with no error when spec.config is absent: then
// rules 2 and 3 (an on-disk configuration named like the object) apply,
// which need I/O and are the caller's.
//
// A config without "name" (or with an empty one) gets the object's name
// (§3.4.2), so the thick-plugin form {"cniVersion":..., "type":...} works.
// Both a single plugin configuration and a configuration list are accepted.
// Errors are *spec.Error naming the object.
func ParseConfig(nad *NetworkAttachmentDefinition) (*spec.ConfList, error) {
	ref := nad.Metadata.Namespace + "/" + nad.Metadata.Name
	cfg := strings.TrimSpace(nad.Spec.Config)
	if cfg == "" {
		return nil, nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(cfg), &m); err != nil || m == nil {
		msg := "not a JSON object"
		if err != nil {
			msg = err.Error()
		}
		return nil, spec.NewError(spec.ErrDecodingFailure, "NetworkAttachmentDefinition "+ref+": spec.config is not valid JSON", msg)
	}
	data := []byte(cfg)
	// Absent, null or "": the object's name. Any other value is left for
	// spec.ParseAny to refuse (a name that is not a string is an error,
	// not a name to replace).
	var name string
	if raw, ok := m["name"]; !ok || json.Unmarshal(raw, &name) == nil && name == "" {
		m["name"], _ = json.Marshal(nad.Metadata.Name)
		var err error
		if data, err = json.Marshal(m); err != nil {
			return nil, spec.NewError(spec.ErrDecodingFailure, "NetworkAttachmentDefinition "+ref+": cannot add \"name\"", err.Error())
		}
	}
	l, err := spec.ParseAny(data)
	if err != nil {
		ce := spec.AsError(err, spec.ErrInvalidNetworkConfig)
		out := *ce
		out.Msg = "NetworkAttachmentDefinition " + ref + ": spec.config: " + ce.Msg
		return nil, &out
	}
	return l, nil
}
