package clusteripam

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net/netip"
	"os"
	"slices"
	"strings"

	"github.com/patchbay-cni/patchbay/spec"
)

// Type is the plugin type name (the "type" of the ipam dictionary).
const Type = "cluster-ipam"

// FlatFiles are read, first found wins, after ipam.configuration_path, for
// keys the network configuration leaves out (whereabouts' flat file, under
// our own name: a node keeps whereabouts' file, with whereabouts'
// credentials, for whereabouts).
var FlatFiles = []string{
	"/etc/kubernetes/cni/net.d/cluster-ipam.d/cluster-ipam.conf",
	"/etc/cni/net.d/cluster-ipam.d/cluster-ipam.conf",
	"/host/etc/cni/net.d/cluster-ipam.d/cluster-ipam.conf",
}

// ClaimArg is the args.cni key carrying the IPAMClaim name (multi-net spec
// §4.1.2.1.11; multinet and Multus pass it so).
const ClaimArg = "ipam-claim-reference"

// rangeConf is one whereabouts range as written.
type rangeConf struct {
	Range      string   `json:"range"`
	RangeStart string   `json:"range_start"`
	RangeEnd   string   `json:"range_end"`
	Exclude    []string `json:"exclude"`
}

// ipamConf holds the ipam keys, whereabouts' names.
type ipamConf struct {
	Type string `json:"type"`
	rangeConf
	IPRanges    []rangeConf       `json:"ipRanges"`
	Gateway     string            `json:"gateway"`
	NetworkName string            `json:"network_name"`
	Overlapping *bool             `json:"enable_overlapping_ranges"`
	Routes      []json.RawMessage `json:"routes"`
	DNS         *spec.DNS         `json:"dns"`
	Addresses   []struct {
		Address string `json:"address"`
		Gateway string `json:"gateway"`
	} `json:"addresses"`
	Kubernetes struct {
		Kubeconfig string `json:"kubeconfig"`
	} `json:"kubernetes"`
	ConfigurationPath string `json:"configuration_path"`
	LogFile           string `json:"log_file"`
	LogLevel          string `json:"log_level"`
	// NodeName is ours: the node's name as Kubernetes knows it (a node
	// agent writes it into the flat file); default: $CLUSTER_IPAM_NODE_NAME,
	// else the host name.
	NodeName string `json:"node_name"`
}

// Config is a validated configuration for one invocation.
type Config struct {
	// Network is the CNI network name ("name" of the configuration).
	Network     string
	CNIVersion  string
	NetworkName string // network_name: which networks share address space
	Overlapping bool   // enable_overlapping_ranges
	Ranges      []*Range
	Routes      []*spec.Route
	DNS         spec.DNS
	// Static are the "addresses" entries: returned as given (reserved
	// when inside a range).
	Static []Static
	// Requested are specific addresses asked for (runtimeConfig.ips,
	// args.cni.ips, CNI_ARGS IP=), each replacing the dynamic address of
	// the range holding it.
	Requested []Requested
	// Claim names the IPAMClaim (in the pod's namespace) owning the
	// addresses; empty: the attachment owns them.
	Claim string
	// Pod is the pod of the attachment, from CNI_ARGS (K8S_POD_*); empty
	// outside Kubernetes.
	Pod        PodRef
	Kubeconfig string
	NodeName   string
	LogFile    string
	LogLevel   string
}

// Static is one "addresses" entry.
type Static struct {
	Address netip.Prefix
	Gateway netip.Addr
}

// Requested is one specific address with where it came from.
type Requested struct {
	Addr   netip.Addr
	Source string
}

// netConf is the part of the network configuration we read.
type netConf struct {
	Name          string          `json:"name"`
	CNIVersion    string          `json:"cniVersion"`
	IPAM          json.RawMessage `json:"ipam"`
	RuntimeConfig struct {
		IPs []string `json:"ips"`
	} `json:"runtimeConfig"`
	Args struct {
		CNI map[string]json.RawMessage `json:"cni"`
	} `json:"args"`
}

