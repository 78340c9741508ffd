// Package confcheck holds the value checks plugin configurations share,
// against what the kernel accepts: a value outside them is refused with
// code 7 (4 when it came from CNI_ARGS) naming the key and the value, before
// anything is changed, instead of being truncated on its way into a netlink
// attribute (txQLen 4294967301 is 5 as a u32) or answered with a bare errno.
package confcheck

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strings"

	"github.com/patchbay-cni/patchbay/spec"
)

// Absent reports whether a key kept raw for checking (so that a bad value
// is refused by name) was left out or set to null: both mean unset.
func Absent(raw json.RawMessage) bool {
	s := bytes.TrimSpace(raw)
	return len(s) == 0 || bytes.Equal(s, []byte("null"))
}

// Kernel field widths, for Int's bounds.
const (
	MaxU32 = math.MaxUint32
	// MaxMTU is the largest MTU the kernel can hold: netlink carries a u32
	// but dev_set_mtu takes an int.
	MaxMTU = math.MaxInt32
)

// CodeFor is the error code for a bad value from source: 4 for CNI_ARGS
// (the environment), 7 for the configuration.
func CodeFor(source string) uint {
	if strings.HasPrefix(source, "CNI_ARGS") {
		return spec.ErrInvalidEnvironment
	}
	return spec.ErrInvalidNetworkConfig
}

// Int checks min <= v <= max.
func Int(key string, v, lo, hi int64) error {
	if v < lo || v > hi {
		return spec.Errorf(CodeFor(key), "%s %d is out of range: must be %d-%d", key, v, lo, hi)
	}
	return nil
}

// Text refuses control characters (tab allowed) and bytes outside ASCII in
// a value that goes to the kernel as text (a sysctl value): a newline would
// end the value early, and nothing the kernel reads that way is meant to
// hold them. max bounds the length in bytes.
func Text(key, value string, max int) error {
	if len(value) > max {
		return spec.Errorf(CodeFor(key), "%s %.40q... is invalid: longer than %d bytes", key, value, max)
	}
	for _, c := range []byte(value) {
		if (c < 0x20 && c != '\t') || c >= 0x7f {
			return spec.Errorf(CodeFor(key), "%s %q is invalid: contains %s", key, value, describe(c))
		}
	}
	return nil
}

func describe(c byte) string {
	switch {
	case c == '\n':
		return "a newline"
	case c < 0x20 || c == 0x7f:
		return fmt.Sprintf("the control character %q", c)
	}
	return fmt.Sprintf("the non-ASCII byte 0x%02x", c)
}

// DNS refuses control characters in a dns dictionary's strings: they go
// into results, from which runtimes write resolv.conf, where a newline
// would add lines of its own. key is the dictionary's path ("dns",
// "ipam.dns").
func DNS(key string, d spec.DNS) error {
	lists := []struct {
		name string
		vals []string
	}{{"nameservers", d.Nameservers}, {"domain", []string{d.Domain}}, {"search", d.Search}, {"options", d.Options}}
	for _, l := range lists {
		for i, v := range l.vals {
			for _, c := range v {
				if c < 0x20 || c == 0x7f {
					field := fmt.Sprintf("%s.%s[%d]", key, l.name, i)
					if l.name == "domain" {
						field = key + ".domain"
					}
					return spec.Errorf(spec.ErrInvalidNetworkConfig, "%s %q is invalid: contains %s", field, v, describe(byte(c)))
				}
			}
		}
	}
	return nil
}
