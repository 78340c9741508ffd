package bridge

import (
	"sort"

	"github.com/patchbay-cni/patchbay/internal/firewall"
	"github.com/patchbay-cni/patchbay/internal/link"
	"github.com/patchbay-cni/patchbay/skel"
	"github.com/patchbay-cni/patchbay/spec"
)

const defaultBridge = "cni0"

// Config is the bridge plugin's configuration; keys and defaults follow
// the reference bridge plugin.
type Config struct {
	spec.NetConf
	Bridge                    string       `json:"bridge"`
	IsGateway                 bool         `json:"isGateway"`
	IsDefaultGateway          bool         `json:"isDefaultGateway"`
	ForceAddress              bool         `json:"forceAddress"`
	IPMasq                    bool         `json:"ipMasq"`
	IPMasqBackend             string       `json:"ipMasqBackend,omitempty"`
	MTU                       int          `json:"mtu"`
	HairpinMode               bool         `json:"hairpinMode"`
	PromiscMode               bool         `json:"promiscMode"`
	Vlan                      int          `json:"vlan"`
	VlanTrunk                 []*VlanTrunk `json:"vlanTrunk,omitempty"`
	PreserveDefaultVlan       bool         `json:"preserveDefaultVlan"`
	MacSpoofChk               bool         `json:"macspoofchk,omitempty"`
	EnableDad                 bool         `json:"enabledad,omitempty"`
	DisableContainerInterface bool         `json:"disableContainerInterface,omitempty"`
	PortIsolation             bool         `json:"portIsolation,omitempty"`

	mac   string // from CNI_ARGS MAC, args.cni.mac or runtimeConfig.mac (last wins)
	vlans []int  // vlanTrunk expanded and sorted
}

// VlanTrunk is one vlanTrunk entry: a single id or a minID..maxID range.
type VlanTrunk struct {
	MinID *int `json:"minID,omitempty"`
	MaxID *int `json:"maxID,omitempty"`
	ID    *int `json:"id,omitempty"`
}

func invalid(format string, a ...any) error {
	return spec.Errorf(spec.ErrInvalidNetworkConfig, format, a...)
}

// decode only decodes, with defaults. DEL uses it: a DEL must succeed for
// a configuration ADD refused (the runtime sends one after the failed ADD
// and retries while it fails), and it needs none of the validated keys
// (masquerade teardown copes with any ipMasqBackend value).
func decode(a *skel.CmdArgs) (*Config, error) {
	c := &Config{Bridge: defaultBridge}
	if err := a.DecodeConf(c); err != nil {
		return nil, err
	}
	if c.Bridge == "" {
		c.Bridge = defaultBridge
	}
	return c, nil
}

// load decodes and validates the whole configuration before anything is
// created, so bad input leaves no half-made bridge or veth behind.
func load(a *skel.CmdArgs) (*Config, error) {
	c, err := decode(a)
	if err != nil {
		return nil, err
	}
	if len(c.Bridge) > spec.MaxInterfaceNameLen {
		return nil, invalid("\"bridge\" value %q is invalid: longer than %d characters", c.Bridge, spec.MaxInterfaceNameLen)
	}
	if err := spec.ValidateInterfaceName(c.Bridge); err != nil {
		return nil, invalid("\"bridge\" value %q is invalid: not a usable interface name", c.Bridge)
	}
	if err := link.ValidateMTU(c.MTU); err != nil {
		return nil, err
	}
	if c.Vlan < 0 || c.Vlan > 4094 {
		return nil, invalid("\"vlan\" value %d is invalid: must be between 0 and 4094", c.Vlan)
	}
	if c.vlans, err = expandTrunk(c.VlanTrunk); err != nil {
		return nil, err
	}
	if _, err := firewall.ParseKind("ipMasqBackend", c.IPMasqBackend, firewall.NFTables); err != nil {
		return nil, err
	}
	if c.MacSpoofChk {
		if err := firewall.CheckSpoofID(a.ContainerID + "-" + a.IfName); err != nil {
			return nil, err
		}
	}
	if c.IPAM.Type != "" && c.DisableContainerInterface {
		return nil, invalid("\"disableContainerInterface\" cannot be used with \"ipam\" (the container interface needs to be up to be addressed)")
	}
	if c.HairpinMode && c.PromiscMode {
		return nil, invalid("\"hairpinMode\" and \"promiscMode\" cannot both be set")
	}
	if c.IsDefaultGateway {
		c.IsGateway = true
	}
	// The reference's order, lowest precedence first. Other CNI_ARGS keys
	// belong to other plugins.
	mac, _, err := a.RequestedMAC(skel.MACCNIArgs, skel.MACArgs, skel.MACRuntimeConfig)
	if err != nil {
		return nil, err
	}
	if mac != nil {
		c.mac = mac.String()
	}
	return c, nil
}

func expandTrunk(trunk []*VlanTrunk) ([]int, error) {
	set := map[int]bool{}
	inRange := func(field string, v int) error {
		if v <= 0 || v > 4094 {
			return invalid("\"vlanTrunk\" %s %d is invalid: must be between 1 and 4094", field, v)
		}
		return nil
	}
	for _, t := range trunk {
		if t == nil {
			continue
		}
		switch {
		case t.MinID != nil && t.MaxID != nil:
			if err := inRange("minID", *t.MinID); err != nil {
				return nil, err
			}
			if err := inRange("maxID", *t.MaxID); err != nil {
				return nil, err
			}
			if *t.MaxID < *t.MinID {
				return nil, invalid("\"vlanTrunk\" minID %d is greater than maxID %d", *t.MinID, *t.MaxID)
			}
			for v := *t.MinID; v <= *t.MaxID; v++ {
				set[v] = true
			}
		case t.MinID != nil || t.MaxID != nil:
			return nil, invalid("\"vlanTrunk\" minID and maxID must be given together")
		}
		if t.ID != nil {
			if err := inRange("id", *t.ID); err != nil {
				return nil, err
			}
			set[*t.ID] = true
		}
	}
	if len(set) == 0 {
		return nil, nil
	}
	out := make([]int, 0, len(set))
	for v := range set {
		out = append(out, v)
	}
	sort.Ints(out)
	return out, nil
}