func invalid(format string, a ...any) error {
	return spec.Errorf(spec.ErrInvalidNetworkConfig, format, a...)
}

// ParseConfig reads and validates the network configuration (stdin) and
// the CNI_ARGS value; readFile reads flat files (os.ReadFile outside
// tests). Errors are *spec.Error, code 7 (or 6 for undecodable JSON),
// naming the key and the value.
func ParseConfig(stdin []byte, cniArgs string, readFile func(string) ([]byte, error)) (*Config, error) {
	if readFile == nil {
		readFile = os.ReadFile
	}
	var n netConf
	if err := json.Unmarshal(stdin, &n); err != nil {
		return nil, spec.NewError(spec.ErrDecodingFailure, "cluster-ipam: network configuration is not valid JSON", err.Error())
	}
	ipam, err := mergedIPAM(n.IPAM, readFile)
	if err != nil {
		return nil, err
	}
	c := &Config{Network: n.Name, CNIVersion: n.CNIVersion, NetworkName: ipam.NetworkName,
		Overlapping: ipam.Overlapping == nil || *ipam.Overlapping,
		Kubeconfig:  ipam.Kubernetes.Kubeconfig, NodeName: ipam.NodeName, LogFile: ipam.LogFile, LogLevel: ipam.LogLevel}
	if c.LogLevel != "" && LogLevel(c.LogLevel) == nil {
		return nil, invalid("ipam.log_level %q is not one of debug, verbose, error, panic", c.LogLevel)
	}
	if c.NodeName == "" {
		c.NodeName = os.Getenv("CLUSTER_IPAM_NODE_NAME")
	}
	if c.NodeName == "" {
		h, _ := os.Hostname()
		c.NodeName = strings.ToLower(h)
	}
	var gw netip.Addr
	if ipam.Gateway != "" {
		if gw, err = netip.ParseAddr(ipam.Gateway); err != nil || gw.Zone() != "" {
			return nil, invalid("ipam.gateway %q is not an IP address", ipam.Gateway)
		}
		gw = gw.Unmap()
	}
	var rcs []rangeConf
	var fields []string
	if ipam.Range != "" {
		rcs, fields = append(rcs, ipam.rangeConf), append(fields, "ipam")
	} else if ipam.RangeStart != "" || ipam.RangeEnd != "" || len(ipam.Exclude) > 0 {
		return nil, invalid("ipam.range_start, range_end and exclude need ipam.range")
	}
	for i, rc := range ipam.IPRanges {
		rcs, fields = append(rcs, rc), append(fields, fmt.Sprintf("ipam.ipRanges[%d]", i))
	}
	if len(rcs) == 0 {
		return nil, invalid("cluster-ipam: no address range: set ipam.range or ipam.ipRanges")
	}
	var v4, v6 int
	for i, rc := range rcs {
		r, err := parseRange(fields[i], rc, gw)
		if err != nil {
			return nil, err
		}
		for _, o := range c.Ranges {
			if o.Prefix == r.Prefix {
				return nil, invalid("%s: range %s is given twice (%s)", r.Field, r.Prefix, o.Field)
			}
		}
		if r.Start.Is4() {
			v4++
		} else {
			v6++
		}
		c.Ranges = append(c.Ranges, r)
	}
	old := spec.ConfigVersion(n.CNIVersion)
	if (v4 > 1 || v6 > 1) && !spec.GreaterOrEqual(old, spec.V030) {
		return nil, invalid("cniVersion %q allows one address per family, but %d IPv4 and %d IPv6 ranges are configured", old, v4, v6)
	}
	for i, raw := range ipam.Routes {
		var rt spec.Route
		if err := json.Unmarshal(raw, &rt); err != nil || !rt.Dst.IsValid() {
			return nil, invalid("ipam.routes[%d] %s: needs \"dst\" (a CIDR) and an optional \"gw\" (an IP address)", i, raw)
		}
		c.Routes = append(c.Routes, &rt)
	}
	if ipam.DNS != nil {
		c.DNS = *ipam.DNS
	}
	for i, s := range ipam.Addresses {
		p, err := netip.ParsePrefix(s.Address)
		if err != nil {
			return nil, invalid("ipam.addresses[%d].address %q is not an address with a prefix length (e.g. 10.1.2.3/24)", i, s.Address)
		}
		st := Static{Address: netip.PrefixFrom(p.Addr().Unmap(), p.Bits())}
		if s.Gateway != "" {
			if st.Gateway, err = netip.ParseAddr(s.Gateway); err != nil {
				return nil, invalid("ipam.addresses[%d].gateway %q is not an IP address", i, s.Gateway)
			}
		}
		c.Static = append(c.Static, st)
	}
	if err := c.loadRequested(&n, cniArgs); err != nil {
		return nil, err
	}
	return c, nil
}

