package spec

import (
	"strconv"
	"strings"
	"testing"
)

func TestValidateContainerID(t *testing.T) {
	for _, ok := range []string{"a", "0", "abc123", "a_b.c-d", "A-", strings.Repeat("f", 64), "x.."} {
		if err := ValidateContainerID(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "_a", ".a", "-a", "a/b", "a b", "a:b", "a;b", "é", "aé", "..", "a\x00"} {
		err := ValidateContainerID(bad)
		assertCode(t, err, ErrInvalidEnvironment, "CNI_CONTAINERID")
		if bad != "" && !strings.Contains(err.Error(), quote(bad)) {
			t.Errorf("%q: message does not name the value: %v", bad, err)
		}
	}
}

func TestValidateNetworkName(t *testing.T) {
	for _, ok := range []string{"dbnet", "n1", "my_net.v2-x"} {
		if err := ValidateNetworkName(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	assertCode(t, ValidateNetworkName(""), ErrInvalidNetworkConfig, `"name"`)
	for _, bad := range []string{"-n", ".n", "n/x", "../etc", "n x", "n\\x"} {
		assertCode(t, ValidateNetworkName(bad), ErrInvalidNetworkConfig, "name", quote(bad))
	}
}

func TestValidateInterfaceName(t *testing.T) {
	for _, ok := range []string{"eth0", "a", strings.Repeat("x", 15), "net1.100", "veth-ab_c", "...", ".a"} {
		if err := ValidateInterfaceName(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", strings.Repeat("x", 16), "a/b", "eth0:1", "a b", "a\tb", "a\nb", ".", "..", "eth\x00", "ethé", "eth\x7f"} {
		assertCode(t, ValidateInterfaceName(bad), ErrInvalidEnvironment, "CNI_IFNAME")
	}
	// The message names the value.
	assertCode(t, ValidateInterfaceName(strings.Repeat("x", 16)), ErrInvalidEnvironment, strings.Repeat("x", 16), "15")
}

func TestValidatePluginType(t *testing.T) {
	for _, ok := range []string{"bridge", "host-local", "a.b", "..x"} {
		if err := ValidatePluginType("type", ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", ".", "..", "../x", "a/b", "/bin/sh", `a\b`, "a\x00"} {
		assertCode(t, ValidatePluginType("ipam.type", bad), ErrInvalidNetworkConfig, "ipam.type")
	}
}

// quote is %q, as the messages use it.
func quote(s string) string { return strconv.Quote(s) }
