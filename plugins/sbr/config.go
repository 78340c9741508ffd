package sbr

import (
	"bytes"
	"encoding/json"
	"math"
	"net/netip"
	"strconv"

	"github.com/patchbay-cni/patchbay/internal/confcheck"
	"github.com/patchbay-cni/patchbay/skel"
	"github.com/patchbay-cni/patchbay/spec"
)

// firstTable is where the search for a free routing table starts (the
// reference's first table ID).
const firstTable = 100

// netConf holds sbr's keys; values stay raw until checked, so that a bad
// one gets code 7 naming its key.
type netConf struct {
	// Table: the rules point at this table and no routes move (v1.9.1).
	Table json.RawMessage `json:"table"`
	// Gateways and AddSourceHints came to the reference after v1.9.1
	// (containernetworking/plugins 025aca14): a static gateway per family
	// instead of prevResult's, and subnet routes kept in the main table
	// with the address as source hint.
	Gateways       json.RawMessage `json:"gateways"`
	AddSourceHints json.RawMessage `json:"addSourceHints"`
}

// config is the validated configuration.
type config struct {
	table          int // 0: pick free tables and move the interface's routes there
	gw4, gw6       netip.Addr
	addSourceHints bool
}

func invalid(format string, a ...any) error {
	return spec.Errorf(spec.ErrInvalidNetworkConfig, format, a...)
}

func load(a *skel.CmdArgs) (*config, error) {
	var n netConf
	if err := a.DecodeConf(&n); err != nil {
		return nil, err
	}
	return parse(&n)
}

// lenientTable is the configuration a DEL whose configuration does not
// validate goes by: "table" alone, and known false when it cannot be read
// (so that DEL leaves the routes of what may be the operator's table).
func lenientTable(stdin []byte) (c *config, known bool) {
	var n netConf
	if json.Unmarshal(stdin, &n) != nil {
		return &config{}, false
	}
	c, err := parse(&netConf{Table: n.Table})
	if err != nil {
		return &config{}, false
	}
	return c, true
}

func parse(n *netConf) (*config, error) {
	c := &config{}
	if !confcheck.Absent(n.Table) {
		s := string(bytes.TrimSpace(n.Table))
		t, err := strconv.ParseUint(s, 10, 32)
		switch {
		case err != nil || t == 0 || t > math.MaxUint32:
			return nil, invalid("table %s is not a routing table ID (a whole number from 1 to %d)", s, uint32(math.MaxUint32))
		case t >= 253 && t <= 255:
			return nil, invalid("table %s is one of the kernel's own tables (253 default, 254 main, 255 local)", s)
		}
		c.table = int(t)
	}
	if !confcheck.Absent(n.AddSourceHints) {
		if err := json.Unmarshal(n.AddSourceHints, &c.addSourceHints); err != nil {
			return nil, invalid("addSourceHints %s is not true or false", bytes.TrimSpace(n.AddSourceHints))
		}
	}
	if confcheck.Absent(n.Gateways) {
		return c, nil
	}
	var gws []json.RawMessage
	if err := json.Unmarshal(n.Gateways, &gws); err != nil {
		return nil, invalid("gateways %s is not a list of IP addresses", bytes.TrimSpace(n.Gateways))
	}
	if len(gws) > 2 {
		return nil, invalid("gateways has %d entries: at most one IPv4 and one IPv6 address", len(gws))
	}
	for i, raw := range gws {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, invalid("gateways[%d] %s is not an IP address string", i, bytes.TrimSpace(raw))
		}
		gw, err := netip.ParseAddr(s)
		if err != nil || gw.Zone() != "" || gw.IsUnspecified() || gw.IsMulticast() {
			return nil, invalid("gateways[%d] %q is not a unicast IP address", i, s)
		}
		gw = gw.Unmap()
		dst := &c.gw6
		if gw.Is4() {
			dst = &c.gw4
		}
		if dst.IsValid() {
			return nil, invalid("gateways has two addresses of one family (%s and %s): at most one IPv4 and one IPv6 address", *dst, gw)
		}
		*dst = gw
	}
	return c, nil
}

// gateway is the default route's next hop in the table of address a: the
// configured gateway of its family, else prevResult's.
func (c *config) gateway(ipc *spec.IPConfig) netip.Addr {
	if ipc.Address.Addr().Is4() && c.gw4.IsValid() {
		return c.gw4
	}
	if ipc.Address.Addr().Is6() && c.gw6.IsValid() {
		return c.gw6
	}
	return ipc.Gateway
}

// addresses picks prevResult's addresses for interface ifName: those with
// no interface index, or whose index names ifName (or lies outside the
// list), as the reference does.
func addresses(prev *spec.Result, ifName string) []*spec.IPConfig {
	var out []*spec.IPConfig
	for _, ipc := range prev.IPs {
		if ipc.Interface != nil {
			i := *ipc.Interface
			if i >= 0 && i < len(prev.Interfaces) && prev.Interfaces[i].Name != ifName {
				continue
			}
		}
		out = append(out, ipc)
	}
	return out
}
