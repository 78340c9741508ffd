package spec

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net/netip"
)

// Result is the version-independent result model: a superset of every
// version's fields. Decode any version with ParseResult; write any version
// with Encode. What a target version cannot hold is dropped by Encode, as
// listed in its comment.
type Result struct {
	// CNIVersion is the version the result was decoded from (or should be
	// encoded in when Encode is given "").
	CNIVersion string
	Interfaces []*Interface
	IPs        []*IPConfig
	Routes     []*Route
	DNS        DNS
}

// Interface is an entry of `interfaces`. MTU, SocketPath and PciID are 1.1.0 fields.
type Interface struct {
	Name       string `json:"name"`
	Mac        string `json:"mac,omitempty"`
	MTU        int    `json:"mtu,omitempty"`
	Sandbox    string `json:"sandbox,omitempty"`
	SocketPath string `json:"socketPath,omitempty"`
	PciID      string `json:"pciID,omitempty"`
}

// IPConfig is an entry of `ips`. Address keeps the host bits ("10.1.0.5/16").
type IPConfig struct {
	// Interface indexes Result.Interfaces; nil when the result does not say
	// (IPAM results, up-converted 0.2.0 results).
	Interface *int
	Address   netip.Prefix
	Gateway   netip.Addr
}

// Route is an entry of `routes`. MTU, AdvMSS, Priority, Table and Scope are 1.1.0 fields.
type Route struct {
	Dst      netip.Prefix `json:"dst"`
	GW       netip.Addr   `json:"gw,omitzero"`
	MTU      int          `json:"mtu,omitempty"`
	AdvMSS   int          `json:"advmss,omitempty"`
	Priority int          `json:"priority,omitempty"`
	Table    *int         `json:"table,omitempty"`
	Scope    *int         `json:"scope,omitempty"`
}

// Check reports a route field the kernel cannot take as given. Netlink
// carries mtu, advmss, priority (the metric) and table as unsigned 32-bit
// numbers and scope as an 8-bit one: a value outside that would be
// truncated into another (table 4294967396 is table 100), so it is refused.
// The error names the field (e.g. "table 4294967396 is out of range ...");
// callers add where the route came from.
func (r *Route) Check() error {
	fields := []struct {
		name string
		v    *int
		max  int64
	}{{"mtu", &r.MTU, math.MaxUint32}, {"advmss", &r.AdvMSS, math.MaxUint32}, {"priority", &r.Priority, math.MaxUint32},
		{"table", r.Table, math.MaxUint32}, {"scope", r.Scope, math.MaxUint8}}
	for _, f := range fields {
		if f.v != nil && (*f.v < 0 || int64(*f.v) > f.max) {
			return fmt.Errorf("%s %d is out of range: must be 0-%d", f.name, *f.v, f.max)
		}
	}
	return nil
}

// DNS is the dns dictionary of configs and results.
type DNS struct {
	Nameservers []string `json:"nameservers,omitempty"`
	Domain      string   `json:"domain,omitempty"`
	Search      []string `json:"search,omitempty"`
	Options     []string `json:"options,omitempty"`
}

// IsEmpty reports whether no DNS field is set.
func (d DNS) IsEmpty() bool {
	return len(d.Nameservers) == 0 && d.Domain == "" && len(d.Search) == 0 && len(d.Options) == 0
}

// IsZero lets `omitzero` leave out a dns dictionary whose lists are empty
// but non-nil (as decoded from "nameservers": []), instead of writing {}.
func (d DNS) IsZero() bool { return d.IsEmpty() }

// IntPtr is a convenience for Interface indexes and optional route fields.
func IntPtr(i int) *int { return &i }

// Clone returns a deep copy.
func (r *Result) Clone() *Result {
	if r == nil {
		return nil
	}
	out := &Result{CNIVersion: r.CNIVersion, DNS: DNS{
		Nameservers: append([]string(nil), r.DNS.Nameservers...),
		Domain:      r.DNS.Domain,
		Search:      append([]string(nil), r.DNS.Search...),
		Options:     append([]string(nil), r.DNS.Options...),
	}}
	for _, i := range r.Interfaces {
		if i == nil {
			continue
		}
		c := *i
		out.Interfaces = append(out.Interfaces, &c)
	}
	for _, ip := range r.IPs {
		if ip == nil {
			continue
		}
		c := *ip
		if ip.Interface != nil {
			c.Interface = IntPtr(*ip.Interface)
		}
		out.IPs = append(out.IPs, &c)
	}
	for _, rt := range r.Routes {
		if rt == nil {
			continue
		}
		c := *rt
		if rt.Table != nil {
			c.Table = IntPtr(*rt.Table)
		}
		if rt.Scope != nil {
			c.Scope = IntPtr(*rt.Scope)
		}
		out.Routes = append(out.Routes, &c)
	}
	return out
}

// --- wire formats ---------------------------------------------------------

