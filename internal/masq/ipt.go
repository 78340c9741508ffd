package masq

import (
	"errors"
	"fmt"
	"net/netip"
	"os"

	"github.com/coreos/go-iptables/iptables"
	"github.com/google/nftables"
)

// iptables names, as the reference plugins derive them (they ignore ifname).
func iptChain(k Key) string { return hashPrefix(28, "CNI-", k.Network+k.ContainerID) }

func iptComment(k Key) string { return fmt.Sprintf("name: %q id: %q", k.Network, k.ContainerID) }

func ipt(a netip.Addr) (*iptables.IPTables, error) {
	proto := iptables.ProtocolIPv4
	if !a.Is4() {
		proto = iptables.ProtocolIPv6
	}
	t, err := iptables.NewWithProtocol(proto)
	if err != nil {
		return nil, fmt.Errorf("locate iptables: %w", err)
	}
	return t, nil
}

func setupIPT(ips []netip.Prefix, k Key) error {
	chain, cm := iptChain(k), iptComment(k)
	for _, p := range ips {
		t, err := ipt(p.Addr())
		if err != nil {
			return err
		}
		mcast := "224.0.0.0/4"
		if !p.Addr().Is4() {
			mcast = "ff00::/8"
		}
		ok, err := t.ChainExists("nat", chain)
		if err != nil {
			return fmt.Errorf("iptables: %w", err)
		}
		if !ok {
			if err := t.NewChain("nat", chain); err != nil {
				return fmt.Errorf("iptables: create chain %s: %w", chain, err)
			}
		}
		for _, rule := range [][]string{
			{"nat", chain, "-d", p.Masked().String(), "-j", "ACCEPT", "-m", "comment", "--comment", cm},
			{"nat", chain, "!", "-d", mcast, "-j", "MASQUERADE", "-m", "comment", "--comment", cm},
			{"nat", "POSTROUTING", "-s", p.Addr().String(), "-j", chain, "-m", "comment", "--comment", cm},
		} {
			if err := t.AppendUnique(rule[0], rule[1], rule[2:]...); err != nil {
				return fmt.Errorf("iptables: %w", err)
			}
		}
	}
	return nil
}

func teardownIPT(ips []netip.Prefix, k Key) error {
	chain, cm := iptChain(k), iptComment(k)
	var errs []error
	for _, p := range ips {
		t, err := ipt(p.Addr())
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, src := range []string{p.Addr().String(), p.String()} {
			if err := t.Delete("nat", "POSTROUTING", "-s", src, "-j", chain, "-m", "comment", "--comment", cm); err != nil && !notExist(err) {
				errs = append(errs, err)
			}
		}
		if err := t.ClearAndDeleteChain("nat", chain); err != nil && !notExist(err) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func notExist(err error) bool {
	var e *iptables.Error
	return errors.As(err, &e) && e.IsNotExist()
}

// iptChainVisible reports whether the attachment's iptables chain exists in
// the iptables-nft nat tables, checked over netlink (no exec). Legacy
// iptables chains are invisible here.
func iptChainVisible(k Key) bool {
	f, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		return false
	}
	defer f.Close()
	c, err := nftables.New(nftables.WithNetNSFd(int(f.Fd())))
	if err != nil {
		return false
	}
	for _, fam := range []nftables.TableFamily{nftables.TableFamilyIPv4, nftables.TableFamilyIPv6} {
		if ch, err := c.ListChain(&nftables.Table{Name: "nat", Family: fam}, iptChain(k)); err == nil && ch != nil {
			return true
		}
	}
	return false
}
