package firewall

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/patchbay-cni/patchbay/spec"
)

// Every string that reaches a rule is one of the types below, and each can
// only be made by its validating constructor: a backend is never handed a
// raw string. Values built into this package (our own table and chain
// names) go through the same constructors at init.

// Invalid is the error for a refused value: CNI code 7 naming the key and
// the value (quoted, so control characters show as escapes).
func Invalid(key, value, why string) error {
	return spec.Errorf(spec.ErrInvalidNetworkConfig, "%q value %q is invalid: %s", key, value, why)
}

// printable reports whether s is non-empty printable ASCII (0x20-0x7e):
// no control characters (newline, NUL, DEL...) and nothing outside ASCII.
func printable(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// Limits of the kernel and the tools.
const (
	// maxIPTName is the longest iptables chain name (XT_EXTENSION_MAXNAMELEN
	// is 29 with the NUL).
	maxIPTName = 28
	// maxNFTName is the longest nftables table or chain name
	// (NFT_NAME_MAXLEN is 256 with the NUL).
	maxNFTName = 255
	// MaxComment is the longest rule comment both kernels keep (iptables
	// 255 bytes, nftables 253 of user data). The nft tool itself takes
	// only 128 on input, so the comments we build for nftables stay within
	// nftComment (the reference plugins cut theirs there too).
	MaxComment = 253
	nftComment = 128
	// maxIfName is IFNAMSIZ-1.
	maxIfName = 15
)

// Name is a table or chain name. Every Name is valid for nftables; IPT
// reports whether it is valid for iptables too (shorter, fewer characters).
type Name struct {
	s   string
	ipt bool
}

func (n Name) String() string { return n.s }

// IsZero reports whether n is the zero Name (no name).
func (n Name) IsZero() bool { return n.s == "" }

// IPT reports whether the name can be an iptables chain name.
func (n Name) IPT() bool { return n.ipt }

// ParseName validates an nftables table or chain name: 1-255 printable
// ASCII characters without spaces or quotes.
func ParseName(key, s string) (Name, error) {
	switch {
	case !printable(s):
		return Name{}, Invalid(key, s, "must be printable ASCII without control characters")
	case len(s) > maxNFTName:
		return Name{}, Invalid(key, s, fmt.Sprintf("longer than %d characters", maxNFTName))
	case strings.ContainsAny(s, " \"'\\"):
		return Name{}, Invalid(key, s, "must not contain spaces, quotes or backslashes")
	}
	return Name{s: s, ipt: iptNameErr(s) == ""}, nil
}

// ParseChain validates a user-given iptables chain that rules jump to (for
// example portmap's externalSetMarkChain): an iptables chain name that is
// not a built-in chain or target, so that it can only mean a chain.
func ParseChain(key, s string) (Name, error) {
	if why := iptNameErr(s); why != "" {
		return Name{}, Invalid(key, s, why)
	}
	if strings.Contains(builtinTargets, " "+strings.ToUpper(s)+" ") {
		return Name{}, Invalid(key, s, "is a built-in chain or target, not a user chain")
	}
	return Name{s: s, ipt: true}, nil
}

// iptNameErr says why s is not an iptables chain name ("" if it is):
// 1-28 characters of letters, digits, '_', '-' and '.', not starting with
// '-' (iptables refuses names starting with '-' or '!').
func iptNameErr(s string) string {
	if s == "" || len(s) > maxIPTName {
		return fmt.Sprintf("must be 1 to %d characters long", maxIPTName)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || (c == '-' && i > 0)
		if !ok {
			return "must be letters, digits, '_', '.' or '-' (not first)"
		}
	}
	return ""
}

// builtinTargets lists the built-in chains and the common targets: a
// chain name equal to one of them would mean something else after -j.
const builtinTargets = ` PREROUTING INPUT FORWARD OUTPUT POSTROUTING ACCEPT DROP RETURN QUEUE REJECT LOG NFLOG ULOG NFQUEUE MARK CONNMARK MASQUERADE SNAT DNAT REDIRECT NETMAP TPROXY CT NOTRACK TRACE TCPMSS CLASSIFY DSCP TOS TTL HL CHECKSUM AUDIT SECMARK CONNSECMARK IDLETIMER LED SET SYNPROXY TEE HMARK CLUSTERIP ECN RATEEST JUMP GOTO `

// shortID is id, or when it is longer than max, its first characters and
// a hash of the whole, max long in all: names and comments built from a
// long container ID (the spec sets no limit) stay within the kernel's
// limits and distinct.
func shortID(id string, max int) string {
	if len(id) <= max {
		return id
	}
	sum := sha256.Sum256([]byte(id))
	return id[:max-33] + "-" + hex.EncodeToString(sum[:])[:32]
}

// MustName is ParseName for names fixed in code (package-level values):
// it panics on a name that does not validate.
func MustName(s string) Name {
	n, err := ParseName("name", s)
	if err != nil {
		panic(err)
	}
	return n
}

// MustComment is NewComment for comments fixed in code; it panics on one
// that does not validate.
func MustComment(s string) Comment {
	c, err := NewComment("comment", s)
	if err != nil {
		panic(err)
	}
	return c
}

// Comment is a rule comment: printable ASCII, at most MaxComment bytes.
// The iptables writer quotes it; nftables stores it as rule user data.
type Comment struct{ s string }

func (c Comment) String() string { return c.s }

// IsZero reports whether c is the zero Comment (no comment).
func (c Comment) IsZero() bool { return c.s == "" }

// NewComment validates a comment; key names what it was built from.
func NewComment(key, s string) (Comment, error) {
	switch {
	case !printable(s):
		return Comment{}, Invalid(key, s, "a rule comment must be printable ASCII without control characters")
	case len(s) > MaxComment:
		return Comment{}, Invalid(key, s, fmt.Sprintf("a rule comment must be at most %d characters", MaxComment))
	}
	return Comment{s: s}, nil
}

// IfName is an interface name to match, optionally a prefix (iptables
// "eth+", nftables "eth*").
type IfName struct {
	s      string
	prefix bool
}

func (n IfName) String() string { return n.s }

// ParseIfName validates an interface name as the kernel does (1-15
// printable ASCII characters, no '/', ':' or space); wildcard, if not 0,
// is the character that may end the name to make it a prefix match.
func ParseIfName(key, s string, wildcard byte) (IfName, error) {
	n := IfName{s: s}
	if wildcard != 0 && len(s) > 1 && s[len(s)-1] == wildcard {
		n.s, n.prefix = s[:len(s)-1], true
	}
	switch {
	case !printable(n.s):
		return IfName{}, Invalid(key, s, "an interface name must be printable ASCII without control characters")
	case len(n.s) > maxIfName:
		return IfName{}, Invalid(key, s, fmt.Sprintf("an interface name is at most %d characters", maxIfName))
	case strings.ContainsAny(n.s, "/: \"'\\*+") || n.s == "." || n.s == "..":
		return IfName{}, Invalid(key, s, "not a usable interface name")
	case n.s[0] == '-' || n.s[0] == '!':
		// iptables would read it as an option or a negation.
		return IfName{}, Invalid(key, s, "an interface name starting with '-' or '!' is refused")
	}
	return n, nil
}

// Mark is a packet mark value under a mask.
type Mark struct{ Value, Mask uint32 }

// MarkBit is the mark of one bit (0..31), as portmap's markMasqBit.
func MarkBit(key string, bit int) (Mark, error) {
	if bit < 0 || bit > 31 {
		return Mark{}, spec.Errorf(spec.ErrInvalidNetworkConfig, "%q value %d is out of range 0..31", key, bit)
	}
	v := uint32(1) << uint(bit)
	return Mark{Value: v, Mask: v}, nil
}

func (m Mark) String() string { return fmt.Sprintf("%#x/%#x", m.Value, m.Mask) }
