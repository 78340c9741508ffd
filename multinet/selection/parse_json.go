package selection

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/patchbay-cni/patchbay/spec"
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

// parseIPs checks §4.1.2.1.3: at least one element, each an IPv4 or IPv6
// address with an optional prefix length. Values are kept as written.
func parseIPs(raw json.RawMessage) ([]string, string) {
	var ips []string
	if err := json.Unmarshal(raw, &ips); err != nil {
		return nil, fmt.Sprintf("must be a list of strings, got %s", raw)
	}
	if len(ips) == 0 {
		return nil, "must contain at least one address"
	}
	for _, ip := range ips {
		if _, err := netip.ParsePrefix(ip); err == nil {
			continue
		}
		a, err := netip.ParseAddr(ip)
		if err != nil || a.Zone() != "" {
			return nil, fmt.Sprintf("value %q is not an IPv4 or IPv6 address with an optional prefix length", ip)
		}
	}
	return ips, ""
}

// parseGateways checks "default-route": a possibly empty list of gateway
// addresses (plain addresses: a gateway has no prefix length).
func parseGateways(raw json.RawMessage) ([]netip.Addr, string) {
	var gws []string
	if err := json.Unmarshal(raw, &gws); err != nil {
		return nil, fmt.Sprintf("must be a list of gateway IP addresses, got %s", raw)
	}
	out := make([]netip.Addr, 0, len(gws))
	for _, g := range gws {
		a, err := netip.ParseAddr(g)
		if err != nil || a.Zone() != "" {
			return nil, fmt.Sprintf("value %q is not a gateway IP address", g)
		}
		out = append(out, a)
	}
	return out, ""
}

// parseHWAddr checks a MAC (6 bytes) or InfiniBand GUID (8 bytes) in any
// form net.ParseMAC reads. A MAC must also be assignable: the kernel
// refuses multicast and all-zero addresses on Ethernet interfaces.
func parseHWAddr(raw json.RawMessage, size int, what string, unicast bool) (string, string) {
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", fmt.Sprintf("must be a string, got %s", raw)
	}
	hw, err := net.ParseMAC(s)
	if err != nil || len(hw) != size {
		return "", fmt.Sprintf("value %q is not a valid %s", s, what)
	}
	if unicast && hw[0]&1 == 1 {
		return "", fmt.Sprintf("value %q is a multicast address, which cannot be assigned to an interface", s)
	}
	if unicast && bytes.Equal(hw, make([]byte, size)) {
		return "", fmt.Sprintf("value %q is the all-zero address, which cannot be assigned to an interface", s)
	}
	return s, ""
}

// jsonInt reads a JSON integer literal (not a string, not a fraction).
func jsonInt(raw json.RawMessage) (int64, bool) {
	t := strings.TrimSpace(string(raw))
	n, err := strconv.ParseInt(t, 10, 64)
	return n, err == nil
}

// parsePortMappings checks §4.1.2.1.7: a non-empty list of maps with
// integer hostPort and containerPort in 1..65535 and an optional protocol
// (UDP, TCP or SCTP in any case, default TCP). "hostIP" is also accepted
// because CONVENTIONS defines it for the portMappings capability; any other
// key is refused, as the spec lists the keys an entry may contain.
func parsePortMappings(raw json.RawMessage) ([]spec.PortMapping, string) {
	var entries []map[string]json.RawMessage
	if err := json.Unmarshal(raw, &entries); err != nil {
		return nil, fmt.Sprintf("must be a list of objects, got %s", raw)
	}
	if len(entries) == 0 {
		return nil, "must contain at least one mapping"
	}
	out := make([]spec.PortMapping, 0, len(entries))
	for i, e := range entries {
		if e == nil {
			return nil, fmt.Sprintf("[%d] is not an object", i)
		}
		pm := spec.PortMapping{Protocol: "tcp"}
		for _, k := range []string{"hostPort", "containerPort"} {
			v, ok := e[k]
			if !ok {
				return nil, fmt.Sprintf("[%d] is missing required key %q", i, k)
			}
			n, isInt := jsonInt(v)
			if !isInt || n < 1 || n > 65535 {
				return nil, fmt.Sprintf("[%d].%s %s must be an integer between 1 and 65535", i, k, v)
			}
			if k == "hostPort" {
				pm.HostPort = int(n)
			} else {
				pm.ContainerPort = int(n)
			}
		}
		for _, k := range orderedKeys(e) {
			v := e[k]
			switch k {
			case "hostPort", "containerPort":
			case "protocol":
				var proto string
				if err := json.Unmarshal(v, &proto); err != nil {
					return nil, fmt.Sprintf("[%d].protocol must be a string, got %s", i, v)
				}
				switch strings.ToLower(proto) {
				case "tcp", "udp", "sctp":
					pm.Protocol = strings.ToLower(proto)
				default:
					return nil, fmt.Sprintf("[%d].protocol %q must be one of UDP, TCP or SCTP", i, proto)
				}
			case "hostIP":
				var hip string
				if err := json.Unmarshal(v, &hip); err != nil {
					return nil, fmt.Sprintf("[%d].hostIP must be a string, got %s", i, v)
				}
				if a, err := netip.ParseAddr(hip); err != nil || a.Zone() != "" {
					return nil, fmt.Sprintf("[%d].hostIP %q is not an IP address", i, hip)
				}
				pm.HostIP = hip
			default:
				return nil, fmt.Sprintf("[%d] has unknown key %q (allowed: hostPort, containerPort, protocol, hostIP)", i, k)
			}
		}
		out = append(out, pm)
	}
	return out, ""
}

// parseBandwidth checks §4.1.2.1.8: a non-empty map of ingressRate,
// ingressBurst, egressRate, egressBurst, each a non-zero (positive) integer,
// a burst only together with its rate.
func parseBandwidth(raw json.RawMessage) (*spec.Bandwidth, string) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil || m == nil {
		return nil, fmt.Sprintf("must be an object, got %s", raw)
	}
	if len(m) == 0 {
		return nil, "must contain at least one of ingressRate, ingressBurst, egressRate, egressBurst"
	}
	bw := &spec.Bandwidth{}
	fields := map[string]*uint64{"ingressRate": &bw.IngressRate, "ingressBurst": &bw.IngressBurst,
		"egressRate": &bw.EgressRate, "egressBurst": &bw.EgressBurst}
	for _, k := range orderedKeys(m) {
		v := m[k]
		dst, known := fields[k]
		if !known {
			return nil, fmt.Sprintf("has unknown key %q (allowed: ingressRate, ingressBurst, egressRate, egressBurst)", k)
		}
		n, err := strconv.ParseUint(strings.TrimSpace(string(v)), 10, 64)
		if err != nil || n == 0 {
			return nil, fmt.Sprintf("%s %s must be a non-zero positive integer", k, v)
		}
		*dst = n
	}
	if bw.IngressBurst != 0 && bw.IngressRate == 0 {
		return nil, "has ingressBurst without ingressRate"
	}
	if bw.EgressBurst != 0 && bw.EgressRate == 0 {
		return nil, "has egressBurst without egressRate"
	}
	return bw, ""
}
