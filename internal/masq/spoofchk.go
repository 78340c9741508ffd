package masq

import (
	"errors"
	"fmt"
	"net"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
	"golang.org/x/sys/unix"
)

// The MAC spoof check drops frames entering a bridge from a container's
// port whose source MAC is not the container's. The layout follows the
// reference plugins: table bridge nat, base chain PREROUTING (filter,
// priority -300), and per attachment chains cni-br-iface-<id> and
// cni-br-iface-<id>-mac, every rule commented macspoofchk-<id>.
var bridgeNat = &nftables.Table{Name: "nat", Family: nftables.TableFamilyBridge}

const spoofPrerouting = "PREROUTING"

func spoofChains(id string) (iface, mac string) {
	iface = "cni-br-iface-" + id
	return iface, iface + "-mac"
}

func spoofComment(id string) []byte {
	return userdata.AppendString(nil, userdata.TypeComment, "macspoofchk-"+id)
}

// SpoofCheckSetup installs the check for host port hostIface, allowing only
// source MAC mac; id is "<containerID>-<ifname>".
func SpoofCheckSetup(hostIface, mac, id string) error {
	hw, err := net.ParseMAC(mac)
	if err != nil {
		return fmt.Errorf("macspoofchk: invalid MAC %q: %w", mac, err)
	}
	c, done, err := conn()
	if err != nil {
		return err
	}
	defer done()
	ifName, macName := spoofChains(id)
	prio := nftables.ChainPriorityRef(-300)
	accept := nftables.ChainPolicyAccept
	c.AddTable(bridgeNat)
	base := c.AddChain(&nftables.Chain{Name: spoofPrerouting, Table: bridgeNat, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookPrerouting, Priority: prio, Policy: &accept})
	ifc := c.AddChain(&nftables.Chain{Name: ifName, Table: bridgeNat})
	macc := c.AddChain(&nftables.Chain{Name: macName, Table: bridgeNat})
	c.FlushChain(ifc)
	c.FlushChain(macc)
	ud := spoofComment(id)
	name := make([]byte, unix.IFNAMSIZ)
	copy(name, hostIface)
	c.AddRule(&nftables.Rule{Table: bridgeNat, Chain: base, UserData: ud, Exprs: []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: name},
		&expr.Verdict{Kind: expr.VerdictJump, Chain: ifName},
	}})
	c.AddRule(&nftables.Rule{Table: bridgeNat, Chain: ifc, UserData: ud, Exprs: []expr.Any{
		&expr.Verdict{Kind: expr.VerdictJump, Chain: macName},
	}})
	c.AddRule(&nftables.Rule{Table: bridgeNat, Chain: macc, UserData: ud, Exprs: []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseLLHeader, Offset: 6, Len: 6},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: hw},
		&expr.Verdict{Kind: expr.VerdictReturn},
	}})
	c.AddRule(&nftables.Rule{Table: bridgeNat, Chain: macc, UserData: ud, Exprs: []expr.Any{
		&expr.Verdict{Kind: expr.VerdictDrop},
	}})
	if err := c.Flush(); err != nil {
		return fmt.Errorf("install macspoofchk rules: %w", err)
	}
	return nil
}

// SpoofCheckTeardown removes the check for id; missing pieces are fine.
func SpoofCheckTeardown(id string) error {
	c, done, err := conn()
	if err != nil {
		return err
	}
	defer done()
	rules, err := c.GetRules(bridgeNat, &nftables.Chain{Name: spoofPrerouting, Table: bridgeNat})
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("list macspoofchk rules: %w", err)
	}
	want := "macspoofchk-" + id
	for _, r := range rules {
		if cm, _ := userdata.GetString(r.UserData, userdata.TypeComment); cm == want {
			if err := c.DelRule(r); err != nil {
				return err
			}
		}
	}
	if err := c.Flush(); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("remove macspoofchk rule: %w", err)
	}
	ifName, macName := spoofChains(id)
	// The iface chain jumps to the mac chain: delete it first.
	for _, name := range []string{ifName, macName} {
		ch := &nftables.Chain{Name: name, Table: bridgeNat}
		c.FlushChain(ch)
		c.DelChain(ch)
		if err := c.Flush(); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("remove macspoofchk chain %s: %w", name, err)
		}
	}
	return nil
}
