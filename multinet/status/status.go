// Package status builds the network status annotation
// k8s.v1.cni.cncf.io/network-status (multi-net spec v1.3 §5) from CNI
// results of any version. Pure: no I/O.
package status

import (
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"strings"

	"github.com/patchbay-cni/patchbay/spec"
)

// Entry is one element of the status list, with the keys of §5.3 (plus
// "mtu", which Multus writes, and "infiniband-guid", which the spec's own
// example in §5.4 uses for an IP-over-InfiniBand attachment).
type Entry struct {
	// Name is "namespace/name" of the NetworkAttachmentDefinition, or of
	// the cluster-wide default network (§5.3.1).
	Name      string   `json:"name"`
	Interface string   `json:"interface,omitempty"`
	IPs       []string `json:"ips,omitempty"`
	Mac       string   `json:"mac,omitempty"`
	MTU       int      `json:"mtu,omitempty"`
	// Default is required (§5.3.5), so it is always written, also as false.
	Default        bool        `json:"default"`
	DNS            *DNS        `json:"dns,omitempty"`
	DefaultRoute   []string    `json:"default-route,omitempty"`
	DeviceInfo     *DeviceInfo `json:"device-info,omitempty"`
	InfinibandGUID string      `json:"infiniband-guid,omitempty"`
}

// DNS is the "dns" map (§5.3.6): only the three keys the spec defines.
type DNS struct {
	Nameservers []string `json:"nameservers,omitempty"`
	Domain      string   `json:"domain,omitempty"`
	Search      []string `json:"search,omitempty"`
}

// DeviceInfo is the "device-info" map (§5.3.7), whose keys the Device
// Information Specification defines: a type, a version, and the map of that
// type. The implementation reads it from the file the delegate wrote.
type DeviceInfo struct {
	Type      string     `json:"type"`
	Version   string     `json:"version"`
	Pci       *PciDevice `json:"pci,omitempty"`
	Vdpa      *VdpaDev   `json:"vdpa,omitempty"`
	VhostUser *VhostUser `json:"vhost-user,omitempty"`
	Memif     *Memif     `json:"memif,omitempty"`
}

// Device-info types.
const (
	DeviceTypePCI       = "pci"
	DeviceTypeVdpa      = "vdpa"
	DeviceTypeVhostUser = "vhost-user"
	DeviceTypeMemif     = "memif"
)

type PciDevice struct {
	PciAddress        string `json:"pci-address,omitempty"`
	Vhostnet          string `json:"vhost-net,omitempty"`
	RdmaDevice        string `json:"rdma-device,omitempty"`
	PfPciAddress      string `json:"pf-pci-address,omitempty"`
	RepresentorDevice string `json:"representor-device,omitempty"`
}

type VdpaDev struct {
	ParentDevice string `json:"parent-device,omitempty"`
	Driver       string `json:"driver,omitempty"`
	// Device is the vdpa device name; the spec's §5.4 example carries it.
	Device            string `json:"device,omitempty"`
	Path              string `json:"path,omitempty"`
	PciAddress        string `json:"pci-address,omitempty"`
	PfPciAddress      string `json:"pf-pci-address,omitempty"`
	RepresentorDevice string `json:"representor-device,omitempty"`
}

type VhostUser struct {
	Mode string `json:"mode,omitempty"`
	Path string `json:"path,omitempty"`
}

type Memif struct {
	Role string `json:"role,omitempty"`
	Path string `json:"path,omitempty"`
	Mode string `json:"mode,omitempty"`
}

// Validate checks that the map has the keys the Device Information
// Specification requires: type, version, and the map named by type.
func (d *DeviceInfo) Validate() error {
	if d.Type == "" || d.Version == "" {
		return fmt.Errorf("device-info: \"type\" and \"version\" are required (got type %q, version %q)", d.Type, d.Version)
	}
	present := map[string]bool{DeviceTypePCI: d.Pci != nil, DeviceTypeVdpa: d.Vdpa != nil,
		DeviceTypeVhostUser: d.VhostUser != nil, DeviceTypeMemif: d.Memif != nil}
	has, known := present[d.Type]
	if !known {
		return fmt.Errorf("device-info: unknown type %q (known: pci, vdpa, vhost-user, memif)", d.Type)
	}
	if !has {
		return fmt.Errorf("device-info: type %q but no %q map", d.Type, d.Type)
	}
	return nil
}

// Input is what one attachment contributes to its status entry.
type Input struct {
	// Name is "namespace/name" (NetworkName builds it).
	Name string
	// Default marks the cluster-wide default network's entry (§5.2).
	Default bool
	// Result is the attachment's ADD (or GET) result; nil when the plugin
	// returned none, which gives the minimal map of §5.1.1.
	Result *spec.Result
	// IfName is the CNI_IFNAME the attachment used. It fills "interface"
	// when the result cannot: pre-0.3.0 results (§5.3.2.1 allows it), no
	// result, or a result without a sandbox interface.
	IfName string
	// DefaultRoute are the gateways of the attachment's "default-route"
	// selection key, or the default network's gateways (§5.3.6.4).
	DefaultRoute []netip.Addr
	// DeviceInfo, when known, is copied to "device-info" after Validate.
	DeviceInfo *DeviceInfo
}

// NetworkName is the "namespace/name" form of §5.3.1.
func NetworkName(namespace, name string) string { return namespace + "/" + name }

