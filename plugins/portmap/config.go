package portmap

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"

	"github.com/patchbay-cni/patchbay/internal/firewall"
	"github.com/patchbay-cni/patchbay/skel"
	"github.com/patchbay-cni/patchbay/spec"
)

// Backend names, as the reference's "backend" key spells them.
const (
	backendNFT = firewall.NFTables
	backendIPT = firewall.IPTables
)

// defaultMarkBit is the reference's: Kubernetes uses 14 and 15, Calico 20-31.
const defaultMarkBit = 13

// conf is the plugin's configuration: the reference portmap's keys.
type conf struct {
	spec.NetConf
	Backend              *string   `json:"backend,omitempty"`
	SNAT                 *bool     `json:"snat,omitempty"`
	ConditionsV4         *[]string `json:"conditionsV4,omitempty"`
	ConditionsV6         *[]string `json:"conditionsV6,omitempty"`
	MasqAll              bool      `json:"masqAll,omitempty"`
	MarkMasqBit          *int      `json:"markMasqBit,omitempty"`
	ExternalSetMarkChain *string   `json:"externalSetMarkChain,omitempty"`
	RuntimeConfig        struct {
		PortMappings []spec.PortMapping `json:"portMappings,omitempty"`
	} `json:"runtimeConfig,omitzero"`
}

// mapping is one validated port mapping. HostIP is invalid when the mapping
// applies to every local address.
type mapping struct {
	HostPort      uint16
	ContainerPort uint16
	Proto         string // tcp, udp or sctp
	HostIP        netip.Addr
}

// proto is the mapping's protocol as a firewall value.
func (m mapping) proto() firewall.Proto {
	switch m.Proto {
	case "udp":
		return firewall.UDP
	case "sctp":
		return firewall.SCTP
	}
	return firewall.TCP
}

// forFamily reports whether the mapping applies to a container address of
// the given family (a hostIP pins it to its own family).
func (m mapping) forFamily(v6 bool) bool {
	return !m.HostIP.IsValid() || m.HostIP.Is6() == v6
}

// daddr is the destination to match, if any: an unspecified hostIP means
// "every address of that family".
func (m mapping) daddr() (netip.Addr, bool) {
	if !m.HostIP.IsValid() || m.HostIP.IsUnspecified() {
		return netip.Addr{}, false
	}
	return m.HostIP, true
}

// request is everything a backend needs for one attachment. Every string
// in it that reaches a rule is a validated firewall value.
type request struct {
	Key       string           // identifies this attachment's rules (see attachKey)
	Comment   firewall.Comment // Key, as the rules' comment
	NetPrefix string           // every key of this network starts with it (for GC)
	ContV4    netip.Addr
	ContV6    netip.Addr
	// Net4 and Net6 are the container's prefixes: peers on the same subnet
	// reaching the host port are masqueraded too, or the container would
	// answer them directly.
	Net4     netip.Prefix
	Net6     netip.Prefix
	Mappings []mapping
	SNAT     bool
	MasqAll  bool
	Mark     firewall.Mark
	// SetMarkChain is externalSetMarkChain, the iptables chain of someone
	// else's that sets the masquerade mark (ExternalMark says it is set).
	SetMarkChain firewall.Name
	ExternalMark bool
	// CondV4 and CondV6 are conditionsV4/V6 parsed into matches.
	CondV4 []firewall.Match
	CondV6 []firewall.Match
}

// parsed is the decoded and validated configuration.
type parsed struct {
	c       conf
	backend firewall.Kind
	req     request
}

func invalid(format string, a ...any) error {
	return spec.Errorf(spec.ErrInvalidNetworkConfig, format, a...)
}

