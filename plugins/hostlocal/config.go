package hostlocal

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"

	"github.com/patchbay-cni/patchbay/skel"
	"github.com/patchbay-cni/patchbay/spec"
)

// DefaultDataDir is where allocations live unless ipam.dataDir says otherwise
// (the reference's default, so a node keeps its allocations when switching).
const DefaultDataDir = "/var/lib/cni/networks"

// rangeConf is one range as written in the config.
type rangeConf struct {
	Subnet     string `json:"subnet"`
	RangeStart string `json:"rangeStart,omitempty"`
	RangeEnd   string `json:"rangeEnd,omitempty"`
	Gateway    string `json:"gateway,omitempty"`
}

type ipamConf struct {
	rangeConf
	Type       string            `json:"type"`
	Routes     []json.RawMessage `json:"routes"`
	DataDir    string            `json:"dataDir"`
	ResolvConf string            `json:"resolvConf"`
	Ranges     [][]rangeConf     `json:"ranges"`
}

type netConf struct {
	Name          string    `json:"name"`
	CNIVersion    string    `json:"cniVersion"`
	IPAM          *ipamConf `json:"ipam"`
	RuntimeConfig struct {
		IPRanges [][]rangeConf `json:"ipRanges"`
		IPs      []string      `json:"ips"`
	} `json:"runtimeConfig"`
	Args *struct {
		CNI *struct {
			IPs []string `json:"ips"`
		} `json:"cni"`
	} `json:"args"`
}

// ipRange is a validated range: Start..End inclusive inside Subnet.
type ipRange struct {
	Subnet     netip.Prefix
	Start, End netip.Addr
	Gateway    netip.Addr
}

func (r *ipRange) contains(a netip.Addr) bool {
	return a.Is4() == r.Start.Is4() && r.Subnet.Contains(a) && a.Compare(r.Start) >= 0 && a.Compare(r.End) <= 0
}

func (r *ipRange) overlaps(o *ipRange) bool {
	return r.contains(o.Start) || r.contains(o.End) || o.contains(r.Start) || o.contains(r.End)
}

func (r *ipRange) String() string { return r.Start.String() + "-" + r.End.String() }

// rangeSet yields one address per ADD.
type rangeSet []ipRange

func (s rangeSet) rangeFor(a netip.Addr) *ipRange {
	for i := range s {
		if s[i].contains(a) {
			return &s[i]
		}
	}
	return nil
}

func (s rangeSet) String() string {
	parts := make([]string, len(s))
	for i := range s {
		parts[i] = s[i].String()
	}
	return strings.Join(parts, ",")
}

// requestedIP is a specific address asked for, with where it came from: an
// address asked for by several sources (Multus sends the same one as
// CNI_ARGS IP and runtimeConfig.ips) is one request naming them all.
type requestedIP struct {
	Addr    netip.Addr
	Sources []string
	Set     int // the range set holding it
}

// Source names where the address was asked for, for messages.
func (r requestedIP) Source() string { return strings.Join(r.Sources, " and ") }

// config is the validated IPAM configuration of one invocation.
type config struct {
	Network    string
	Version    string
	Dir        string // <dataDir>/<network>
	ResolvConf string
	Routes     []*spec.Route
	Sets       []rangeSet
	Requested  []requestedIP
}

func invalid(format string, a ...any) error {
	return spec.Errorf(spec.ErrInvalidNetworkConfig, format, a...)
}

// dataDirOf is the network's directory, all DEL needs: DEL does not
// validate the ranges, so that a configuration ADD refused (or one edited
// since ADD) can still be deleted; a DEL that keeps failing blocks the
// attachment's teardown. (The reference validates here and fails.)
func dataDirOf(a *skel.CmdArgs) (string, error) {
	var n netConf
	if err := a.DecodeConf(&n); err != nil {
		return "", err
	}
	dataDir := DefaultDataDir
	if n.IPAM != nil && n.IPAM.DataDir != "" {
		dataDir = n.IPAM.DataDir
	}
	if checkPath("ipam.dataDir", dataDir) != nil {
		return "", nil // no ADD can have allocated there
	}
	return filepath.Join(dataDir, a.Conf.Name), nil
}

// checkPath refuses a path no file system accepts (a NUL byte), naming the
// key: the kernel would answer EINVAL, an I/O error for every later verb.
func checkPath(key, path string) error {
	if strings.ContainsRune(path, 0) {
		return invalid("%s %q is invalid: contains a NUL byte", key, path)
	}
	return nil
}