// New builds one entry. Sources, following §5.1.1 and §5.3:
//   - result 0.3.0 or later: "interface", "mac" and "mtu" come from the
//     first interface with a non-empty "sandbox". "ips" are those whose
//     "interface" index points at that interface (rule 1 of §5.3.3.1). If no
//     interface has a sandbox (or there are none), "ips" are those with no
//     interface index or a negative one (rule 2). Otherwise "ips" is left
//     out: the addresses belong to host-side interfaces. Both rules say "the
//     element"; every matching element is taken, so a dual-stack interface
//     shows both its addresses, as in the spec's examples.
//   - result before 0.3.0: "ips" combine ip4 and ip6 (§5.3.3.1); there is
//     no interface list, so "interface" is IfName and "mac" is left blank
//     (§5.3.2.1, §5.3.4.1).
//   - no result: the minimal map, name/interface/default (§5.1.1).
//
// "ips" are bare addresses ("192.0.2.2"): §5.3.3 asks for "addresses", and
// Multus, the NAD client library and the tools that read the annotation
// (whereabouts' reconciler, KubeVirt) write and parse bare addresses; the
// §5.4 examples print prefix lengths, which those readers do not accept
// (whereabouts' reconciler then takes a live pod's address for orphaned and
// frees it). The prefix length is not written anywhere: the CNI result
// has it, and no reader of the annotation asks for it. "dns" is the
// result's nameservers, domain and search. A 20-byte hardware address (IP over InfiniBand) is also
// written as "infiniband-guid", as §5.4's example shows.
func New(in Input) (Entry, error) {
	e := Entry{Name: in.Name, Default: in.Default, Interface: in.IfName}
	if in.Name == "" {
		return Entry{}, fmt.Errorf("network status: \"name\" is required")
	}
	for _, gw := range in.DefaultRoute {
		e.DefaultRoute = append(e.DefaultRoute, gw.String())
	}
	if in.DeviceInfo != nil {
		if err := in.DeviceInfo.Validate(); err != nil {
			return Entry{}, fmt.Errorf("network status of %q: %w", in.Name, err)
		}
		d := *in.DeviceInfo
		e.DeviceInfo = &d
	}
	r := in.Result
	if r == nil {
		return e, nil
	}
	if d := r.DNS; len(d.Nameservers) > 0 || d.Domain != "" || len(d.Search) > 0 {
		e.DNS = &DNS{Nameservers: d.Nameservers, Domain: d.Domain, Search: d.Search}
	}
	// CNIVersion "" is a result built in code: the current version.
	if r.CNIVersion != "" && spec.Compare(r.CNIVersion, spec.V030) < 0 {
		for _, ip := range r.IPs {
			if ip != nil {
				e.IPs = append(e.IPs, ip.Address.Addr().String())
			}
		}
		return e, nil
	}
	sandbox := -1
	for i, itf := range r.Interfaces {
		if itf != nil && itf.Sandbox != "" {
			sandbox = i
			break
		}
	}
	for _, ip := range r.IPs {
		if ip == nil {
			continue
		}
		if sandbox >= 0 && ip.Interface != nil && *ip.Interface == sandbox ||
			sandbox < 0 && (ip.Interface == nil || *ip.Interface < 0) {
			e.IPs = append(e.IPs, ip.Address.Addr().String())
		}
	}
	if sandbox >= 0 {
		itf := r.Interfaces[sandbox]
		if itf.Name != "" {
			e.Interface = itf.Name
		}
		e.Mac, e.MTU = itf.Mac, itf.MTU
		if hw, err := net.ParseMAC(itf.Mac); err == nil && len(hw) == 20 {
			e.InfinibandGUID = itf.Mac
		}
	}
	if e.Mac != "" && e.Interface == "" { // §5.3.4: mac needs interface
		e.Mac = ""
	}
	return e, nil
}

// DefaultGateways returns the gateways of the result's default routes
// (0.0.0.0/0 and ::/0), for the default network's "default-route".
func DefaultGateways(r *spec.Result) []netip.Addr {
	if r == nil {
		return nil
	}
	var out []netip.Addr
	for _, rt := range r.Routes {
		if rt != nil && rt.Dst.Bits() == 0 && rt.GW.IsValid() {
			out = append(out, rt.GW)
		}
	}
	return out
}

// Validate checks a whole status list: every entry has a name, "mac" only
// with "interface" (§5.3.4), and exactly one entry is the default network
// (§5.2: it must have an entry; §5.3.5: only one may be default).
func Validate(entries []Entry) error {
	var defaults []string
	for i, e := range entries {
		if e.Name == "" {
			return fmt.Errorf("network status [%d]: \"name\" is required", i)
		}
		if e.Mac != "" && e.Interface == "" {
			return fmt.Errorf("network status [%d] (%q): \"mac\" without \"interface\"", i, e.Name)
		}
		if e.Default {
			defaults = append(defaults, e.Name)
		}
	}
	if len(defaults) != 1 {
		return fmt.Errorf("network status: exactly one entry must be the cluster-wide default network, found %d (%s)",
			len(defaults), strings.Join(defaults, ", "))
	}
	return nil
}

// Encode validates the list and returns the annotation value: a JSON list
// of maps, indented like the spec's examples.
func Encode(entries []Entry) (string, error) {
	if err := Validate(entries); err != nil {
		return "", err
	}
	b, err := json.MarshalIndent(entries, "", "    ")
	if err != nil {
		return "", err
	}
	return string(b), nil
}

// Decode parses an annotation value (ours or another implementation's).
func Decode(annotation string) ([]Entry, error) {
	var entries []Entry
	if err := json.Unmarshal([]byte(annotation), &entries); err != nil {
		return nil, fmt.Errorf("network status annotation is not a JSON list of maps: %w", err)
	}
	return entries, nil
}
