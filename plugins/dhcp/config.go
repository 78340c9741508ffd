package dhcp

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/insomniacslk/dhcp/dhcpv4"

	"github.com/patchbay-cni/patchbay/spec"
)

// DefaultSocketPath is where the plugin finds the daemon unless the config
// says otherwise (ipam.daemonSocketPath), as in the reference.
const DefaultSocketPath = "/run/cni/dhcp.sock"

// netConf is the part of the full network configuration dhcp reads (an IPAM
// plugin receives its parent's whole config).
type netConf struct {
	CNIVersion string    `json:"cniVersion"`
	Name       string    `json:"name"`
	IPAM       *ipamConf `json:"ipam"`
}

// ipamConf holds the reference v1.9.1 keys.
type ipamConf struct {
	Type             string          `json:"type"`
	DaemonSocketPath string          `json:"daemonSocketPath"`
	Provide          []provideOption `json:"provide"`
	Request          []requestOption `json:"request"`
	Priority         int             `json:"priority"`
}

type provideOption struct {
	Option  optionName `json:"option"`
	Value   string     `json:"value"`
	FromArg string     `json:"fromArg"`
}

type requestOption struct {
	SkipDefault bool       `json:"skipDefault"`
	Option      optionName `json:"option"`
}

// optionName is a DHCP option given by name (dhcp-options(5) names the
// reference knows) or by number. The reference takes only strings; a JSON
// number is accepted too.
type optionName string

func (o *optionName) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] != '"' {
		var n json.Number
		if err := json.Unmarshal(b, &n); err != nil {
			return fmt.Errorf("option must be a name or a number, got %s", b)
		}
		*o = optionName(n.String())
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	*o = optionName(s)
	return nil
}

// optionNames are the names the reference accepts, plus a few more from
// dhcp-options(5) that are useful to send or request.
var optionNames = map[string]dhcpv4.OptionCode{
	"dhcp-client-identifier":  dhcpv4.OptionClientIdentifier,
	"subnet-mask":             dhcpv4.OptionSubnetMask,
	"routers":                 dhcpv4.OptionRouter,
	"host-name":               dhcpv4.OptionHostName,
	"user-class":              dhcpv4.OptionUserClassInformation,
	"vendor-class-identifier": dhcpv4.OptionClassIdentifier,
	"domain-name-servers":     dhcpv4.OptionDomainNameServer,
	"domain-name":             dhcpv4.OptionDomainName,
	"domain-search":           dhcpv4.OptionDNSDomainSearchList,
	"static-routes":           dhcpv4.OptionStaticRoutingTable,
	"classless-static-routes": dhcpv4.OptionClasslessStaticRoute,
	"interface-mtu":           dhcpv4.OptionInterfaceMTU,
	"ntp-servers":             dhcpv4.OptionNTPServers,
}

// clientManaged are options the client itself writes in every message; a
// configured value would corrupt the exchange.
var clientManaged = map[uint8]string{
	0:   "pad",
	50:  "requested IP address",
	52:  "option overload",
	53:  "message type",
	54:  "server identifier",
	55:  "parameter request list (use \"request\")",
	57:  "maximum message size",
	255: "end",
}

// defaultRequest is asked for unless a request entry sets skipDefault. The
// reference asks for routers and subnet-mask only; DNS, domain, search and
// the route options are asked for too so the result carries them (dnsmasq,
// like most servers, sends only what is asked for), and T1/T2 so renewal
// follows the server's timers.
var defaultRequest = []dhcpv4.OptionCode{
	dhcpv4.OptionRouter,
	dhcpv4.OptionSubnetMask,
	dhcpv4.OptionDomainNameServer,
	dhcpv4.OptionDomainName,
	dhcpv4.OptionDNSDomainSearchList,
	dhcpv4.OptionClasslessStaticRoute,
	dhcpv4.OptionStaticRoutingTable,
	dhcpv4.OptionRenewTimeValue,
	dhcpv4.OptionRebindingTimeValue,
}

// leaseConf is a validated configuration for one attachment: everything the
// daemon needs to acquire and keep its lease.
type leaseConf struct {
	Network     string
	ContainerID string
	IfName      string
	// ClientID is the client identifier option's value (type byte
	// included), the key the server files the lease under.
	ClientID []byte
	// Provide are options sent in every message, in configuration order.
	Provide []sentOption
	// Request is the parameter request list (nil: none sent).
	Request  []uint8
	Priority int
}

type sentOption struct {
	Code  uint8
	Value []byte
}

// socketPath returns the daemon socket the config names (without
// validating anything else), so DEL can reach the daemon even when the rest
// of the config no longer parses.
func socketPath(stdin []byte) string {
	var n struct {
		IPAM struct {
			DaemonSocketPath string `json:"daemonSocketPath"`
		} `json:"ipam"`
	}
	if json.Unmarshal(stdin, &n) == nil && n.IPAM.DaemonSocketPath != "" {
		return n.IPAM.DaemonSocketPath
	}
	return DefaultSocketPath
}

