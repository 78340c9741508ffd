package tuning

import (
	"errors"
	"fmt"
	"net"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/patchbay-cni/patchbay/internal/link"
	"github.com/patchbay-cni/patchbay/spec"
)

// linkState is what tuning reads from and writes to a link.
type linkState struct {
	mac      net.HardwareAddr
	promisc  bool
	mtu      int
	allmulti bool
	txQLen   int
}

func stateOf(l netlink.Link) linkState {
	at := l.Attrs()
	return linkState{
		mac:      at.HardwareAddr,
		promisc:  at.Promisc != 0,
		mtu:      at.MTU,
		allmulti: at.RawFlags&unix.IFF_ALLMULTI != 0,
		txQLen:   at.TxQLen,
	}
}

// findLink looks the attachment's interface up; nil when it does not exist.
func findLink(cont *link.NS, name string) (netlink.Link, error) {
	l, err := cont.FindLink(name)
	if err != nil {
		return nil, fmt.Errorf("look up interface %q: %w", name, err)
	}
	return l, nil
}

// setters, in the order ADD applies them (the reference's order).
func setMAC(h *netlink.Handle, l netlink.Link, mac net.HardwareAddr) error {
	return linkErr(h.LinkSetHardwareAddr(l, mac), l, "mac", mac.String())
}

func setPromisc(h *netlink.Handle, l netlink.Link, on bool) error {
	var err error
	if on {
		err = h.SetPromiscOn(l)
	} else {
		err = h.SetPromiscOff(l)
	}
	return linkErr(err, l, "promisc", boolStr(on))
}

func setMTU(h *netlink.Handle, l netlink.Link, mtu int) error {
	return linkErr(h.LinkSetMTU(l, mtu), l, "mtu", fmt.Sprint(mtu))
}

func setAllmulti(h *netlink.Handle, l netlink.Link, on bool) error {
	var err error
	if on {
		err = h.LinkSetAllmulticastOn(l)
	} else {
		err = h.LinkSetAllmulticastOff(l)
	}
	return linkErr(err, l, "allmulti", boolStr(on))
}

func setTxQLen(h *netlink.Handle, l netlink.Link, n int) error {
	return linkErr(h.LinkSetTxQLen(l, n), l, "txQLen", fmt.Sprint(n))
}

// linkErr turns a kernel refusal of a configured value into code 7 naming
// the key and value; other failures stay internal errors.
func linkErr(err error, l netlink.Link, key, value string) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ERANGE) || errors.Is(err, unix.EADDRNOTAVAIL) {
		return spec.Errorf(spec.ErrInvalidNetworkConfig, "%s %s is refused by the kernel for %q: %v", key, value, l.Attrs().Name, err)
	}
	return fmt.Errorf("set %s %s on %q: %w", key, value, l.Attrs().Name, err)
}
