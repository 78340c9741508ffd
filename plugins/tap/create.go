package tap

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/patchbay-cni/patchbay/internal/link"
)

// spec of one tap device, as created by mkTap (in this process or in the
// labelled helper).
type tapSpec struct {
	Name  string `json:"name"`
	Flags uint16 `json:"flags"`
	Owner *int64 `json:"owner,omitempty"`
	Group *int64 `json:"group,omitempty"`
}

// flags are the device flags the reference ends up with. Its two ways of
// creating a tap differ: with both owner and group set it uses netlink
// (vnet_hdr on, packet info on unless multi-queue), otherwise `ip tuntap`
// (packet info off, no vnet_hdr). Whoever attaches a queue later sets
// those two flags for itself, so only `ip -d link` sees them; they are
// kept identical so that the devices look the same as the reference's.
// IFF_TUN_EXCL makes creation fail on an existing device instead of
// attaching to it (it is not kept on the device).
func (c *Config) flags() uint16 {
	f := uint16(unix.IFF_TAP | unix.IFF_TUN_EXCL)
	netlinkPath := c.Owner != nil && c.Group != nil && c.SelinuxContext == ""
	if netlinkPath {
		f |= unix.IFF_VNET_HDR
	} else {
		f |= unix.IFF_NO_PI
	}
	if c.MultiQueue {
		f |= unix.IFF_MULTI_QUEUE | unix.IFF_NO_PI
	}
	return f
}

// mkTap creates a persistent tap device in the calling thread's network
// namespace (the kernel puts it where /dev/net/tun was opened) through
// the tun driver's ioctls: the same calls `ip tuntap add` makes, without
// the exec. Owner and group are set only when given (netlink's tuntap
// support always sets both, to root when unset, which is why the
// reference execs `ip` then).
func mkTap(s tapSpec) error {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open /dev/net/tun: %w", err)
	}
	defer unix.Close(fd) // after TUNSETPERSIST the device outlives it; before, it goes with it
	ifr, err := unix.NewIfreq(s.Name)
	if err != nil {
		return fmt.Errorf("tap name %q: %w", s.Name, err)
	}
	ifr.SetUint16(s.Flags)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		if errors.Is(err, unix.EBUSY) {
			return fmt.Errorf("create tap %q: an interface of that name exists", s.Name)
		}
		return fmt.Errorf("create tap %q (TUNSETIFF): %w", s.Name, err)
	}
	if s.Owner != nil {
		if err := unix.IoctlSetInt(fd, unix.TUNSETOWNER, int(*s.Owner)); err != nil {
			return fmt.Errorf("set the owner of tap %q to %d: %w", s.Name, *s.Owner, err)
		}
	}
	if s.Group != nil {
		if err := unix.IoctlSetInt(fd, unix.TUNSETGROUP, int(*s.Group)); err != nil {
			return fmt.Errorf("set the group of tap %q to %d: %w", s.Name, *s.Group, err)
		}
	}
	if err := unix.IoctlSetInt(fd, unix.TUNSETPERSIST, 1); err != nil {
		return fmt.Errorf("make tap %q persistent: %w", s.Name, err)
	}
	return nil
}

// createTap makes the tap inside cont. With selinuxContext the device must
// be created by a process running in that context (the tun driver labels
// the device with its creator's context), so a helper process (this
// executable, see init) is started with the label as its exec context,
// as the reference runs `ip` with it.
func createTap(cont *link.NS, c *Config, name string) error {
	s := tapSpec{Name: name, Flags: c.flags(), Owner: c.Owner, Group: c.Group}
	if c.SelinuxContext == "" {
		return cont.Do(func() error { return mkTap(s) })
	}
	// The exec context stays on the thread that set it: do it on a thread
	// of its own, locked and never unlocked, so that Go ends the thread
	// with the goroutine instead of reusing it.
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		done <- cont.Do(func() error { return mkTapLabelled(s, c.SelinuxContext) })
	}()
	return <-done
}

// helperEnv carries a tapSpec to the labelled helper process.
const helperEnv = "PATCHBAY_TAP_HELPER"

// The helper: this executable started by mkTapLabelled. It runs before
// anything else (it is a process of its own, in the container's namespace,
// in the SELinux context it was started with), creates the tap and exits.
func init() {
	if v, ok := os.LookupEnv(helperEnv); ok {
		os.Exit(helperMain(v))
	}
}

func helperMain(v string) int {
	var s tapSpec
	err := json.Unmarshal([]byte(v), &s)
	if err == nil {
		err = mkTap(s)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// writeExecLabel sets the SELinux context the calling thread's next exec
// runs in. A variable so that a test can run the helper path where SELinux
// is off.
var writeExecLabel = func(label string) error {
	return os.WriteFile("/proc/thread-self/attr/exec", []byte(label), 0)
}

// mkTapLabelled starts the helper from this (locked, namespaced) thread:
// the child inherits both the namespace and the exec context.
func mkTapLabelled(s tapSpec, label string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	arg, _ := json.Marshal(s)
	if err := writeExecLabel(label); err != nil {
		return fmt.Errorf("set the SELinux exec context %q: %w", label, err)
	}
	cmd := exec.Command(self)
	cmd.Env = []string{helperEnv + "=" + string(arg)}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("create tap %q in SELinux context %q: %v: %s", s.Name, label, err, strings.TrimSpace(stderr.String()))
	}
	return nil
}