// parse decodes and validates the configuration; it never touches the
// kernel, so that a request without mappings does no work at all.
func parse(a *skel.CmdArgs) (*parsed, error) {
	p := &parsed{}
	if err := json.Unmarshal(a.StdinData, &p.c); err != nil {
		return nil, spec.NewError(spec.ErrDecodingFailure, "failed to decode portmap configuration", err.Error())
	}
	c := &p.c
	b, err := chooseBackend(c)
	if err != nil {
		return nil, err
	}
	p.backend = b
	if c.MarkMasqBit != nil && c.ExternalSetMarkChain != nil {
		return nil, invalid("\"markMasqBit\" and \"externalSetMarkChain\" cannot both be set")
	}
	bit := defaultMarkBit
	if c.MarkMasqBit != nil {
		bit = *c.MarkMasqBit
	}
	r := &p.req
	if r.Mark, err = firewall.MarkBit("markMasqBit", bit); err != nil {
		return nil, err
	}
	r.SNAT = c.SNAT == nil || *c.SNAT
	r.MasqAll = c.MasqAll
	if c.ExternalSetMarkChain != nil {
		if r.SetMarkChain, err = firewall.ParseChain("externalSetMarkChain", *c.ExternalSetMarkChain); err != nil {
			return nil, err
		}
		r.ExternalMark = true
	}
	if r.CondV4, err = conditions("conditionsV4", c.ConditionsV4, firewall.IPv4); err != nil {
		return nil, err
	}
	if r.CondV6, err = conditions("conditionsV6", c.ConditionsV6, firewall.IPv6); err != nil {
		return nil, err
	}
	for i, pm := range c.RuntimeConfig.PortMappings {
		m, err := validMapping(i, pm)
		if err != nil {
			return nil, err
		}
		r.Mappings = append(r.Mappings, m)
	}
	r.Key = attachKey(c.Name, a.ContainerID, a.IfName)
	r.NetPrefix = netPrefix(c.Name)
	if r.Comment, err = firewall.NewComment("portmap rule comment (network name, container ID and ifname)", r.Key); err != nil {
		return nil, err
	}
	return p, nil
}

// conditions parses conditionsV4/V6 (see firewall.ParseConditions for the
// grammars). A protocol is refused: every mapping sets its own.
func conditions(key string, elems *[]string, fam firewall.Family) ([]firewall.Match, error) {
	if elems == nil {
		return nil, nil
	}
	m, _, err := firewall.ParseConditions(key, *elems, fam)
	if err != nil {
		return nil, err
	}
	for _, x := range m {
		if _, ok := x.(firewall.L4); ok {
			return nil, firewall.Invalid(key, strings.Join(*elems, " "), "must not match a protocol: each port mapping sets its own")
		}
	}
	return m, nil
}

func validMapping(i int, pm spec.PortMapping) (mapping, error) {
	field := fmt.Sprintf("runtimeConfig.portMappings[%d]", i)
	var m mapping
	if pm.HostPort < 1 || pm.HostPort > 65535 {
		return m, invalid("%s.hostPort %d is out of range 1..65535", field, pm.HostPort)
	}
	if pm.ContainerPort < 1 || pm.ContainerPort > 65535 {
		return m, invalid("%s.containerPort %d is out of range 1..65535", field, pm.ContainerPort)
	}
	m.HostPort, m.ContainerPort = uint16(pm.HostPort), uint16(pm.ContainerPort)
	switch proto := strings.ToLower(pm.Protocol); proto {
	case "":
		m.Proto = "tcp"
	case "tcp", "udp", "sctp":
		m.Proto = proto
	default:
		return m, invalid("%s.protocol %q is not supported (expected tcp, udp or sctp)", field, pm.Protocol)
	}
	if pm.HostIP != "" {
		ip, err := netip.ParseAddr(pm.HostIP)
		if err != nil || ip.Zone() != "" {
			return m, invalid("%s.hostIP %q is not an IP address", field, pm.HostIP)
		}
		m.HostIP = ip.Unmap()
	}
	return m, nil
}

// chooseBackend applies "backend". Unlike the reference (whose default is
// iptables), ours is nftables; but a config that carries only
// iptables-specific options and no "backend" is taken to mean iptables, so
// configs written for the reference keep working.
func chooseBackend(c *conf) (firewall.Kind, error) {
	byBackend := map[firewall.Kind][]string{}
	if c.ExternalSetMarkChain != nil {
		byBackend[backendIPT] = append(byBackend[backendIPT], "externalSetMarkChain")
	}
	if b := conditionsBackend(c.ConditionsV4); b != "" {
		byBackend[b] = append(byBackend[b], "conditionsV4")
	}
	if b := conditionsBackend(c.ConditionsV6); b != "" {
		byBackend[b] = append(byBackend[b], "conditionsV6")
	}
	var b firewall.Kind
	switch {
	case c.Backend != nil:
		b = firewall.Kind(*c.Backend)
		if b != backendNFT && b != backendIPT {
			return "", invalid("\"backend\" %q is not supported (expected %q or %q)", b, backendNFT, backendIPT)
		}
	case len(byBackend[backendIPT]) > 0 && len(byBackend[backendNFT]) == 0:
		b = backendIPT
	default:
		b = backendNFT
	}
	other := backendIPT
	if b == backendIPT {
		other = backendNFT
	}
	if opts := byBackend[other]; len(opts) > 0 {
		return "", invalid("backend %q was chosen but the configuration has %s-specific options %v", b, other, opts)
	}
	return b, nil
}

