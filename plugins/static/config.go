package static

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/patchbay-cni/patchbay/internal/confcheck"
	"github.com/patchbay-cni/patchbay/skel"
	"github.com/patchbay-cni/patchbay/spec"
)

// netConf is the part of the full network configuration static reads (an
// IPAM plugin receives its parent's whole config). Addresses and routes are
// decoded as strings so a bad value gets a code-7 error naming its field
// rather than a JSON decoding error.
type netConf struct {
	CNIVersion    string    `json:"cniVersion"`
	IPAM          *ipamConf `json:"ipam"`
	RuntimeConfig struct {
		IPs []string `json:"ips,omitempty"`
	} `json:"runtimeConfig,omitzero"`
	Args *struct {
		CNI *struct {
			IPs []string `json:"ips"`
		} `json:"cni"`
	} `json:"args"`
}

type ipamConf struct {
	Type      string     `json:"type"`
	Routes    []rawRoute `json:"routes"`
	Addresses []rawAddr  `json:"addresses,omitempty"`
	DNS       spec.DNS   `json:"dns"`
}

type rawAddr struct {
	Address string `json:"address"`
	Gateway string `json:"gateway,omitempty"`
}

type rawRoute struct {
	Dst      string `json:"dst"`
	GW       string `json:"gw,omitempty"`
	MTU      int    `json:"mtu,omitempty"`
	AdvMSS   int    `json:"advmss,omitempty"`
	Priority int    `json:"priority,omitempty"`
	Table    *int   `json:"table,omitempty"`
	Scope    *int   `json:"scope,omitempty"`
}

// envArgs are the CNI_ARGS keys the reference reads: comma-separated lists.
type envArgs struct {
	IP      string
	GATEWAY string
}

// loaded is the validated configuration.
type loaded struct {
	addrs  []*spec.IPConfig
	routes []*spec.Route
	dns    spec.DNS
}

func (l *loaded) result() *spec.Result {
	return &spec.Result{IPs: l.addrs, Routes: l.routes, DNS: l.dns}
}

// load builds the address list with the reference's precedence: the
// configured addresses plus CNI_ARGS IP (with CNI_ARGS GATEWAY assigned to
// each CNI_ARGS IP address whose subnet holds it); args.cni.ips replaces that list, and
// runtimeConfig.ips (capability "ips") replaces it again.
func load(a *skel.CmdArgs) (*loaded, error) {
	var n netConf
	if err := a.DecodeConf(&n); err != nil {
		return nil, err
	}
	if n.IPAM == nil {
		return nil, spec.Errorf(spec.ErrInvalidNetworkConfig, "missing required key \"ipam\"")
	}
	if err := confcheck.DNS("ipam.dns", n.IPAM.DNS); err != nil {
		return nil, err
	}
	l := &loaded{dns: n.IPAM.DNS}
	for i, ra := range n.IPAM.Addresses {
		field := fmt.Sprintf("ipam.addresses[%d]", i)
		ip, err := parseAddr(field+".address", ra.Address, spec.ErrInvalidNetworkConfig)
		if err != nil {
			return nil, err
		}
		if ra.Gateway != "" {
			gw, err := netip.ParseAddr(ra.Gateway)
			if err != nil || gw.Zone() != "" {
				return nil, spec.Errorf(spec.ErrInvalidNetworkConfig, "%s.gateway %q is not an IP address", field, ra.Gateway)
			}
			ip.Gateway = gw.Unmap()
			if ip.Gateway.Is4() != ip.Address.Addr().Is4() {
				return nil, spec.Errorf(spec.ErrInvalidNetworkConfig, "%s.gateway %q is not in the address family of %q", field, ra.Gateway, ra.Address)
			}
		}
		l.addrs = append(l.addrs, ip)
	}

	var ea envArgs
	if err := a.LoadArgs(&ea); err != nil {
		return nil, err
	}
	var fromArgs []*spec.IPConfig
	if ea.IP != "" {
		for _, item := range strings.Split(ea.IP, ",") {
			ip, err := parseAddr("CNI_ARGS IP", strings.TrimSpace(item), spec.ErrInvalidEnvironment)
			if err != nil {
				return nil, err
			}
			fromArgs = append(fromArgs, ip)
		}
	}
	if ea.GATEWAY != "" {
		for _, item := range strings.Split(ea.GATEWAY, ",") {
			gw, err := netip.ParseAddr(strings.TrimSpace(item))
			if err != nil || gw.Zone() != "" {
				return nil, spec.Errorf(spec.ErrInvalidEnvironment, "CNI_ARGS GATEWAY entry %q is not an IP address", item)
			}
			gw = gw.Unmap()
			// Like the reference, GATEWAY only fills CNI_ARGS IP addresses.
			for _, ip := range fromArgs {
				if ip.Address.Masked().Contains(gw) {
					ip.Gateway = gw
				}
			}
		}
	}
	l.addrs = append(l.addrs, fromArgs...)
	if n.Args != nil && n.Args.CNI != nil && len(n.Args.CNI.IPs) > 0 {
		addrs, err := parseList("args.cni.ips", n.Args.CNI.IPs)
		if err != nil {
			return nil, err
		}
		l.addrs = addrs
	}
	if len(n.RuntimeConfig.IPs) > 0 {
		addrs, err := parseList("runtimeConfig.ips", n.RuntimeConfig.IPs)
		if err != nil {
			return nil, err
		}
		l.addrs = addrs
	}

	version := spec.ConfigVersion(n.CNIVersion)
	if spec.Compare(version, spec.V030) < 0 {
		v4, v6 := 0, 0
		for _, ip := range l.addrs {
			if ip.Address.Addr().Is4() {
				v4++
			} else {
				v6++
			}
		}
		if v4 > 1 || v6 > 1 {
			return nil, spec.Errorf(spec.ErrInvalidNetworkConfig, "cniVersion %s allows at most one IPv4 and one IPv6 address, got %d IPv4 and %d IPv6", version, v4, v6)
		}
	}

	for i, rr := range n.IPAM.Routes {
		rt, err := parseRoute(fmt.Sprintf("ipam.routes[%d]", i), rr)
		if err != nil {
			return nil, err
		}
		l.routes = append(l.routes, rt)
	}
	return l, nil
}