// parseConf validates the configuration for one attachment. cniArgs is
// CNI_ARGS, the source of fromArg values. Errors are code 7 and name the
// key, except undecodable JSON (code 6).
func parseConf(stdin []byte, containerID, ifName, cniArgs string) (*leaseConf, string, error) {
	var n netConf
	if err := json.Unmarshal(stdin, &n); err != nil {
		return nil, "", spec.NewError(spec.ErrDecodingFailure, "failed to decode network configuration", err.Error())
	}
	if n.IPAM == nil {
		return nil, "", spec.Errorf(spec.ErrInvalidNetworkConfig, "missing required key \"ipam\"")
	}
	sock := DefaultSocketPath
	if p := n.IPAM.DaemonSocketPath; p != "" {
		if !filepath.IsAbs(p) {
			return nil, "", spec.Errorf(spec.ErrInvalidNetworkConfig, "ipam.daemonSocketPath %q is not an absolute path", p)
		}
		sock = filepath.Clean(p)
	}
	if n.IPAM.Priority < 0 {
		return nil, "", spec.Errorf(spec.ErrInvalidNetworkConfig, "ipam.priority %d must not be negative", n.IPAM.Priority)
	}
	c := &leaseConf{Network: n.Name, ContainerID: containerID, IfName: ifName, Priority: n.IPAM.Priority}

	args := map[string]string{}
	for _, seg := range strings.Split(cniArgs, ";") {
		if k, v, ok := strings.Cut(seg, "="); ok && k != "" {
			args[k] = v
		}
	}
	for i, p := range n.IPAM.Provide {
		field := fmt.Sprintf("ipam.provide[%d]", i)
		code, err := parseOption(field+".option", p.Option)
		if err != nil {
			return nil, "", err
		}
		if p.Value == "" && p.FromArg == "" {
			return nil, "", spec.Errorf(spec.ErrInvalidNetworkConfig, "%s (option %q) needs \"value\" or \"fromArg\"", field, p.Option)
		}
		if len(p.Value) > 255 {
			return nil, "", spec.Errorf(spec.ErrInvalidNetworkConfig, "%s.value is %d bytes long; a DHCP option holds at most 255", field, len(p.Value))
		}
		val := p.Value
		if p.FromArg != "" {
			if v, ok := args[p.FromArg]; ok {
				if len(v) > 255 {
					return nil, "", spec.Errorf(spec.ErrInvalidNetworkConfig, "%s.fromArg: CNI_ARGS %s is %d bytes long; a DHCP option holds at most 255", field, p.FromArg, len(v))
				}
				val = v
			}
		}
		if val == "" {
			continue // fromArg absent from CNI_ARGS and no value: nothing to send
		}
		// A later entry for the same option replaces an earlier one.
		c.Provide = slices.DeleteFunc(c.Provide, func(o sentOption) bool { return o.Code == code })
		c.Provide = append(c.Provide, sentOption{Code: code, Value: []byte(val)})
	}

	skipDefault := false
	for i, r := range n.IPAM.Request {
		if r.SkipDefault {
			skipDefault = true
		}
		if r.Option == "" {
			continue
		}
		code, err := parseOption(fmt.Sprintf("ipam.request[%d].option", i), r.Option)
		if err != nil {
			return nil, "", err
		}
		if !slices.Contains(c.Request, code) {
			c.Request = append(c.Request, code)
		}
	}
	if !skipDefault {
		for _, code := range defaultRequest {
			if !slices.Contains(c.Request, code.Code()) {
				c.Request = append(c.Request, code.Code())
			}
		}
	}

	c.ClientID = defaultClientID(containerID, n.Name, ifName)
	for _, o := range c.Provide {
		if o.Code == dhcpv4.OptionClientIdentifier.Code() {
			c.ClientID = o.Value
		}
	}
	return c, sock, nil
}

// parseOption maps a name or a decimal number to an option code.
func parseOption(field string, o optionName) (uint8, error) {
	s := string(o)
	if s == "" {
		return 0, spec.Errorf(spec.ErrInvalidNetworkConfig, "%s is required", field)
	}
	var code uint8
	if c, ok := optionNames[s]; ok {
		code = c.Code()
	} else {
		n, err := strconv.ParseUint(s, 10, 8)
		if err != nil {
			return 0, spec.Errorf(spec.ErrInvalidNetworkConfig, "%s %q is neither a known option name nor a number 1-254", field, s)
		}
		code = uint8(n)
	}
	if why, bad := clientManaged[code]; bad {
		return 0, spec.Errorf(spec.ErrInvalidNetworkConfig, "%s %q is option %d (%s), which the client manages itself", field, s, code, why)
	}
	return code, nil
}

// defaultClientID is the reference's client identifier, so a node moving
// from the reference daemon keeps its leases at the server: type 0 followed
// by "containerID/network/ifname", cut to fit one option.
func defaultClientID(containerID, network, ifName string) []byte {
	id := containerID + "/" + network + "/" + ifName
	if len(id) > 254 {
		id = id[:254]
	}
	return append([]byte{0}, id...)
}
