package firewall

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"

	fw "github.com/patchbay-cni/patchbay/internal/firewall"
	"github.com/patchbay-cni/patchbay/internal/rundir"
	"github.com/patchbay-cni/patchbay/skel"
	"github.com/patchbay-cni/patchbay/spec"
)

// Backends, as the "backend" key spells them. "" picks firewalld when it
// runs on the system bus, else iptables (the reference's rule).
const (
	backendIPT       = "iptables"
	backendNFT       = "nftables"
	backendFirewalld = "firewalld"
)

// Ingress policies (ingressPolicy); "" is open.
const (
	policyOpen       = "open"
	policySameBridge = "same-bridge"
	policyIsolated   = "isolated"
)

const (
	defaultAdminChain = "CNI-ADMIN"
	defaultZone       = "trusted"
)

// defaultDataDir holds the attachment records (see record.go): <run
// dir>/firewall, /run/cni/patchbay/firewall unless PATCHBAY_RUN_DIR moves
// the run directory (internal/rundir). In /run, because what they describe
// (kernel rules, firewalld's runtime configuration) does not survive a
// reboot either.
func defaultDataDir() string { return rundir.Path("firewall") }

// conf is the plugin's configuration: the reference firewall plugin's keys,
// plus dataDir.
type conf struct {
	spec.NetConf
	Backend                string `json:"backend,omitempty"`
	IptablesAdminChainName string `json:"iptablesAdminChainName,omitempty"`
	FirewalldZone          string `json:"firewalldZone,omitempty"`
	IngressPolicy          string `json:"ingressPolicy,omitempty"`
	DataDir                string `json:"dataDir,omitempty"`
}

// parsed is the decoded and validated configuration. Every string in it
// that reaches a rule or a D-Bus call has been validated.
type parsed struct {
	c       conf
	backend string // as configured ("" = detect)
	admin   fw.Name
	zone    string
	policy  string // open, same-bridge or isolated
	dataDir string
}

func invalid(format string, a ...any) error {
	return spec.Errorf(spec.ErrInvalidNetworkConfig, format, a...)
}

// parse decodes and validates the configuration, touching nothing.
func parse(data []byte) (*parsed, error) {
	p := &parsed{}
	if err := json.Unmarshal(data, &p.c); err != nil {
		return nil, spec.NewError(spec.ErrDecodingFailure, "failed to decode firewall configuration", err.Error())
	}
	c := &p.c
	switch c.Backend {
	case "", backendIPT, backendNFT, backendFirewalld:
		p.backend = c.Backend
	default:
		return nil, invalid("%q value %q is invalid: must be %q, %q or %q (or absent: firewalld if it runs, else iptables)", "backend", c.Backend, backendIPT, backendNFT, backendFirewalld)
	}
	admin := c.IptablesAdminChainName
	if admin == "" {
		admin = defaultAdminChain
	}
	n, err := fw.ParseChain("iptablesAdminChainName", admin)
	if err != nil {
		return nil, err
	}
	for _, ours := range []fw.Name{chainFwd, chainStage1, chainStage2} {
		if n == ours {
			return nil, invalid("%q value %q is invalid: it is a chain of the plugin's own", "iptablesAdminChainName", admin)
		}
	}
	p.admin = n
	p.zone = c.FirewalldZone
	if p.zone == "" {
		p.zone = defaultZone
	}
	if err := validZone(p.zone); err != nil {
		return nil, err
	}
	switch c.IngressPolicy {
	case "", policyOpen:
		p.policy = policyOpen
	case policySameBridge, policyIsolated:
		p.policy = c.IngressPolicy
	default:
		return nil, invalid("%q value %q is invalid: must be %q, %q or %q", "ingressPolicy", c.IngressPolicy, policyOpen, policySameBridge, policyIsolated)
	}
	p.dataDir = c.DataDir
	if p.dataDir == "" {
		p.dataDir = defaultDataDir()
	}
	if err := safeDataDir(p.dataDir); err != nil {
		return nil, err
	}
	p.dataDir = filepath.Clean(p.dataDir)
	return p, nil
}

// safeDataDir refuses a dataDir the plugin could do harm in (it makes and
// removes directories and files there): it must be an absolute path at
// least two levels below / (not /, /etc, /run, ...) and outside the
// kernel's virtual file systems.
func safeDataDir(d string) error {
	if !filepath.IsAbs(d) || strings.ContainsRune(d, 0) {
		return invalid("%q value %q is invalid: must be an absolute path", "dataDir", d)
	}
	c := filepath.Clean(d)
	if strings.Count(c, "/") < 2 {
		return invalid("%q value %q is invalid: must be a directory of its own at least two levels below / (the default is %s)", "dataDir", d, defaultDataDir())
	}
	for _, v := range []string{"/proc", "/sys", "/dev"} {
		if c == v || strings.HasPrefix(c, v+"/") {
			return invalid("%q value %q is invalid: %s is a kernel file system", "dataDir", d, v)
		}
	}
	return nil
}

