package spec

import (
	"strings"
	"unicode"
)

// IFNAMSIZ-1: the longest interface name Linux accepts.
const MaxInterfaceNameLen = 15

// validIdent checks the spec's pattern for container IDs and network names:
// an alphanumeric first character, then alphanumerics, '_', '.' or '-'.
func validIdent(s string) bool {
	if s == "" {
		return false
	}
	for i, c := range s {
		alnum := c < 128 && (unicode.IsLetter(c) || unicode.IsDigit(c))
		if i == 0 && !alnum {
			return false
		}
		if !alnum && c != '_' && c != '.' && c != '-' {
			return false
		}
	}
	return true
}

// ValidateContainerID checks CNI_CONTAINERID (code 4: it is an environment variable).
func ValidateContainerID(id string) error {
	if id == "" {
		return Errorf(ErrInvalidEnvironment, "CNI_CONTAINERID is required and must not be empty")
	}
	if !validIdent(id) {
		return Errorf(ErrInvalidEnvironment, "CNI_CONTAINERID %q is invalid: must start with an alphanumeric character followed by alphanumerics, '_', '.' or '-'", id)
	}
	return nil
}

// ValidateNetworkName checks a network's "name" (code 7: it is configuration).
func ValidateNetworkName(name string) error {
	if name == "" {
		return Errorf(ErrInvalidNetworkConfig, "missing required key \"name\"")
	}
	if !validIdent(name) {
		return Errorf(ErrInvalidNetworkConfig, "\"name\" %q is invalid: must start with an alphanumeric character followed by alphanumerics, '_', '.' or '-'", name)
	}
	return nil
}

// ValidateInterfaceName checks CNI_IFNAME the way the kernel will (code 4).
func ValidateInterfaceName(name string) error {
	switch {
	case name == "":
		return Errorf(ErrInvalidEnvironment, "CNI_IFNAME is required and must not be empty")
	case len(name) > MaxInterfaceNameLen:
		return Errorf(ErrInvalidEnvironment, "CNI_IFNAME %q is invalid: longer than %d characters", name, MaxInterfaceNameLen)
	case name == "." || name == "..":
		return Errorf(ErrInvalidEnvironment, "CNI_IFNAME %q is invalid: not a usable name", name)
	}
	for _, c := range name {
		if c == '/' || c == ':' || c > unicode.MaxASCII || unicode.IsSpace(c) || !unicode.IsPrint(c) {
			return Errorf(ErrInvalidEnvironment, "CNI_IFNAME %q is invalid: contains %q", name, c)
		}
	}
	return nil
}

// ValidatePluginType checks a "type" (or "ipam.type") value: it names a file
// in CNI_PATH, so path separators and dot-names are refused.
func ValidatePluginType(field, typ string) error {
	if typ == "" || typ == "." || typ == ".." || strings.ContainsAny(typ, `/\`) || strings.ContainsRune(typ, 0) {
		return Errorf(ErrInvalidNetworkConfig, "%q value %q is invalid: must be a plain executable name without path separators", field, typ)
	}
	return nil
}
