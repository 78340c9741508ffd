package spec

import "net/netip"

// Well-known capability names (CONVENTIONS "Dynamic Plugin specific fields").
const (
	CapPortMappings   = "portMappings"
	CapIPRanges       = "ipRanges"
	CapBandwidth      = "bandwidth"
	CapDNS            = "dns"
	CapIPs            = "ips"
	CapMAC            = "mac"
	CapInfinibandGUID = "infinibandGUID"
	CapDeviceID       = "deviceID"
	CapAliases        = "aliases"
	CapCgroupPath     = "cgroupPath"
)

// PortMapping is one entry of runtimeConfig.portMappings.
type PortMapping struct {
	HostPort      int    `json:"hostPort"`
	ContainerPort int    `json:"containerPort"`
	Protocol      string `json:"protocol,omitempty"`
	HostIP        string `json:"hostIP,omitempty"`
}

// IPRange is one range of runtimeConfig.ipRanges (a list of range sets).
type IPRange struct {
	Subnet     string `json:"subnet"`
	RangeStart string `json:"rangeStart,omitempty"`
	RangeEnd   string `json:"rangeEnd,omitempty"`
	Gateway    string `json:"gateway,omitempty"`
}

// Bandwidth is runtimeConfig.bandwidth.
type Bandwidth struct {
	IngressRate  uint64 `json:"ingressRate,omitempty"`
	IngressBurst uint64 `json:"ingressBurst,omitempty"`
	EgressRate   uint64 `json:"egressRate,omitempty"`
	EgressBurst  uint64 `json:"egressBurst,omitempty"`
}

// RuntimeConfig collects the conventional runtimeConfig keys. Plugins embed
// it (or a subset) as `json:"runtimeConfig"`.
type RuntimeConfig struct {
	PortMappings   []PortMapping `json:"portMappings,omitempty"`
	IPRanges       [][]IPRange   `json:"ipRanges,omitempty"`
	Bandwidth      *Bandwidth    `json:"bandwidth,omitempty"`
	DNS            *RuntimeDNS   `json:"dns,omitempty"`
	IPs            []string      `json:"ips,omitempty"`
	Mac            string        `json:"mac,omitempty"`
	InfinibandGUID string        `json:"infinibandGUID,omitempty"`
	DeviceID       string        `json:"deviceID,omitempty"`
	Aliases        []string      `json:"aliases,omitempty"`
	CgroupPath     string        `json:"cgroupPath,omitempty"`
}

// RuntimeDNS is runtimeConfig.dns. The convention names its keys servers,
// searches and options (as Kubernetes runtimes send them), unlike the dns
// dictionary of configs and results (nameservers, search, ...).
type RuntimeDNS struct {
	Servers  []string `json:"servers,omitempty"`
	Searches []string `json:"searches,omitempty"`
	Options  []string `json:"options,omitempty"`
}

// Args is the conventional "args" key: {"cni": {"ips": [...], "mac": ...}}.
type Args struct {
	CNI *CNIArgsKey `json:"cni,omitempty"`
}

// CNIArgsKey is args.cni.
type CNIArgsKey struct {
	IPs []string `json:"ips,omitempty"`
	Mac string   `json:"mac,omitempty"`
}

// ParseIPMaybePrefix accepts "10.1.2.3" or "10.1.2.3/24" (as runtimeConfig.ips
// and args.cni.ips allow both) and returns the address and prefix length
// (-1 when absent).
func ParseIPMaybePrefix(s string) (netip.Addr, int, error) {
	if p, err := netip.ParsePrefix(s); err == nil {
		return p.Addr(), p.Bits(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, -1, err
	}
	return a, -1, nil
}
