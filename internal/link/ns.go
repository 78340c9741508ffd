package link

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/patchbay-cni/patchbay/internal/netns"
	"github.com/patchbay-cni/patchbay/spec"
)

// NS is one network namespace with its netlink handle.
type NS struct {
	// Path is the namespace's path; "" for the caller's own namespace.
	Path string
	H    *netlink.Handle
	fd   vnetns.NsHandle
}

// Current opens the namespace the calling thread is in (the host side of a
// plugin). Callers running inside netns.Do stay on their locked thread.
func Current() (*NS, error) {
	fd, err := vnetns.Get()
	if err != nil {
		return nil, fmt.Errorf("open current network namespace: %w", err)
	}
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		fd.Close()
		return nil, fmt.Errorf("open netlink handle: %w", err)
	}
	return &NS{H: h, fd: fd}, nil
}

// Open opens the namespace at path. A missing or non-namespace path gives
// an error for which isNSGone is true.
func Open(path string) (*NS, error) {
	if !netns.Exists(path) {
		return nil, &nsGoneError{path: path}
	}
	fd, err := vnetns.GetFromPath(path)
	if err != nil {
		return nil, fmt.Errorf("open network namespace %q: %w", path, err)
	}
	h, err := netlink.NewHandleAt(fd, unix.NETLINK_ROUTE)
	if err != nil {
		fd.Close()
		return nil, fmt.Errorf("open netlink handle in %q: %w", path, err)
	}
	return &NS{Path: path, H: h, fd: fd}, nil
}

// OpenContainer opens the container namespace of an ADD or CHECK: a missing
// namespace is CNI code 3 (unknown container).
func OpenContainer(path string) (*NS, error) {
	n, err := Open(path)
	if isNSGone(err) {
		return nil, spec.Errorf(spec.ErrUnknownContainer, "network namespace %q does not exist", path)
	}
	return n, err
}

// OpenPair opens the two namespaces of a CHECK or of a chained plugin's
// ADD: the plugin's own (host) and the container's at contPath (code 3
// when gone). done closes both.
func OpenPair(contPath string) (host, cont *NS, done func(), err error) {
	return openPair(contPath, OpenContainer)
}

// OpenPairIfExists is OpenPair for a DEL, which needs no container
// namespace: cont is nil when contPath is empty or gone (as OpenIfExists).
func OpenPairIfExists(contPath string) (host, cont *NS, done func(), err error) {
	return openPair(contPath, OpenIfExists)
}

// OpenForAdd is OpenPair for an interface plugin's ADD: it also refuses an
// ifName the container already has, before the plugin changes anything
// (the spec requires an error for a taken name).
func OpenForAdd(contPath, ifName string) (host, cont *NS, done func(), err error) {
	if host, cont, done, err = OpenPair(contPath); err != nil {
		return nil, nil, nil, err
	}
	if err = cont.CheckNameFree(ifName); err != nil {
		done()
		return nil, nil, nil, err
	}
	return host, cont, done, nil
}

func openPair(contPath string, openCont func(string) (*NS, error)) (host, cont *NS, done func(), err error) {
	if host, err = Current(); err != nil {
		return nil, nil, nil, err
	}
	if cont, err = openCont(contPath); err != nil {
		host.Close()
		return nil, nil, nil, err
	}
	return host, cont, func() { cont.Close(); host.Close() }, nil
}

// OpenIfExists opens the container namespace of a DEL, which needs none:
// an empty path or a namespace that is gone give nil and no error (there
// is nothing left to remove in it).
func OpenIfExists(path string) (*NS, error) {
	if path == "" {
		return nil, nil
	}
	n, err := Open(path)
	if isNSGone(err) {
		return nil, nil
	}
	return n, err
}

// String names the namespace in messages.
func (n *NS) String() string {
	if n.Path == "" {
		return "the host namespace"
	}
	return n.Path
}

// Fd is the namespace file descriptor (valid until Close).
func (n *NS) Fd() int { return int(n.fd) }

// Close releases the handle and the namespace descriptor.
func (n *NS) Close() {
	if n == nil {
		return
	}
	n.H.Close()
	n.fd.Close()
}

type nsGoneError struct{ path string }

func (e *nsGoneError) Error() string {
	return fmt.Sprintf("network namespace %q does not exist", e.path)
}

// isNSGone reports whether err says a namespace path no longer exists.
func isNSGone(err error) bool {
	var g *nsGoneError
	return errors.As(err, &g)
}

// Do runs f with the thread inside this namespace (for /proc/sys writes,
// which resolve against the opening thread's namespace).
func (n *NS) Do(f func() error) error {
	if n.Path == "" {
		return f()
	}
	return netns.Do(n.Path, f)
}

// ReadSysctl reads a /proc/sys key (slash separated).
func ReadSysctl(key string) (string, error) {
	b, err := os.ReadFile("/proc/sys/" + strings.TrimPrefix(key, "/"))
	return strings.TrimSpace(string(b)), err
}

// WriteSysctl writes a slash-separated key (safe for names with dots).
func WriteSysctl(key, value string) error {
	return os.WriteFile("/proc/sys/"+strings.TrimPrefix(key, "/"), []byte(value), 0o644)
}

// retry repeats a netlink call the kernel interrupted: EINTR, or a dump
// that changed underneath us (NLM_F_DUMP_INTR).
func retry[T any](f func() (T, error)) (T, error) {
	var (
		v   T
		err error
	)
	for range 5 {
		v, err = f()
		if !errors.Is(err, netlink.ErrDumpInterrupted) && !errors.Is(err, unix.EINTR) {
			return v, err
		}
	}
	return v, err
}

func retryErr(f func() error) error {
	_, err := retry(func() (struct{}, error) { return struct{}{}, f() })
	return err
}

// IsNotFound reports whether err says a link does not exist.
func IsNotFound(err error) bool {
	var nf netlink.LinkNotFoundError
	return errors.As(err, &nf) || errors.Is(err, unix.ENODEV)
}

// LinkByName looks a link up by name.
func (n *NS) LinkByName(name string) (netlink.Link, error) {
	return retry(func() (netlink.Link, error) { return n.H.LinkByName(name) })
}

// FindLink looks a link up by name; it returns nil and no error when
// there is none.
func (n *NS) FindLink(name string) (netlink.Link, error) {
	l, err := n.LinkByName(name)
	if IsNotFound(err) {
		return nil, nil
	}
	return l, err
}

// LinkList lists every link of the namespace.
func (n *NS) LinkList() ([]netlink.Link, error) {
	return retry(n.H.LinkList)
}

// LinkByIndex looks a link up by index.
func (n *NS) LinkByIndex(idx int) (netlink.Link, error) {
	return retry(func() (netlink.Link, error) { return n.H.LinkByIndex(idx) })
}

// AddrList lists a link's addresses of a family (netlink.FAMILY_*).
func (n *NS) AddrList(l netlink.Link, family int) ([]netlink.Addr, error) {
	return retry(func() ([]netlink.Addr, error) { return n.H.AddrList(l, family) })
}

// RouteListFiltered lists routes matching filter.
func (n *NS) RouteListFiltered(family int, filter *netlink.Route, mask uint64) ([]netlink.Route, error) {
	return retry(func() ([]netlink.Route, error) { return n.H.RouteListFiltered(family, filter, mask) })
}
