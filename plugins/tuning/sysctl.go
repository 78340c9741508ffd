package tuning

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/patchbay-cni/patchbay/internal/confcheck"
	"github.com/patchbay-cni/patchbay/spec"
)

// ifnamePlaceholder in a key stands for CNI_IFNAME (reference behaviour:
// "net.ipv4.conf.IFNAME.arp_notify" tunes the attachment's interface).
const ifnamePlaceholder = "IFNAME"

// maxSysctlValue bounds a value: the kernel reads a sysctl write into at
// most a page, and no net.* value comes near it.
const maxSysctlValue = 4096

// sysctl is one validated key.
type sysctl struct {
	key   string // as configured
	rel   string // slash-separated path under /proc/sys, IFNAME resolved
	value string
}

func (s sysctl) path() string { return "/proc/sys/" + s.rel }

// parseSysctl validates a key and resolves it to a file under
// /proc/sys/net. Keys use sysctl(8)'s syntax: dots separate components
// unless the first separator is a slash, in which case slashes separate and
// dots are literal (so "net.ipv4.conf.eth0/100.rp_filter" and
// "net/ipv4/conf/eth0.100/rp_filter" name the same file). Refused, with
// code 7: absolute paths, empty, "." or ".." components, keys outside
// net.*, and per-interface keys (net.ipv4.conf.X.*, net.ipv6.neigh.X.*, ...)
// whose X is neither all, default, IFNAME nor the attachment's interface.
func parseSysctl(key, value, ifName string) (sysctl, error) {
	refuse := func(why string, a ...any) (sysctl, error) {
		return sysctl{}, spec.Errorf(spec.ErrInvalidNetworkConfig, "sysctl %q (value %q) is refused: %s", key, value, fmt.Sprintf(why, a...))
	}
	switch {
	case key == "":
		return refuse("empty key")
	case strings.HasPrefix(key, "/"):
		return refuse("absolute paths are not allowed; write the key relative to /proc/sys, e.g. net.ipv4.ip_forward")
	case strings.ContainsRune(key, 0) || strings.ContainsRune(value, 0):
		return refuse("contains a NUL byte")
	case strings.IndexFunc(key, func(r rune) bool { return r <= ' ' || r >= 0x7f }) >= 0:
		return refuse("the key contains a space, a control character or a non-ASCII character")
	case value == "":
		return refuse("empty value (the kernel would be given nothing to write)")
	}
	if err := confcheck.Text(fmt.Sprintf("sysctl %q value", key), value, maxSysctlValue); err != nil {
		return sysctl{}, err
	}
	var comps []string
	if i := strings.IndexAny(key, "./"); i >= 0 && key[i] == '/' {
		comps = strings.Split(key, "/")
	} else {
		comps = strings.Split(key, ".")
		for i, c := range comps {
			comps[i] = strings.ReplaceAll(c, "/", ".")
		}
	}
	for i, c := range comps {
		switch c {
		case "", ".", "..":
			return refuse("empty, \".\" or \"..\" path component (path traversal is not allowed)")
		case ifnamePlaceholder:
			comps[i] = ifName
		}
	}
	if comps[0] != "net" || len(comps) < 2 {
		return refuse("only keys under net.* (/proc/sys/net) can be set in the container's network namespace")
	}
	if len(comps) >= 4 && perInterface(comps[1], comps[2]) {
		if dev := comps[3]; dev != "all" && dev != "default" && dev != ifName {
			return refuse("names interface %q, but this attachment's interface is %q (use %s or %s)", dev, ifName, ifName, ifnamePlaceholder)
		}
	}
	rel := strings.Join(comps, "/")
	// Belt and braces: the joined path must still be a plain path below net/.
	if p := "/proc/sys/" + rel; filepath.Clean(p) != p || !strings.HasPrefix(p, "/proc/sys/net/") {
		return refuse("resolves outside /proc/sys/net")
	}
	return sysctl{key: key, rel: rel, value: value}, nil
}

// perInterface reports whether net.<family>.<kind>.<dev>.* keys are per device.
func perInterface(family, kind string) bool {
	switch family {
	case "ipv4", "ipv6":
		return kind == "conf" || kind == "neigh"
	case "mpls":
		return kind == "conf"
	}
	return false
}

// readSysctl reads the current value inside the current namespace. A key
// that does not exist there is not a namespaced sysctl (or not a sysctl):
// code 7 naming key and value.
func readSysctl(s sysctl) (string, error) {
	b, err := os.ReadFile(s.path())
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", spec.Errorf(spec.ErrInvalidNetworkConfig, "sysctl %q (value %q): no such key in the container's network namespace (only namespaced net.* sysctls can be set)", s.key, s.value)
		}
		if errors.Is(err, syscall.EISDIR) {
			return "", spec.Errorf(spec.ErrInvalidNetworkConfig, "sysctl %q (value %q): names a directory, not a key", s.key, s.value)
		}
		return "", fmt.Errorf("read sysctl %q: %w", s.key, err)
	}
	return strings.TrimSuffix(string(b), "\n"), nil
}

// checkWritable refuses, before anything changes, a key the container's
// namespace shows read-only (a global sysctl, such as net.core.rmem_max).
func checkWritable(s sysctl) error {
	if err := unix.Access(s.path(), unix.W_OK); err != nil {
		return spec.Errorf(spec.ErrInvalidNetworkConfig, "sysctl %q (value %q) is read-only in the container's network namespace (not a namespaced sysctl)", s.key, s.value)
	}
	return nil
}

// writeSysctl writes a value; the file must exist (no O_CREATE).
func writeSysctl(rel, key, value string) error {
	f, err := os.OpenFile("/proc/sys/"+rel, os.O_WRONLY, 0)
	if err != nil {
		if errors.Is(err, fs.ErrPermission) {
			return spec.Errorf(spec.ErrInvalidNetworkConfig, "sysctl %q (value %q) is read-only in the container's network namespace", key, value)
		}
		return fmt.Errorf("open sysctl %q: %w", key, err)
	}
	_, err = f.WriteString(value)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		if errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ERANGE) {
			return spec.Errorf(spec.ErrInvalidNetworkConfig, "sysctl %q: value %q is refused by the kernel: %v", key, value, err)
		}
		return fmt.Errorf("write sysctl %q = %q: %w", key, value, err)
	}
	return nil
}

// sameValue compares sysctl values ignoring whitespace layout: the kernel
// prints "32768\t60999" for a range written as "32768 60999".
func sameValue(a, b string) bool { return slices.Equal(strings.Fields(a), strings.Fields(b)) }