// mergedIPAM decodes the ipam dictionary after filling the keys it leaves
// out (or leaves empty) from the first flat file found, as whereabouts
// does; enable_overlapping_ranges is never taken from a flat file
// (whereabouts keeps the network's value, true by default).
func mergedIPAM(raw json.RawMessage, readFile func(string) ([]byte, error)) (*ipamConf, error) {
	if len(bytes.TrimSpace(raw)) == 0 || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return nil, invalid("missing required key \"ipam\"")
	}
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(raw, &keys); err != nil {
		return nil, invalid("ipam is not a JSON object: %v", err)
	}
	if keys == nil {
		keys = map[string]json.RawMessage{}
	}
	var first ipamConf
	if err := json.Unmarshal(raw, &first); err != nil {
		return nil, invalid("ipam: %v", err)
	}
	paths := FlatFiles
	if first.ConfigurationPath != "" {
		paths = append([]string{first.ConfigurationPath}, paths...)
	}
	for i, p := range paths {
		b, err := readFile(p)
		if errors.Is(err, fs.ErrNotExist) {
			if i == 0 && first.ConfigurationPath != "" {
				return nil, invalid("ipam.configuration_path %q: no such file", p)
			}
			continue
		}
		if err != nil {
			return nil, invalid("flat configuration file %s: %v", p, err)
		}
		var flat map[string]json.RawMessage
		if err := json.Unmarshal(b, &flat); err != nil {
			return nil, invalid("flat configuration file %s is not a JSON object: %v", p, err)
		}
		// Keys match as encoding/json matches them, in any case: a key
		// the ipam sets in another case is still set, and a flat key is
		// written over the ipam's empty ones of any case (which would
		// otherwise win or lose by the order of the merged keys). Sorted,
		// so that duplicates in the file merge the same way every time.
		for _, k := range slices.Sorted(maps.Keys(flat)) {
			if strings.EqualFold(k, "enable_overlapping_ranges") || setFold(keys, k) {
				continue
			}
			for have := range keys {
				if strings.EqualFold(have, k) {
					delete(keys, have)
				}
			}
			keys[k] = flat[k]
		}
		break
	}
	merged, _ := json.Marshal(keys)
	var c ipamConf
	if err := json.Unmarshal(merged, &c); err != nil {
		return nil, invalid("ipam: %v", err)
	}
	return &c, nil
}

// setFold says whether keys sets k (in any case) to a value that is not
// empty.
func setFold(keys map[string]json.RawMessage, k string) bool {
	for have, v := range keys {
		if strings.EqualFold(have, k) && !emptyJSON(v) {
			return true
		}
	}
	return false
}

// emptyJSON is mergo's "empty": absent, null, "", false, 0, [] or {}.
func emptyJSON(v json.RawMessage) bool {
	switch s := string(bytes.TrimSpace(v)); s {
	case "", "null", `""`, "false", "0", "[]", "{}":
		return true
	}
	return false
}