// 0.1.0 and 0.2.0: one IPv4 and one IPv6 block, routes inside each.
type wire020 struct {
	CNIVersion string         `json:"cniVersion,omitempty"`
	IP4        *wireIPConf020 `json:"ip4,omitempty"`
	IP6        *wireIPConf020 `json:"ip6,omitempty"`
	DNS        DNS            `json:"dns,omitzero"`
}

type wireIPConf020 struct {
	IP      netip.Prefix   `json:"ip"`
	Gateway netip.Addr     `json:"gateway,omitzero"`
	Routes  []wireRoute020 `json:"routes,omitempty"`
}

type wireRoute020 struct {
	Dst netip.Prefix `json:"dst"`
	GW  netip.Addr   `json:"gw,omitzero"`
}

// 0.3.0 through 1.1.0 share a shape; Encode fills only what a version has.
type wireCurrent struct {
	CNIVersion string       `json:"cniVersion,omitempty"`
	Interfaces []*Interface `json:"interfaces,omitempty"`
	IPs        []wireIP     `json:"ips,omitempty"`
	// IPsOld is the 0.3.0 spec text's name for ips; read only, never written.
	IPsOld []wireIP `json:"ip,omitempty"`
	Routes []*Route `json:"routes,omitempty"`
	DNS    DNS      `json:"dns,omitzero"`
}

type wireIP struct {
	Version   string       `json:"version,omitempty"` // 0.3.x/0.4.0 only: "4" or "6"
	Interface *int         `json:"interface,omitempty"`
	Address   netip.Prefix `json:"address"`
	Gateway   netip.Addr   `json:"gateway,omitzero"`
}

// ParseResult decodes a result of any supported version. The version comes
// from the data's cniVersion; if absent, from fallback; if that is empty too,
// from the shape (ip4/ip6 means 0.2.0, anything else the current version).
func ParseResult(data []byte, fallback string) (*Result, error) {
	var probe struct {
		CNIVersion string          `json:"cniVersion"`
		IP4        json.RawMessage `json:"ip4"`
		IP6        json.RawMessage `json:"ip6"`
	}
	if err := json.Unmarshal(data, &probe); err != nil {
		return nil, NewError(ErrDecodingFailure, "failed to decode result", err.Error())
	}
	if bytes.Equal(bytes.TrimSpace(data), []byte("null")) {
		return nil, Errorf(ErrDecodingFailure, "failed to decode result: not a JSON object (null)")
	}
	v := probe.CNIVersion
	if v == "" {
		v = fallback
	}
	if v == "" {
		if probe.IP4 != nil || probe.IP6 != nil {
			v = V020
		} else {
			v = Current
		}
	}
	if !IsSupported(v) {
		return nil, Errorf(ErrIncompatibleVersion, "result cniVersion %q is not supported (supported: %v)", v, AllVersions)
	}
	r := &Result{CNIVersion: v}
	if Compare(v, V030) < 0 {
		var w wire020
		if err := json.Unmarshal(data, &w); err != nil {
			return nil, NewError(ErrDecodingFailure, "failed to decode "+v+" result", err.Error())
		}
		r.DNS = w.DNS
		for _, blk := range []*wireIPConf020{w.IP4, w.IP6} {
			if blk == nil {
				continue
			}
			if !blk.IP.IsValid() {
				return nil, Errorf(ErrDecodingFailure, "%s result: ip block without a valid \"ip\"", v)
			}
			r.IPs = append(r.IPs, &IPConfig{Address: blk.IP, Gateway: blk.Gateway})
			for i, rt := range blk.Routes {
				if !rt.Dst.IsValid() {
					return nil, Errorf(ErrDecodingFailure, "%s result: routes[%d] has no valid \"dst\"", v, i)
				}
				r.Routes = append(r.Routes, &Route{Dst: rt.Dst, GW: rt.GW})
			}
		}
		return r, nil
	}
	var w wireCurrent
	if err := json.Unmarshal(data, &w); err != nil {
		return nil, NewError(ErrDecodingFailure, "failed to decode "+v+" result", err.Error())
	}
	ips := w.IPs
	if len(ips) == 0 && v == V030 {
		ips = w.IPsOld
	}
	r.Interfaces = w.Interfaces
	r.Routes = w.Routes
	r.DNS = w.DNS
	for i, ip := range ips {
		if !ip.Address.IsValid() {
			return nil, Errorf(ErrDecodingFailure, "%s result: ips[%d] has no valid \"address\"", v, i)
		}
		idx := ip.Interface
		if idx != nil && *idx < 0 { // "-1" is how some plugins say "no interface"
			idx = nil
		}
		r.IPs = append(r.IPs, &IPConfig{Interface: idx, Address: ip.Address, Gateway: ip.Gateway})
	}
	for i, rt := range r.Routes {
		if rt == nil || !rt.Dst.IsValid() {
			return nil, Errorf(ErrDecodingFailure, "%s result: routes[%d] has no valid \"dst\"", v, i)
		}
		if err := rt.Check(); err != nil {
			return nil, Errorf(ErrDecodingFailure, "%s result: routes[%d]: %v", v, i, err)
		}
	}
	for i, in := range r.Interfaces {
		if in == nil {
			return nil, Errorf(ErrDecodingFailure, "%s result: interfaces[%d] is null", v, i)
		}
	}
	return r, nil
}

