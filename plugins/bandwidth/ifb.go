package bandwidth

import (
	"crypto/sha512"
	"encoding/hex"
	"fmt"
	"strings"
)

// ifbName is the reference's name for an attachment's ifb device: "bwp"
// and the first 12 hex digits of sha512(network name + container ID), so
// that either implementation's DEL finds the other's device.
func ifbName(network, containerID string) string {
	return "bwp" + hashHex(network + containerID)[:12]
}

func hashHex(s string) string {
	sum := sha512.Sum512([]byte(s))
	return hex.EncodeToString(sum[:])
}

// The alias (IFLA_IFALIAS) on the ifb devices this plugin makes says which
// network and interface each is for: GC removes only its own network's
// devices, and an ADD or DEL never takes over another attachment's device
// whose name collides (same network and container ID, other interface).
// Network names may be long; the alias holds a hash of it.
const aliasPrefix = "patchbay-bandwidth net-sha512="

func ifbAlias(network, ifName string) string {
	return aliasPrefix + networkTag(network) + " if=" + ifName
}

func networkTag(network string) string { return hashHex(network)[:16] }

// parseAlias returns the network tag and interface of one of our aliases.
func parseAlias(alias string) (tag, ifName string, ok bool) {
	rest, ok := strings.CutPrefix(alias, aliasPrefix)
	if !ok {
		return "", "", false
	}
	tag, ifName, ok = strings.Cut(rest, " if=")
	return tag, ifName, ok && tag != "" && ifName != ""
}

// ownerMismatch explains why an existing device named like ours is not
// this attachment's; "" when it is, or when it has no alias (a device of
// the reference plugin, which names devices the same way).
func ownerMismatch(alias, network, ifName string) string {
	if alias == "" {
		return ""
	}
	tag, ifn, ok := parseAlias(alias)
	switch {
	case !ok:
		return fmt.Sprintf("its alias %q is not this plugin's", alias)
	case tag != networkTag(network):
		return "it belongs to another network"
	case ifn != ifName:
		return fmt.Sprintf("it shapes interface %q of this container", ifn)
	}
	return ""
}
