package selection

import (
	"fmt"
	"strings"
	"unicode"
)

// Kubernetes name limits (apimachinery validation).
const (
	maxLabelLen     = 63
	maxSubdomainLen = 253
	// maxIfNameLen is IFNAMSIZ-1, the longest name the kernel accepts.
	maxIfNameLen = 15
)

// labelProblem explains why s is not a DNS-1123 label (§3.3: lower case
// alphanumerics or '-', starting and ending with an alphanumeric), or "".
// maxLen 0 means no length limit.
func labelProblem(s string, maxLen int) string {
	if s == "" {
		return "is empty"
	}
	if maxLen > 0 && len(s) > maxLen {
		return fmt.Sprintf("is longer than %d characters", maxLen)
	}
	for _, c := range s {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' {
			return fmt.Sprintf("contains %q: a DNS-1123 label must consist of lower case alphanumeric characters or '-'", c)
		}
	}
	if s[0] == '-' || s[len(s)-1] == '-' {
		return "must start and end with an alphanumeric character (DNS-1123 label)"
	}
	return ""
}

// namespaceProblem checks a namespace name: a DNS-1123 label of at most 63
// characters, as Kubernetes validates namespace names.
func namespaceProblem(ns string) string { return labelProblem(ns, maxLabelLen) }

// objectNameProblem checks a NetworkAttachmentDefinition (or IPAMClaim)
// name. §3.3 asks for "units of the DNS-1123 label format", i.e. labels
// joined by dots: a DNS-1123 subdomain, which is also what Kubernetes
// accepts for custom resource names (at most 253 characters). The spec only
// recommends, not requires, 63 characters per unit, so that is not enforced.
func objectNameProblem(name string) string {
	if name == "" {
		return "is empty"
	}
	if len(name) > maxSubdomainLen {
		return fmt.Sprintf("is longer than %d characters", maxSubdomainLen)
	}
	units := strings.Split(name, ".")
	for i, unit := range units {
		p := labelProblem(unit, 0)
		switch {
		case p == "":
		case len(units) == 1:
			return p
		case unit == "":
			return fmt.Sprintf("has an empty unit at position %d (units are DNS-1123 labels joined by '.')", i+1)
		default:
			return fmt.Sprintf("has unit %q that %s", unit, p)
		}
	}
	return ""
}

// ifNameProblem checks a Linux interface name the way the kernel's
// dev_valid_name does, and like spec.ValidateInterfaceName refuses non-ASCII
// (the delegate plugins would refuse it as CNI_IFNAME anyway).
func ifNameProblem(name string) string {
	switch {
	case name == "":
		return "is empty"
	case len(name) > maxIfNameLen:
		return fmt.Sprintf("is longer than %d characters", maxIfNameLen)
	case name == "." || name == "..":
		return "is not a usable name"
	}
	for _, c := range name {
		if c == '/' || c == ':' || c > unicode.MaxASCII || unicode.IsSpace(c) || !unicode.IsPrint(c) {
			return fmt.Sprintf("contains %q, which Linux does not allow in interface names", c)
		}
	}
	return ""
}
