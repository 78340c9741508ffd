package link

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// tempName is a name for a link on its way into another namespace:
// "pbtmp" and 8 random hex digits (13 characters, within IFNAMSIZ).
// AddLinkIn tries addTempName first.
func tempName() string {
	b := make([]byte, 4)
	rand.Read(b)
	return "pbtmp" + hex.EncodeToString(b)
}

// addTempName is the temporary name AddLinkIn gives a link it makes in n
// for name first: fixed for the pair (n's inode, name), so that the DEL
// after an ADD killed between the creation and the rename finds the link
// (DelAddLeftover). Another namespace's name for the same ifname differs.
func (n *NS) addTempName(name string) (string, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(n.fd), &st); err != nil {
		return "", fmt.Errorf("stat %s: %w", n, err)
	}
	sum := sha256.Sum256(fmt.Appendf(nil, "%d:%d/%s", st.Dev, st.Ino, name))
	return "pbtmp" + hex.EncodeToString(sum[:4]), nil
}

// DelAddLeftover deletes the link an AddLinkIn(n, _, name) killed before
// its rename left in n under its temporary name, if there is one (the DEL
// of the interface plugins). Only AddLinkIn makes a link of that name.
func (n *NS) DelAddLeftover(name string) error {
	tmp, err := n.addTempName(name)
	if err != nil {
		return err
	}
	l, err := n.FindLink(tmp)
	if l == nil {
		return err
	}
	if err := n.H.LinkDel(l); err != nil && !IsNotFound(err) {
		return fmt.Errorf("delete %q, left in %s by a killed ADD of %q: %w", tmp, n, name, err)
	}
	return nil
}

// AddLinkIn creates l through n, the namespace its parent link (macvlan,
// ipvlan and vlan master) is in, directly inside dst, and names it name
// there. Across namespaces the link is created under a temporary name and
// renamed inside dst, so that a link called name in n cannot collide with
// it (kernels have checked the name in the creating namespace too; the
// reference plugins create under a temporary name for the same reason).
// dst may be n itself (linkInContainer): then the link is created under
// name at once, as is a tun/tap device, which the kernel makes in the
// namespace of the thread opening /dev/net/tun whatever the handle's: it
// is made from a thread inside dst. l's Name and Namespace are
// overwritten. It returns the new link as the kernel reports it; a name
// taken in dst is an error that names it, and leaves nothing behind. The
// new link is down.
func (n *NS) AddLinkIn(dst *NS, l netlink.Link, name string) (netlink.Link, error) {
	at := l.Attrs()
	if _, tuntap := l.(*netlink.Tuntap); tuntap || dst == n {
		at.Name, at.Namespace = name, nil
		add := func() error { return retryErr(func() error { return dst.H.LinkAdd(l) }) }
		var err error
		if tuntap {
			err = dst.Do(add)
		} else {
			err = add()
		}
		if err != nil {
			if taken, _ := dst.FindLink(name); taken != nil {
				return nil, fmt.Errorf("interface %q already exists in %s", name, dst)
			}
			return nil, fmt.Errorf("create %s %q in %s: %w", l.Type(), name, dst, err)
		}
		return dst.LinkByName(name)
	}
	at.Namespace = netlink.NsFd(dst.Fd())
	first, err := dst.addTempName(name)
	if err != nil {
		return nil, err
	}
	for i := range 4 {
		switch i {
		case 0: // the fixed name: the DEL after a kill finds it
			at.Name = first
		case 1: // a link holding it in dst is the leftover of a killed ADD of name
			if err := dst.DelAddLeftover(name); err != nil {
				return nil, err
			}
		default: // someone else holds it in n
			at.Name = tempName()
		}
		if err = retryErr(func() error { return n.H.LinkAdd(l) }); !errors.Is(err, unix.EEXIST) {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("create %s %q in %s: %w", l.Type(), name, dst, err)
	}
	tl, err := dst.LinkByName(at.Name)
	if err != nil {
		return nil, fmt.Errorf("find new %s %q in %s: %w", l.Type(), at.Name, dst, err)
	}
	if err := dst.rename(tl, name); err != nil {
		return nil, alsoFailed(err, "deleting it as "+at.Name, dst.H.LinkDel(tl))
	}
	return tl, nil
}

// MoveLink moves l from n into dst and names it name there (host-device's
// ADD, and its DEL moving the device back). l ends down: a link is
// renamed only while down, and the kernel takes a link down when it
// changes namespace anyway. When l's name is taken in dst
// it travels under a temporary name. If the move or the rename fails, l is
// put back into n under its old name; what could not be put back is part
// of the error. dst may be n itself: then l is only renamed.
func (n *NS) MoveLink(l netlink.Link, dst *NS, name string) (_ netlink.Link, err error) {
	old := l.Attrs().Name
	defer func() {
		if err != nil {
			l.Attrs().Name = old // l is back (or never left) under its old name
		}
	}()
	if l.Attrs().Flags&net.FlagUp != 0 {
		if err := n.H.LinkSetDown(l); err != nil {
			return nil, fmt.Errorf("set %q down: %w", old, err)
		}
	}
	if dst == n {
		if err := n.rename(l, name); err != nil {
			return nil, err
		}
		return l, nil
	}
	travel := old
	err = n.H.LinkSetNsFd(l, dst.Fd())
	if errors.Is(err, unix.EEXIST) {
		travel = tempName()
		if err := n.rename(l, travel); err != nil {
			return nil, err
		}
		if err = n.H.LinkSetNsFd(l, dst.Fd()); err != nil {
			return nil, alsoFailed(fmt.Errorf("move %q into %s: %w", old, dst, err), "renaming it back", n.rename(l, old))
		}
	}
	if err != nil {
		return nil, fmt.Errorf("move %q into %s: %w", old, dst, err)
	}
	ml, err := dst.LinkByName(travel)
	if err != nil {
		return nil, fmt.Errorf("find %q after moving it into %s: %w", travel, dst, err)
	}
	if err := dst.rename(ml, name); err != nil {
		return nil, alsoFailed(err, "putting it back", dst.moveBack(ml, n, old))
	}
	return ml, nil
}

// moveBack returns l, which MoveLink brought into n (under the name it
// travelled with), to src as old.
func (n *NS) moveBack(l netlink.Link, src *NS, old string) error {
	travel := l.Attrs().Name
	if err := n.H.LinkSetNsFd(l, src.Fd()); err != nil {
		return fmt.Errorf("move it into %s: %w", src, err)
	}
	bl, err := src.LinkByName(travel)
	if err == nil {
		err = src.rename(bl, old)
	}
	if err != nil {
		return fmt.Errorf("%q is back in %s as %q: %w", old, src, travel, err)
	}
	return nil
}

// alsoFailed adds to err that the step taking back a half-made change
// failed too.
func alsoFailed(err error, what string, uerr error) error {
	if uerr == nil {
		return err
	}
	return fmt.Errorf("%w (and %s failed: %v)", err, what, uerr)
}

// rename names down link l name (nothing to do when it already is), and
// updates l. A name taken is an error naming it.
func (n *NS) rename(l netlink.Link, name string) error {
	if l.Attrs().Name == name {
		return nil
	}
	err := n.H.LinkSetName(l, name)
	if errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("interface %q already exists in %s", name, n)
	}
	if err != nil {
		return fmt.Errorf("rename %q to %q in %s: %w", l.Attrs().Name, name, n, err)
	}
	l.Attrs().Name = name
	return nil
}