// Encode writes the result in the given version's format, with cniVersion set
// to it (r.CNIVersion, or Current, when version is ""). Losses, following the
// spec-upgrades table:
//   - to 0.1.0/0.2.0: interfaces and interface indexes are dropped; only the
//     first IPv4 and first IPv6 address are kept; a route is kept only in the
//     block of its address family, so routes of a family with no address are
//     dropped; 1.1.0 route and interface fields are dropped.
//   - to 0.3.0/0.3.1/0.4.0/1.0.0: 1.1.0 fields (interface mtu/socketPath/pciID,
//     route mtu/advmss/priority/table/scope) are dropped.
func (r *Result) Encode(version string) ([]byte, error) {
	if version == "" {
		version = r.CNIVersion
	}
	if version == "" {
		version = Current
	}
	if !IsSupported(version) {
		return nil, Errorf(ErrIncompatibleVersion, "cannot encode result as cniVersion %q (supported: %v)", version, AllVersions)
	}
	if err := r.checkEncodable(); err != nil {
		return nil, err
	}
	if Compare(version, V030) < 0 {
		return json.Marshal(r.to020(version))
	}
	w := wireCurrent{CNIVersion: version, DNS: r.DNS}
	full := Compare(version, V110) >= 0
	withVersion := Compare(version, V100) < 0
	// Nil entries (only possible in a model built in code) are skipped.
	for _, in := range r.Interfaces {
		if in == nil {
			continue
		}
		c := *in
		if !full {
			c.MTU, c.SocketPath, c.PciID = 0, "", ""
		}
		w.Interfaces = append(w.Interfaces, &c)
	}
	for _, ip := range r.IPs {
		if ip == nil {
			continue
		}
		wi := wireIP{Interface: ip.Interface, Address: ip.Address, Gateway: ip.Gateway}
		if withVersion {
			wi.Version = "6"
			if ip.Address.Addr().Is4() {
				wi.Version = "4"
			}
		}
		w.IPs = append(w.IPs, wi)
	}
	for _, rt := range r.Routes {
		if rt == nil {
			continue
		}
		c := *rt
		if !full {
			c = Route{Dst: rt.Dst, GW: rt.GW}
		}
		w.Routes = append(w.Routes, &c)
	}
	return json.Marshal(&w)
}

// checkEncodable refuses what a plugin may build in code but no reader could
// parse back: an address or route destination that is not set.
func (r *Result) checkEncodable() error {
	for i, ip := range r.IPs {
		if ip != nil && !ip.Address.IsValid() {
			return Errorf(ErrInternal, "cannot encode result: ips[%d] has no address", i)
		}
	}
	for i, rt := range r.Routes {
		if rt != nil && !rt.Dst.IsValid() {
			return Errorf(ErrInternal, "cannot encode result: routes[%d] has no destination", i)
		}
	}
	return nil
}

func (r *Result) to020(version string) *wire020 {
	w := &wire020{CNIVersion: version, DNS: r.DNS}
	for _, ip := range r.IPs {
		if ip == nil {
			continue
		}
		blk := &wireIPConf020{IP: ip.Address, Gateway: ip.Gateway}
		if ip.Address.Addr().Is4() {
			if w.IP4 == nil {
				w.IP4 = blk
			}
		} else if w.IP6 == nil {
			w.IP6 = blk
		}
	}
	for _, rt := range r.Routes {
		if rt == nil {
			continue
		}
		blk := w.IP6
		if rt.Dst.Addr().Is4() {
			blk = w.IP4
		}
		if blk != nil {
			blk.Routes = append(blk.Routes, wireRoute020{Dst: rt.Dst, GW: rt.GW})
		}
	}
	return w
}

// Convert re-encodes result data of any version as the target version.
func Convert(data []byte, fallback, target string) ([]byte, error) {
	r, err := ParseResult(data, fallback)
	if err != nil {
		return nil, err
	}
	return r.Encode(target)
}

// MarshalJSON encodes in r.CNIVersion's format (Current if unset), so a
// Result can be embedded in other JSON (caches, prevResult) directly. The
// value receiver makes a Result held by value encode this way too, instead
// of silently falling back to Go's field-by-field encoding.
func (r Result) MarshalJSON() ([]byte, error) { return r.Encode("") }

// UnmarshalJSON decodes any version, taking the version from the data.
func (r *Result) UnmarshalJSON(data []byte) error {
	if bytes.Equal(bytes.TrimSpace(data), []byte("null")) {
		return nil
	}
	p, err := ParseResult(data, r.CNIVersion)
	if err != nil {
		return err
	}
	*r = *p
	return nil
}

// String is for logs.
func (r *Result) String() string {
	b, err := r.Encode("")
	if err != nil {
		return fmt.Sprintf("<invalid result: %v>", err)
	}
	return string(b)
}