// loadConfig parses and validates the configuration and requested addresses.
// Range sets are ordered as the reference orders them (runtimeConfig.ipRanges,
// then the legacy single range, then ipam.ranges) because the set index names
// the last_reserved_ip.<index> file.
func loadConfig(a *skel.CmdArgs) (*config, error) {
	var n netConf
	if err := a.DecodeConf(&n); err != nil {
		return nil, err
	}
	if n.IPAM == nil {
		return nil, invalid("missing required key \"ipam\"")
	}
	c := &config{Network: a.Conf.Name, Version: a.Version, ResolvConf: n.IPAM.ResolvConf}
	dataDir := n.IPAM.DataDir
	if dataDir == "" {
		dataDir = DefaultDataDir
	}
	if err := checkPath("ipam.dataDir", dataDir); err != nil {
		return nil, err
	}
	if err := checkPath("ipam.resolvConf", c.ResolvConf); err != nil {
		return nil, err
	}
	c.Dir = filepath.Join(dataDir, a.Conf.Name)

	type namedSet struct {
		field string
		rcs   []rangeConf
	}
	var sets []namedSet
	for i, s := range n.RuntimeConfig.IPRanges {
		sets = append(sets, namedSet{fmt.Sprintf("runtimeConfig.ipRanges[%d]", i), s})
	}
	if n.IPAM.Subnet != "" {
		sets = append(sets, namedSet{"ipam", []rangeConf{n.IPAM.rangeConf}})
	}
	for i, s := range n.IPAM.Ranges {
		sets = append(sets, namedSet{fmt.Sprintf("ipam.ranges[%d]", i), s})
	}
	if len(sets) == 0 {
		return nil, invalid("ipam: no IP ranges specified: set \"ipam.subnet\" or \"ipam.ranges\"")
	}
	var v4, v6 int
	for _, ns := range sets {
		set, err := parseRangeSet(ns.field, ns.rcs)
		if err != nil {
			return nil, err
		}
		if set[0].Start.Is4() {
			v4++
		} else {
			v6++
		}
		c.Sets = append(c.Sets, set)
	}
	if (v4 > 1 || v6 > 1) && !spec.GreaterOrEqual(c.Version, spec.V030) {
		return nil, invalid("cniVersion %q allows at most one range set per address family (got %d IPv4, %d IPv6)", c.Version, v4, v6)
	}
	for i := range c.Sets {
		for j := i + 1; j < len(c.Sets); j++ {
			if r1, r2 := setsOverlap(c.Sets[i], c.Sets[j]); r1 != nil {
				return nil, invalid("range set %d (%s) overlaps with range set %d (%s): %s and %s", i, sets[i].field, j, sets[j].field, r1, r2)
			}
		}
	}
	for i, raw := range n.IPAM.Routes {
		var rt spec.Route
		if err := json.Unmarshal(raw, &rt); err != nil {
			return nil, invalid("ipam.routes[%d] %s is invalid: %v", i, raw, err)
		}
		if !rt.Dst.IsValid() {
			return nil, invalid("ipam.routes[%d] %s: missing or invalid \"dst\"", i, raw)
		}
		if err := rt.Check(); err != nil {
			return nil, invalid("ipam.routes[%d].%v", i, err)
		}
		c.Routes = append(c.Routes, &rt)
	}
	if err := c.loadRequested(a, &n); err != nil {
		return nil, err
	}
	return c, c.placeRequested()
}

// placeRequested finds each requested address's range set: an address in
// none, or two different addresses for one set (ADD hands out one address
// per set), is refused naming the sources.
func (c *config) placeRequested() error {
	bySet := map[int]requestedIP{}
	for i := range c.Requested {
		r := &c.Requested[i]
		r.Set = -1
		for idx, set := range c.Sets {
			if set.rangeFor(r.Addr) != nil {
				r.Set = idx
				break
			}
		}
		if r.Set < 0 {
			return invalid("%s: requested IP %s is not in any range set of network %q (%s)", r.Source(), r.Addr, c.Network, c.setList())
		}
		if o, ok := bySet[r.Set]; ok {
			return invalid("requested IPs %s (from %s) and %s (from %s) are both in range set %d (%s) of network %q: one address per range set",
				o.Addr, o.Source(), r.Addr, r.Source(), r.Set, c.Sets[r.Set], c.Network)
		}
		bySet[r.Set] = *r
	}
	return nil
}

func (c *config) setList() string {
	parts := make([]string, len(c.Sets))
	for i, s := range c.Sets {
		parts[i] = s.String()
	}
	return strings.Join(parts, "; ")
}

func setsOverlap(s1, s2 rangeSet) (*ipRange, *ipRange) {
	for i := range s1 {
		for j := range s2 {
			if s1[i].overlaps(&s2[j]) {
				return &s1[i], &s2[j]
			}
		}
	}
	return nil, nil
}

func parseRangeSet(field string, rcs []rangeConf) (rangeSet, error) {
	if len(rcs) == 0 {
		return nil, invalid("%s: empty range set", field)
	}
	set := make(rangeSet, 0, len(rcs))
	for j, rc := range rcs {
		f := fmt.Sprintf("%s[%d]", field, j)
		if field == "ipam" {
			f = field
		}
		r, err := parseRange(f, rc)
		if err != nil {
			return nil, err
		}
		if len(set) > 0 && r.Start.Is4() != set[0].Start.Is4() {
			return nil, invalid("%s.subnet %q: range set mixes IPv4 and IPv6", f, rc.Subnet)
		}
		for k := range set {
			if set[k].overlaps(&r) {
				return nil, invalid("%s: range %s (subnet %s) overlaps with %s[%d] %s", f, r.String(), r.Subnet, field, k, set[k].String())
			}
		}
		set = append(set, r)
	}
	return set, nil
}