// lenient is the configuration of a DEL that does not validate: each key
// that is valid on its own is kept, the others take their defaults.
func lenient(data []byte) *parsed {
	p, _ := parse([]byte(`{}`))
	var c conf
	json.Unmarshal(data, &c) // what decodes
	for _, try := range []conf{
		{Backend: c.Backend}, {IptablesAdminChainName: c.IptablesAdminChainName}, {FirewalldZone: c.FirewalldZone},
		{IngressPolicy: c.IngressPolicy}, {DataDir: c.DataDir},
	} {
		b, _ := json.Marshal(try)
		if q, err := parse(b); err == nil {
			switch {
			case try.Backend != "":
				p.backend = q.backend
			case try.IptablesAdminChainName != "":
				p.admin = q.admin
			case try.FirewalldZone != "":
				p.zone = q.zone
			case try.IngressPolicy != "":
				p.policy = q.policy
			case try.DataDir != "":
				p.dataDir = q.dataDir
			}
		}
	}
	p.c = c
	return p
}

// validZone checks a firewalld zone name as firewalld does (letters,
// digits, '_', '-' and at most one inner '/'; at most 17 characters, the
// room its chain names leave), so a bad name is refused before anything is
// done rather than by firewalld halfway through.
func validZone(z string) error {
	if len(z) > 17 {
		return invalid("%q value %q is invalid: at most 17 characters", "firewalldZone", z)
	}
	for i := 0; i < len(z); i++ {
		c := z[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '/') {
			return invalid("%q value %q is invalid: letters, digits, '_', '-' or '/' only", "firewalldZone", z)
		}
	}
	if strings.HasPrefix(z, "/") || strings.HasSuffix(z, "/") || strings.Count(z, "/") > 1 {
		return invalid("%q value %q is invalid: a '/' may only separate two parts", "firewalldZone", z)
	}
	return nil
}

// request is one attachment as the rules need it.
type request struct {
	att    fw.Attachment
	ips    []netip.Addr
	policy string
	bridge string // the bridge for same-bridge/isolated ("" otherwise)
}

// newRequest reads the attachment from prevResult: every address of it
// (as the reference), and for an ingress policy the bridge, which the
// bridge plugin puts first in interfaces.
func newRequest(a *skel.CmdArgs, p *parsed, prev *spec.Result) (*request, error) {
	r := &request{att: fw.Attachment{Network: a.Conf.Name, IfName: a.IfName, ContainerID: a.ContainerID}, policy: p.policy}
	for i, ip := range prev.IPs {
		if ip == nil || !ip.Address.IsValid() {
			return nil, invalid("prevResult.ips[%d] has no address", i)
		}
		ad := ip.Address.Addr().Unmap()
		if !containsAddr(r.ips, ad) {
			r.ips = append(r.ips, ad)
		}
	}
	if p.policy == policyOpen {
		return r, nil
	}
	if len(prev.Interfaces) == 0 || prev.Interfaces[0] == nil || prev.Interfaces[0].Name == "" {
		return nil, invalid("%q value %q needs the bridge in prevResult.interfaces[0]: chain \"firewall\" after \"bridge\"", "ingressPolicy", p.policy)
	}
	r.bridge = prev.Interfaces[0].Name
	if _, err := fw.ParseIfName("prevResult.interfaces[0].name", r.bridge, 0); err != nil {
		return nil, err
	}
	return r, nil
}

func containsAddr(l []netip.Addr, a netip.Addr) bool {
	for _, x := range l {
		if x == a {
			return true
		}
	}
	return false
}

// families lists the IP families of ips, IPv4 first.
func families(ips []netip.Addr) []fw.Family {
	var v4, v6 bool
	for _, a := range ips {
		if a.Is4() {
			v4 = true
		} else {
			v6 = true
		}
	}
	var out []fw.Family
	if v4 {
		out = append(out, fw.IPv4)
	}
	if v6 {
		out = append(out, fw.IPv6)
	}
	return out
}

// source is an address as the reference hands it to firewalld and iptables:
// with its full-length prefix.
func source(a netip.Addr) string {
	return fmt.Sprintf("%s/%d", a, a.BitLen())
}
