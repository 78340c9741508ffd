// Package masq installs and removes the ipMasq rules of the bridge and ptp
// plugins: masquerade traffic from a container address to anything outside
// its subnet, except multicast.
//
// The nftables backend (the default) talks netlink directly and uses the
// same table, chains and rule comments as the reference plugins' nftables
// backend (table inet cni_plugins_masquerade, chains postrouting and
// masq_checks, one rule per address commented with a hash of network,
// ifname and container ID). Sharing that layout means a node that switches
// between the reference plugins and ours keeps one consistent set of rules:
// either implementation's DEL or GC removes exactly the other's rules for
// that attachment. The iptables backend execs iptables (through
// go-iptables) with the reference's chain and comment names.
package masq

import (
	"crypto/sha512"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/patchbay-cni/patchbay/spec"
)

// Backends.
const (
	NFTables = "nftables"
	IPTables = "iptables"
)

// Key names one attachment's rules.
type Key struct {
	Network, IfName, ContainerID string
}

// ValidateBackend checks an ipMasqBackend value ("" means nftables).
func ValidateBackend(b string) error {
	switch b {
	case "", NFTables, IPTables:
		return nil
	}
	return spec.Errorf(spec.ErrInvalidNetworkConfig, "\"ipMasqBackend\" value %q is invalid: must be %q or %q", b, NFTables, IPTables)
}

// Setup masquerades traffic from each address of ips (host bits set,
// prefix = the subnet) to outside that subnet. It replaces any rules the
// same attachment had. Run it in the host namespace.
func Setup(backend string, ips []netip.Prefix, k Key) error {
	switch backend {
	case "", NFTables:
		return setupNFT(ips, k)
	case IPTables:
		return setupIPT(ips, k)
	}
	return ValidateBackend(backend)
}

// Teardown removes the attachment's rules. The nftables rules are always
// looked for (a netlink dump, cheap); iptables rules only when the backend
// is iptables or the iptables chain is seen in the iptables-nft nat table,
// so a DEL on a pure-nftables setup execs nothing.
func Teardown(backend string, ips []netip.Prefix, k Key) error {
	var errs []error
	if err := teardownNFT(k); err != nil {
		errs = append(errs, err)
	}
	if backend == IPTables || iptChainVisible(k) {
		if err := teardownIPT(ips, k); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// GC removes the nftables rules of network whose attachment is not in valid.
func GC(network string, valid []spec.Attachment) error { return gcNFT(network, valid) }

// hashPrefix returns the first n hex digits of sha512(s) after prefix, the
// reference plugins' naming scheme.
func hashPrefix(n int, prefix, s string) string {
	sum := sha512.Sum512([]byte(s))
	return (prefix + hex.EncodeToString(sum[:]))[:n]
}

func networkHash(network string) string { return hashPrefix(16, "", network) }

func instanceHash(k Key) string {
	return networkHash(k.Network) + "-" + hashPrefix(16, "", k.IfName+":"+k.ContainerID)
}

// maxComment is the longest rule comment nftables keeps.
const maxComment = 128

func comment(k Key) string {
	c := fmt.Sprintf("%s, net: %s, if: %s, id: %s", instanceHash(k), stripQuotes(k.Network), stripQuotes(k.IfName), stripQuotes(k.ContainerID))
	if len(c) > maxComment {
		c = c[:maxComment]
	}
	return c
}

func stripQuotes(s string) string { return strings.ReplaceAll(s, `"`, "") }
