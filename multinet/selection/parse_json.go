package selection

import (
	"bytes"
	"encoding/json"
	"maps"
	"slices"
	"strings"
)

// parseJSON reads the JSON list format (§4.1.2).
func (p *parser) parseJSON(v string) []*Selection {
	var elems []json.RawMessage
	if err := json.Unmarshal([]byte(v), &elems); err != nil {
		p.add(Problem{Index: -1, Severity: Fatal, Section: "4.1.2",
			Message: "the annotation is not a valid JSON list: " + err.Error()})
		return nil
	}
	var out []*Selection
	for i, raw := range elems {
		if s := p.jsonElement(i, raw); s != nil {
			out = append(out, s)
		}
	}
	return out
}

// isNull reports an absent key or an explicit null, both meaning "not set".
func isNull(raw json.RawMessage) bool {
	return raw == nil || bytes.Equal(bytes.TrimSpace(raw), []byte("null"))
}

// jsonElement validates one map of the list. It returns nil when the
// element has an Ignored or Fatal problem; all of them are recorded.
func (p *parser) jsonElement(i int, raw json.RawMessage) *Selection {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil || m == nil {
		p.elemf(i, "", "", Fatal, "4.1.2", "element is not a JSON object: %s", raw)
		return nil
	}
	ok := true
	// bad records a problem and marks the element unusable.
	bad := func(ref, key string, sev Severity, section, format string, a ...any) {
		p.elemf(i, ref, key, sev, section, format, a...)
		ok = false
	}

	s := &Selection{Index: i}
	var name string
	if err := json.Unmarshal(m["name"], &name); isNull(m["name"]) || err != nil {
		bad("", "name", Fatal, "4.1.2.1.1", "required key \"name\" is missing or not a string (got %s)", orAbsent(m["name"]))
		return nil
	}
	s.Name = name
	if !isNull(m["namespace"]) {
		if err := json.Unmarshal(m["namespace"], &s.Namespace); err != nil {
			bad(name, "namespace", Fatal, "4.1.2.1.2", "\"namespace\" must be a string, got %s", m["namespace"])
			return nil
		}
	}
	if s.Namespace == "" { // "missing or empty" (§4.1.2.1.1)
		s.Namespace = p.podNS
	}
	if !p.checkRef(i, name, s) {
		return nil
	}
	ref := s.Ref()

	for _, key := range orderedKeys(m) {
		val := m[key]
		if isNull(val) {
			continue
		}
		switch key {
		case "name", "namespace":
		case "ips":
			ips, msg := parseIPs(val)
			if msg != "" {
				bad(ref, key, Ignored, "4.1.2.1.3", "\"ips\" %s", msg)
			}
			s.IPs = ips
		case "mac":
			mac, msg := parseHWAddr(val, 6, "6-byte Ethernet MAC address", true)
			if msg != "" {
				bad(ref, key, Ignored, "4.1.2.1.4", "\"mac\" %s", msg)
			}
			s.MAC = mac
		case "interface":
			var ifname string
			if err := json.Unmarshal(val, &ifname); err != nil {
				bad(ref, key, Ignored, "4.1.2.1.5", "\"interface\" must be a string, got %s", val)
				continue
			}
			if prob := ifNameProblem(ifname); prob != "" {
				bad(ref, key, Ignored, "4.1.2.1.5", "\"interface\" value %q %s", ifname, prob)
				continue
			}
			s.Interface, s.InterfaceRequested = ifname, true
		case "cni-args":
			if err := json.Unmarshal(val, &s.CNIArgs); err != nil || s.CNIArgs == nil {
				bad(ref, key, Fatal, "4.1.2.1.6", "\"cni-args\" must be a JSON object, got %s", val)
			}
		case "portMappings":
			pms, msg := parsePortMappings(val)
			if msg != "" {
				bad(ref, key, Ignored, "4.1.2.1.7", "\"portMappings\" %s", msg)
			}
			s.PortMappings = pms
		case "bandwidth":
			bw, msg := parseBandwidth(val)
			if msg != "" {
				bad(ref, key, Ignored, "4.1.2.1.8", "\"bandwidth\" %s", msg)
			}
			s.Bandwidth = bw
		case "default-route":
			gws, msg := parseGateways(val)
			if msg != "" {
				bad(ref, key, Ignored, "4.1.2.1.9", "\"default-route\" %s", msg)
			}
			s.HasDefaultRoute, s.DefaultRoute = true, gws
		case "infiniband-guid":
			guid, msg := parseHWAddr(val, 8, "8-byte InfiniBand GUID", false)
			if msg != "" {
				bad(ref, key, Ignored, "4.1.2.1.10", "\"infiniband-guid\" %s", msg)
			}
			s.InfinibandGUID = guid
		case "ipam-claim-reference":
			var claim string
			if err := json.Unmarshal(val, &claim); err != nil {
				bad(ref, key, Fatal, "4.1.2.1.11", "\"ipam-claim-reference\" must be a string, got %s", val)
				continue
			}
			if prob := objectNameProblem(claim); prob != "" {
				bad(ref, key, Fatal, "4.1.2.1.11", "\"ipam-claim-reference\" value %q is not a valid object name: it %s", claim, prob)
				continue
			}
			s.IPAMClaimReference = claim
		default:
			if strings.Contains(key, ".") {
				if s.Extensions == nil {
					s.Extensions = map[string]json.RawMessage{}
				}
				s.Extensions[key] = val
				continue
			}
			p.elemf(i, ref, key, Warning, "4.1.2.1",
				"unknown key %q is ignored (keys without a '.' are reserved for the spec; implementation keys use reverse domain names)", key)
		}
	}
	if !isNull(m["ips"]) && !isNull(m["ipam-claim-reference"]) {
		bad(ref, "ipam-claim-reference", Fatal, "4.1.2.1.11",
			"\"ips\" and \"ipam-claim-reference\" are both set; request static IPs or an IPAMClaim, not both")
	}
	if !ok {
		return nil
	}
	return s
}

func orAbsent(raw json.RawMessage) string {
	if raw == nil {
		return "nothing"
	}
	return string(raw)
}

// specKeyOrder ranks the keys of §4.1.2.1 so problems come out in spec order.
var specKeyOrder = map[string]int{"name": 1, "namespace": 2, "ips": 3, "mac": 4, "interface": 5,
	"cni-args": 6, "portMappings": 7, "bandwidth": 8, "default-route": 9, "infiniband-guid": 10,
	"ipam-claim-reference": 11}

// orderedKeys returns m's keys, spec keys first in spec order, then the rest
// alphabetically, so that messages are stable.
func orderedKeys(m map[string]json.RawMessage) []string {
	keys := slices.Collect(maps.Keys(m))
	slices.SortFunc(keys, func(a, b string) int {
		ra, rb := specKeyOrder[a], specKeyOrder[b]
		if ra == 0 {
			ra = 100
		}
		if rb == 0 {
			rb = 100
		}
		if ra != rb {
			return ra - rb
		}
		return strings.Compare(a, b)
	})
	return keys
}
