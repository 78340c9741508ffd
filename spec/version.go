package spec

import (
	"fmt"
	"strconv"
	"strings"
)

// Spec versions we implement, oldest first.
const (
	V010 = "0.1.0"
	V020 = "0.2.0"
	V030 = "0.3.0"
	V031 = "0.3.1"
	V040 = "0.4.0"
	V100 = "1.0.0"
	V110 = "1.1.0"

	// Current is the newest version we speak.
	Current = V110
)

// AllVersions lists every supported version, oldest first.
var AllVersions = []string{V010, V020, V030, V031, V040, V100, V110}

// Verbs.
const (
	CmdAdd     = "ADD"
	CmdDel     = "DEL"
	CmdCheck   = "CHECK"
	CmdGC      = "GC"
	CmdStatus  = "STATUS"
	CmdVersion = "VERSION"
)

// Semver is a parsed major.minor.patch version.
type Semver struct{ Major, Minor, Patch int }

func (s Semver) String() string { return fmt.Sprintf("%d.%d.%d", s.Major, s.Minor, s.Patch) }

// ParseVersion parses "X.Y.Z" (an empty string means 0.1.0 is NOT assumed here;
// callers apply the spec's default of 0.2.0 for a missing cniVersion via
// ConfigVersion).
func ParseVersion(v string) (Semver, error) {
	parts := strings.Split(v, ".")
	if len(parts) < 1 || len(parts) > 3 || v == "" {
		return Semver{}, fmt.Errorf("invalid version %q", v)
	}
	var nums [3]int
	for i, p := range parts {
		// Digits only: Atoi alone would take "+1".
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 || p == "" || strings.Trim(p, "0123456789") != "" {
			return Semver{}, fmt.Errorf("invalid version %q", v)
		}
		nums[i] = n
	}
	return Semver{nums[0], nums[1], nums[2]}, nil
}

// Compare returns -1, 0 or 1 comparing a and b; unparsable versions sort lowest.
func Compare(a, b string) int {
	va, errA := ParseVersion(a)
	vb, errB := ParseVersion(b)
	switch {
	case errA != nil && errB != nil:
		return 0
	case errA != nil:
		return -1
	case errB != nil:
		return 1
	}
	for _, d := range [3]int{va.Major - vb.Major, va.Minor - vb.Minor, va.Patch - vb.Patch} {
		if d < 0 {
			return -1
		}
		if d > 0 {
			return 1
		}
	}
	return 0
}

// GreaterOrEqual reports whether a >= b.
func GreaterOrEqual(a, b string) bool { return Compare(a, b) >= 0 }

// ConfigVersion applies the spec's default: a config without cniVersion is 0.2.0.
func ConfigVersion(v string) string {
	if v == "" {
		return V020
	}
	return v
}

// IsSupported reports whether v is one of AllVersions.
func IsSupported(v string) bool {
	for _, s := range AllVersions {
		if s == v {
			return true
		}
	}
	return false
}

// VerbSupported reports whether version v defines the verb. CHECK arrived in
// 0.4.0, GC and STATUS in 1.1.0; VERSION, ADD and DEL exist everywhere.
func VerbSupported(v, verb string) bool {
	switch verb {
	case CmdAdd, CmdDel, CmdVersion:
		return true
	case CmdCheck:
		return GreaterOrEqual(v, V040)
	case CmdGC, CmdStatus:
		return GreaterOrEqual(v, V110)
	}
	return false
}

// HighestCommon picks the highest version from cniVersion and cniVersions that
// is also in supported (our own list when supported is nil). It returns "" if
// there is none. A conflist's cniVersions entries newer than anything we know
// are skipped rather than failing the load.
func HighestCommon(cniVersion string, cniVersions []string, supported []string) string {
	if supported == nil {
		supported = AllVersions
	}
	ok := map[string]bool{}
	for _, s := range supported {
		ok[s] = true
	}
	best := ""
	for _, v := range append([]string{cniVersion}, cniVersions...) {
		if v == "" || !ok[v] {
			continue
		}
		if best == "" || Compare(v, best) > 0 {
			best = v
		}
	}
	return best
}

// VersionResult is the answer to VERSION.
type VersionResult struct {
	CNIVersion        string   `json:"cniVersion"`
	SupportedVersions []string `json:"supportedVersions"`
}