func parseAddrField(field, value string, p netip.Prefix) (netip.Addr, error) {
	a, err := netip.ParseAddr(value)
	if err != nil {
		return a, invalid("%s %q is not a valid IP address", field, value)
	}
	a = a.Unmap()
	if a.Zone() != "" {
		return a, invalid("%s %q: zones are not allowed", field, value)
	}
	if a.Is4() != p.Addr().Is4() {
		return a, invalid("%s %q is not in the address family of subnet %s", field, value, p)
	}
	return a, nil
}

func parseRange(f string, rc rangeConf) (ipRange, error) {
	var r ipRange
	if rc.Subnet == "" {
		return r, invalid("%s.subnet is required", f)
	}
	p, err := netip.ParsePrefix(rc.Subnet)
	if err != nil {
		return r, invalid("%s.subnet %q is not a valid CIDR subnet", f, rc.Subnet)
	}
	if p.Addr().Is4In6() {
		p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		if !p.IsValid() {
			return r, invalid("%s.subnet %q is not a valid CIDR subnet", f, rc.Subnet)
		}
	}
	if p != p.Masked() {
		return r, invalid("%s.subnet %q has host bits set: for a /%d the network address is %s", f, rc.Subnet, p.Bits(), p.Masked().Addr())
	}
	if p.Bits() > p.Addr().BitLen()-2 {
		return r, invalid("%s.subnet %q is too small to allocate from (at most /%d)", f, rc.Subnet, p.Addr().BitLen()-2)
	}
	r.Subnet = p
	network := p.Addr()
	r.Gateway = network.Next()
	if rc.Gateway != "" {
		if r.Gateway, err = parseAddrField(f+".gateway", rc.Gateway, p); err != nil {
			return r, err
		}
	}
	r.Start = network.Next()
	if rc.RangeStart != "" {
		if r.Start, err = parseAddrField(f+".rangeStart", rc.RangeStart, p); err != nil {
			return r, err
		}
		if !p.Contains(r.Start) {
			return r, invalid("%s.rangeStart %q is not in subnet %s", f, rc.RangeStart, p)
		}
	}
	r.End = lastAddr(p)
	if p.Addr().Is4() {
		r.End = r.End.Prev() // skip the broadcast address
	}
	if rc.RangeEnd != "" {
		if r.End, err = parseAddrField(f+".rangeEnd", rc.RangeEnd, p); err != nil {
			return r, err
		}
		if !p.Contains(r.End) {
			return r, invalid("%s.rangeEnd %q is not in subnet %s", f, rc.RangeEnd, p)
		}
	}
	if r.End.Less(r.Start) {
		return r, invalid("%s.rangeEnd %s is before rangeStart %s", f, r.End, r.Start)
	}
	return r, nil
}

// loadRequested collects specific addresses from CNI_ARGS IP= (a
// comma-separated list), args.cni.ips and runtimeConfig.ips, in that order;
// the same address from several sources is one request (the reference also
// merges them).
func (c *config) loadRequested(a *skel.CmdArgs, n *netConf) error {
	var env struct {
		IP string `cni:"IP"`
	}
	if err := a.LoadArgs(&env); err != nil {
		return err
	}
	add := func(source, s string) error {
		addr, _, err := spec.ParseIPMaybePrefix(strings.TrimSpace(s))
		if err != nil || addr.Zone() != "" {
			code := spec.ErrInvalidNetworkConfig
			if source == "CNI_ARGS IP" {
				code = spec.ErrInvalidEnvironment
			}
			return spec.Errorf(code, "%s: %q is not a valid IP address", source, s)
		}
		addr = addr.Unmap()
		for i := range c.Requested {
			if r := &c.Requested[i]; r.Addr == addr {
				if !slices.Contains(r.Sources, source) {
					r.Sources = append(r.Sources, source)
				}
				return nil
			}
		}
		c.Requested = append(c.Requested, requestedIP{Addr: addr, Sources: []string{source}})
		return nil
	}
	for _, s := range strings.Split(env.IP, ",") {
		if strings.TrimSpace(s) == "" {
			continue
		}
		if err := add("CNI_ARGS IP", s); err != nil {
			return err
		}
	}
	if n.Args != nil && n.Args.CNI != nil {
		for _, s := range n.Args.CNI.IPs {
			if err := add("args.cni.ips", s); err != nil {
				return err
			}
		}
	}
	for _, s := range n.RuntimeConfig.IPs {
		if err := add("runtimeConfig.ips", s); err != nil {
			return err
		}
	}
	return nil
}
