package skel

import (
	"encoding/json"
	"errors"
	"net"

	"github.com/patchbay-cni/patchbay/spec"
)

// MACSource names a place a container MAC address can be asked for. Its
// value is how messages name it.
type MACSource string

// The places the reference plugins read a requested MAC from.
const (
	// MACKey is the plugin's own "mac" key (macvlan, tuning).
	MACKey MACSource = "mac"
	// MACCNIArgs is CNI_ARGS MAC=... .
	MACCNIArgs MACSource = "CNI_ARGS MAC"
	// MACArgs is args.cni.mac in the configuration.
	MACArgs MACSource = "args.cni.mac"
	// MACRuntimeConfig is runtimeConfig.mac, the "mac" capability.
	MACRuntimeConfig MACSource = "runtimeConfig.mac"
)

// macKeys are the configuration keys RequestedMAC reads.
type macKeys struct {
	Mac  *string `json:"mac"`
	Args *struct {
		CNI *struct {
			Mac *string `json:"mac"`
		} `json:"cni"`
	} `json:"args"`
	RuntimeConfig *struct {
		Mac *string `json:"mac"`
	} `json:"runtimeConfig"`
}

// RequestedMAC returns the container MAC address the configuration or the
// runtime asked for, and where it came from. order lists the places the
// plugin honours, lowest precedence first: the reference plugins differ
// (macvlan and tap: MACKey, MACCNIArgs, MACRuntimeConfig; bridge: MACCNIArgs,
// MACArgs, MACRuntimeConfig; tuning: MACKey, MACCNIArgs, MACRuntimeConfig,
// MACArgs). An empty value counts as not asked; none asked gives nil, "".
//
// A value that is not a unicast, non-zero Ethernet address (a kernel
// refuses those for an interface) is an error naming the place and the
// value: code 7 from the configuration, 4 from CNI_ARGS (the environment).
func (a *CmdArgs) RequestedMAC(order ...MACSource) (net.HardwareAddr, MACSource, error) {
	var k macKeys
	if err := json.Unmarshal(a.StdinData, &k); err != nil {
		return nil, "", spec.NewError(spec.ErrDecodingFailure, "failed to decode the MAC address keys (mac, args.cni.mac, runtimeConfig.mac)", err.Error())
	}
	var val string
	var from MACSource
	for _, src := range order {
		var v *string
		switch src {
		case MACKey:
			v = k.Mac
		case MACArgs:
			if k.Args != nil && k.Args.CNI != nil {
				v = k.Args.CNI.Mac
			}
		case MACRuntimeConfig:
			if k.RuntimeConfig != nil {
				v = k.RuntimeConfig.Mac
			}
		case MACCNIArgs:
			// Malformed CNI_ARGS are refused by the SDK before a verb
			// runs (DEL goes on without them): no error to report here.
			pairs, _ := spec.ParseCNIArgs(a.Args)
			for _, p := range pairs {
				if p[0] == "MAC" {
					v = &p[1]
				}
			}
		}
		if v != nil && *v != "" {
			val, from = *v, src
		}
	}
	if val == "" {
		return nil, "", nil
	}
	mac, err := ParseUnicastMAC(val)
	if err != nil {
		code := spec.ErrInvalidNetworkConfig
		if from == MACCNIArgs {
			code = spec.ErrInvalidEnvironment
		}
		return nil, "", spec.Errorf(code, "%s %q is invalid: %v", from, val, err)
	}
	return mac, from, nil
}

// ParseUnicastMAC parses an Ethernet MAC address an interface can have:
// six bytes, the multicast bit clear, not all zero.
func ParseUnicastMAC(s string) (net.HardwareAddr, error) {
	mac, err := net.ParseMAC(s)
	switch {
	case err != nil || len(mac) != 6:
		return nil, errors.New("not an Ethernet MAC address (e.g. 0a:58:0a:01:00:05)")
	case mac.String() == "ff:ff:ff:ff:ff:ff":
		return nil, errors.New("the broadcast address, which no interface can have")
	case mac[0]&1 != 0:
		return nil, errors.New("a multicast address (the first byte is odd), which no interface can have")
	case mac.String() == "00:00:00:00:00:00":
		return nil, errors.New("the all-zero address, which no interface can have")
	}
	return mac, nil
}
