package tap

import (
	"net"
	"os"
	"strings"

	"github.com/patchbay-cni/patchbay/internal/link"
	"github.com/patchbay-cni/patchbay/skel"
	"github.com/patchbay-cni/patchbay/spec"
)

// Config is the tap plugin's configuration; keys and defaults follow the
// reference tap plugin v1.9.1.
type Config struct {
	spec.NetConf
	MultiQueue bool `json:"multiQueue"`
	MTU        int  `json:"mtu"`
	// "mac", CNI_ARGS MAC and runtimeConfig.mac are read by
	// skel.RequestedMAC.
	// Owner and Group are uids/gids; wider than uint32 so that a negative
	// or too large value is refused by name (code 7), not by the decoder.
	Owner          *int64 `json:"owner,omitempty"`
	Group          *int64 `json:"group,omitempty"`
	SelinuxContext string `json:"selinuxContext,omitempty"`
	// Bridge is a bridge in the container's namespace the tap joins.
	Bridge string `json:"bridge,omitempty"`

	mac net.HardwareAddr // the effective MAC: "mac", then CNI_ARGS MAC, then runtimeConfig.mac
}

func invalid(format string, a ...any) error {
	return spec.Errorf(spec.ErrInvalidNetworkConfig, format, a...)
}

// decode only decodes: DEL must succeed for a configuration ADD refused.
func decode(a *skel.CmdArgs) (*Config, error) {
	c := &Config{}
	if err := a.DecodeConf(c); err != nil {
		return nil, err
	}
	return c, nil
}

// maxID is the largest uid/gid a tap can be given: (uid_t)-1 means none.
const maxID = 1<<32 - 2

// load decodes and validates the whole configuration before anything is
// created (code 7 naming the key and the value).
func load(a *skel.CmdArgs) (*Config, error) {
	c, err := decode(a)
	if err != nil {
		return nil, err
	}
	if err := link.ValidateMTU(c.MTU); err != nil {
		return nil, err
	}
	for _, id := range []struct {
		key string
		v   *int64
	}{{"owner", c.Owner}, {"group", c.Group}} {
		if id.v != nil && (*id.v < 0 || *id.v > maxID) {
			return nil, invalid("%q value %d is invalid: must be between 0 and %d", id.key, *id.v, int64(maxID))
		}
	}
	if c.Bridge != "" {
		if err := spec.ValidateInterfaceName(c.Bridge); err != nil {
			return nil, invalid("\"bridge\" value %q is invalid: not a usable interface name", c.Bridge)
		}
	}
	// The reference's order, lowest precedence first.
	if c.mac, _, err = a.RequestedMAC(skel.MACKey, skel.MACCNIArgs, skel.MACRuntimeConfig); err != nil {
		return nil, err
	}
	if c.SelinuxContext != "" {
		if strings.ContainsAny(c.SelinuxContext, "\x00\n") {
			return nil, invalid("\"selinuxContext\" value %q is invalid: contains a NUL or newline", c.SelinuxContext)
		}
		if !selinuxEnabled() {
			return nil, invalid("\"selinuxContext\" value %q cannot be applied: SELinux is not enabled on this host", c.SelinuxContext)
		}
	}
	return c, nil
}

// selinuxEnabled reports whether the kernel runs SELinux (its filesystem
// is mounted). A variable so that a test can exercise the labelled path
// on a machine without SELinux.
var selinuxEnabled = func() bool {
	_, err := os.Stat("/sys/fs/selinux/enforce")
	return err == nil
}