// parseRange validates one range: "range" is a CIDR ("10.1.2.0/24", host
// bits allowed) or "first-last/len" ("10.1.2.10-10.1.2.20/24": the prefix
// is the last address's), with optional range_start, range_end, exclude.
func parseRange(field string, rc rangeConf, gw netip.Addr) (*Range, error) {
	r := &Range{Field: field}
	text := strings.TrimSpace(rc.Range)
	var dashStart netip.Addr
	if first, rest, ok := strings.Cut(text, "-"); ok {
		a, err := netip.ParseAddr(strings.TrimSpace(first))
		if err != nil {
			return nil, invalid("%s.range %q: %q before the dash is not an IP address", field, rc.Range, first)
		}
		dashStart, text = a.Unmap(), strings.TrimSpace(rest)
	}
	p, err := netip.ParsePrefix(text)
	if err != nil || p.Addr().Zone() != "" {
		return nil, invalid("%s.range %q is not a CIDR (e.g. 10.1.2.0/24) or first-last/len (e.g. 10.1.2.10-10.1.2.20/24)", field, rc.Range)
	}
	p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-ifv(p.Addr().Is4In6(), 96))
	if p.Bits() < 0 {
		return nil, invalid("%s.range %q: bad prefix length", field, rc.Range)
	}
	r.Prefix = p.Masked()
	r.Start, r.End = usableBounds(r.Prefix)
	if dashStart.IsValid() {
		if rc.RangeStart != "" || rc.RangeEnd != "" {
			return nil, invalid("%s.range %q gives first and last addresses: range_start and range_end must not be set too", field, rc.Range)
		}
		if !r.Prefix.Contains(dashStart) || dashStart.Less(r.Start) || dashStart.Is4() != p.Addr().Is4() {
			return nil, invalid("%s.range %q: %s is not a usable address of %s", field, rc.Range, dashStart, r.Prefix)
		}
		last := p.Addr()
		if !r.Prefix.Contains(last) || r.End.Less(last) {
			return nil, invalid("%s.range %q: %s is not a usable address of %s", field, rc.Range, last, r.Prefix)
		}
		r.Start, r.End = dashStart, last
	}
	bound := func(key, s string, dst *netip.Addr) error {
		if s == "" {
			return nil
		}
		a, err := netip.ParseAddr(strings.TrimSpace(s))
		if err != nil || a.Zone() != "" {
			return invalid("%s.%s %q is not an IP address", field, key, s)
		}
		a = a.Unmap()
		first, last := usableBounds(r.Prefix)
		if a.Is4() != first.Is4() || a.Less(first) || last.Less(a) {
			return invalid("%s.%s %s is not a usable address of range %s (%s-%s)", field, key, a, r.Prefix, first, last)
		}
		*dst = a
		return nil
	}
	if err := bound("range_start", rc.RangeStart, &r.Start); err != nil {
		return nil, err
	}
	if err := bound("range_end", rc.RangeEnd, &r.End); err != nil {
		return nil, err
	}
	for i, e := range rc.Exclude {
		ep, err := parseExclude(e)
		if err != nil {
			return nil, invalid("%s.exclude[%d] %q is not a CIDR or an IP address", field, i, e)
		}
		r.Exclude = append(r.Exclude, ep)
	}
	if gw.IsValid() && r.Prefix.Contains(gw) {
		r.Gateway = gw
	}
	if err := r.finish(); err != nil {
		return nil, invalid("%v", err)
	}
	return r, nil
}

func ifv(cond bool, v int) int {
	if cond {
		return v
	}
	return 0
}