// conditionsBackend tells iptables conditions ("-s ...", "! -d ...") from
// nftables ones ("ip saddr ..."), as the reference does.
func conditionsBackend(conds *[]string) firewall.Kind {
	if conds == nil {
		return ""
	}
	switch firewall.ConditionsSyntax(*conds) {
	case firewall.IPTablesSyntax:
		return backendIPT
	case firewall.NFTablesSyntax:
		return backendNFT
	}
	return ""
}

// containerIPs picks the first IPv4 and first IPv6 address of prevResult
// that belong to the container's interface (CNI_IFNAME, in a sandbox);
// addresses whose interface is not said are taken too.
func containerIPs(res *spec.Result, ifName string) (v4, v6 netip.Prefix) {
	for _, ip := range res.IPs {
		if i := ip.Interface; i != nil && *i >= 0 && *i < len(res.Interfaces) {
			in := res.Interfaces[*i]
			if in.Sandbox == "" || in.Name != ifName {
				continue
			}
		}
		a := ip.Address.Addr().Unmap()
		bits := ip.Address.Bits()
		if a.Is4() && bits > 32 {
			bits -= 96 // a v4-mapped address with its prefix length
		}
		p := netip.PrefixFrom(a, bits)
		if a.Is4() && !v4.IsValid() {
			v4 = p
		} else if a.Is6() && !v6.IsValid() {
			v6 = p
		}
	}
	return v4, v6
}

// family is the container's address of one family, with its conditions.
type family struct {
	fam   firewall.Family
	cont  netip.Addr
	net   netip.Prefix
	conds []firewall.Match
}

// families are the IP families the container has an address of.
func (r *request) families() []family {
	var out []family
	for _, f := range []family{{firewall.IPv4, r.ContV4, r.Net4, r.CondV4}, {firewall.IPv6, r.ContV6, r.Net6, r.CondV6}} {
		if f.cont.IsValid() {
			out = append(out, f)
		}
	}
	return out
}

// setContainer fills the container addresses from prevResult.
func (r *request) setContainer(res *spec.Result, ifName string) error {
	r.Net4, r.Net6 = containerIPs(res, ifName)
	r.ContV4, r.ContV6 = r.Net4.Addr(), r.Net6.Addr()
	if !r.ContV4.IsValid() && !r.ContV6.IsValid() {
		return invalid("prevResult has no IP address on the container interface %q to forward ports to", ifName)
	}
	return r.checkFamilies()
}

// checkFamilies makes sure every hostIP has a container address of its family.
func (r *request) checkFamilies() error {
	for i, m := range r.Mappings {
		if !m.HostIP.IsValid() {
			continue
		}
		if (m.HostIP.Is4() && !r.ContV4.IsValid()) || (m.HostIP.Is6() && !r.ContV6.IsValid()) {
			fam := "IPv4"
			if m.HostIP.Is6() {
				fam = "IPv6"
			}
			return invalid("runtimeConfig.portMappings[%d].hostIP %q is %s but the container has no %s address in prevResult", i, m.HostIP, fam, fam)
		}
	}
	return nil
}

// Keys. Rules are tagged with "<network> <containerID> <ifname>" (nftables
// rule comments, iptables comments and chain-name hashes). Both IDs are
// spelled without spaces, so the network part is an exact prefix and GC of
// one network never touches another's rules. Long parts are hashed to keep
// the comment under nftables' 128-byte limit.
const (
	maxNetPart    = 40
	maxAttachPart = 80
)

func netPrefix(network string) string {
	if len(network) > maxNetPart {
		return "#" + shortHash(network, 16) + " "
	}
	return network + " "
}

func attachKey(network, containerID, ifName string) string {
	att := containerID + " " + ifName
	if len(att) > maxAttachPart {
		att = "#" + shortHash(att, 32)
	}
	return netPrefix(network) + att
}

func shortHash(s string, n int) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])[:n]
}
