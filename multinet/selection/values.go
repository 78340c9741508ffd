package selection

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"github.com/patchbay-cni/patchbay/spec"
)

// Validators of the values of §4.1.2.1. Each returns the parsed value and
// "" or, when the value is invalid, a message that follows the key's name.

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