// parseAddr parses an address in CIDR notation, host bits kept; an
// IPv4-mapped IPv6 address becomes IPv4, as the reference canonicalizes.
func parseAddr(field, s string, code uint) (*spec.IPConfig, error) {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return nil, spec.Errorf(code, "%s %q is not an address in CIDR notation (e.g. 10.1.0.5/24)", field, s)
	}
	if p.Addr().Is4In6() {
		if p.Bits() < 96 {
			return nil, spec.Errorf(code, "%s %q: an IPv4-mapped address needs a prefix length of at least 96", field, s)
		}
		p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
	}
	return &spec.IPConfig{Address: p}, nil
}

func parseList(field string, list []string) ([]*spec.IPConfig, error) {
	out := make([]*spec.IPConfig, 0, len(list))
	for i, s := range list {
		ip, err := parseAddr(fmt.Sprintf("%s[%d]", field, i), s, spec.ErrInvalidNetworkConfig)
		if err != nil {
			return nil, err
		}
		out = append(out, ip)
	}
	return out, nil
}

func parseRoute(field string, rr rawRoute) (*spec.Route, error) {
	if rr.Dst == "" {
		return nil, spec.Errorf(spec.ErrInvalidNetworkConfig, "%s.dst is required", field)
	}
	dst, err := netip.ParsePrefix(rr.Dst)
	if err != nil {
		return nil, spec.Errorf(spec.ErrInvalidNetworkConfig, "%s.dst %q is not a prefix in CIDR notation", field, rr.Dst)
	}
	if dst.Addr().Is4In6() && dst.Bits() >= 96 {
		dst = netip.PrefixFrom(dst.Addr().Unmap(), dst.Bits()-96)
	}
	// A route's destination is a network: drop stray host bits.
	rt := &spec.Route{Dst: dst.Masked(), MTU: rr.MTU, AdvMSS: rr.AdvMSS, Priority: rr.Priority, Table: rr.Table, Scope: rr.Scope}
	if rr.GW != "" {
		gw, err := netip.ParseAddr(rr.GW)
		if err != nil || gw.Zone() != "" {
			return nil, spec.Errorf(spec.ErrInvalidNetworkConfig, "%s.gw %q is not an IP address", field, rr.GW)
		}
		rt.GW = gw.Unmap()
	}
	if err := rt.Check(); err != nil {
		return nil, spec.Errorf(spec.ErrInvalidNetworkConfig, "%s.%v", field, err)
	}
	return rt, nil
}