// parseExclude reads "10.1.2.0/28" or "10.1.2.3" (one address).
func parseExclude(s string) (netip.Prefix, error) {
	s = strings.TrimSpace(s)
	if p, err := netip.ParsePrefix(s); err == nil && p.Addr().Zone() == "" {
		if p.Addr().Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" {
		return netip.Prefix{}, errors.New("bad address")
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// loadRequested collects specific addresses: runtimeConfig.ips (capability
// "ips"), args.cni.ips, or CNI_ARGS IP= (ignored when either of the others
// is given, as the CNI conventions ask), and the IPAMClaim reference.
func (c *Config) loadRequested(n *netConf, cniArgs string) error {
	add := func(source, s string) error {
		a, _, err := spec.ParseIPMaybePrefix(strings.TrimSpace(s))
		if err != nil || a.Zone() != "" {
			return invalid("%s: %q is not an IP address", source, s)
		}
		c.Requested = append(c.Requested, Requested{Addr: a.Unmap(), Source: source})
		return nil
	}
	for _, s := range n.RuntimeConfig.IPs {
		if err := add("runtimeConfig.ips", s); err != nil {
			return err
		}
	}
	if raw, ok := n.Args.CNI["ips"]; ok && !emptyJSON(raw) {
		var ips []string
		if err := json.Unmarshal(raw, &ips); err != nil {
			return invalid("args.cni.ips %s is not a list of strings", raw)
		}
		for _, s := range ips {
			if err := add("args.cni.ips", s); err != nil {
				return err
			}
		}
	}
	args, err := spec.ParseCNIArgs(cniArgs)
	if err != nil {
		return err
	}
	for _, kv := range args {
		switch kv[0] {
		case "K8S_POD_NAMESPACE":
			c.Pod.Namespace = kv[1]
		case "K8S_POD_NAME":
			c.Pod.Name = kv[1]
		case "K8S_POD_UID":
			c.Pod.UID = kv[1]
		case "IP":
			if len(c.Requested) > 0 && c.Requested[0].Source != "CNI_ARGS IP" {
				continue // args win over CNI_ARGS (CNI conventions)
			}
			for _, s := range strings.Split(kv[1], ",") {
				if strings.TrimSpace(s) != "" {
					if err := add("CNI_ARGS IP", s); err != nil {
						return spec.Errorf(spec.ErrInvalidEnvironment, "%v", err)
					}
				}
			}
		}
	}
	var uniq []Requested
	for _, r := range c.Requested {
		if !slices.ContainsFunc(uniq, func(u Requested) bool { return u.Addr == r.Addr }) {
			uniq = append(uniq, r)
		}
	}
	c.Requested = uniq
	for _, r := range c.Requested {
		var in *Range
		for _, rg := range c.Ranges {
			if rg.Requestable(r.Addr) {
				in = rg
				break
			}
		}
		if in == nil {
			return invalid("%s: requested address %s is not in any range of network %q (%s), or is a network, broadcast or gateway address", r.Source, r.Addr, c.Network, c.rangeList())
		}
		for _, o := range c.Requested {
			if o.Addr != r.Addr && in.Requestable(o.Addr) {
				return invalid("%s: requested addresses %s and %s are both in range %s: one address per range", r.Source, r.Addr, o.Addr, in.Prefix)
			}
		}
	}
	if raw, ok := n.Args.CNI[ClaimArg]; ok && !emptyJSON(raw) {
		if err := json.Unmarshal(raw, &c.Claim); err != nil || c.Claim == "" {
			return invalid("args.cni.%s %s is not an IPAMClaim name", ClaimArg, raw)
		}
		if len(c.Requested) > 0 {
			return invalid("args.cni.%s (%q) and requested addresses (%s) are both set: request static addresses or an IPAMClaim, not both", ClaimArg, c.Claim, c.Requested[0].Source)
		}
		if c.Pod.Namespace == "" {
			return spec.Errorf(spec.ErrInvalidEnvironment, "args.cni.%s (%q) needs the pod's namespace: CNI_ARGS K8S_POD_NAMESPACE is not set", ClaimArg, c.Claim)
		}
	}
	return nil
}

func (c *Config) rangeList() string {
	var s []string
	for _, r := range c.Ranges {
		s = append(s, r.Prefix.String())
	}
	return strings.Join(s, ", ")
}

// rangeOf returns the range a requested or claimed address belongs to.
func (c *Config) rangeOf(a netip.Addr) *Range {
	for _, r := range c.Ranges {
		if r.Requestable(a) {
			return r
		}
	}
	return nil
}
