package firewall

import (
	"fmt"
	"net"
)

// The MAC spoof check (bridge's macspoofchk) drops frames entering a
// bridge from a container's port whose source MAC is not the container's.
// The layout is the reference plugins': table bridge nat, base chain
// PREROUTING (filter, priority -300), and per attachment the chains
// cni-br-iface-<id> and cni-br-iface-<id>-mac, every rule commented
// macspoofchk-<id>, where id is "<containerID>-<ifname>".

var (
	spoofTable      = Table{Kind: NFTables, NFTFamily: "bridge", Name: MustName("nat")}
	spoofPrerouting = MustName("PREROUTING")
)

// spoofNames are the chains and comment of id; an id too long for a
// 128-byte comment (the reference fails there) is shortened with a hash.
func spoofNames(id string) (iface, mac Name, cm Comment, err error) {
	id = shortID(id, nftComment-len("macspoofchk-"))
	if iface, err = ParseName("macspoofchk chain", "cni-br-iface-"+id); err != nil {
		return
	}
	if mac, err = ParseName("macspoofchk chain", "cni-br-iface-"+id+"-mac"); err != nil {
		return
	}
	cm, err = NewComment("macspoofchk rule comment", "macspoofchk-"+id)
	return
}

// SetupSpoofCheck installs the check for the host port hostIface, allowing
// only source MAC mac; id is "<containerID>-<ifname>".
func (s *Session) SetupSpoofCheck(hostIface, mac, id string) error {
	rs, err := spoofRuleset(hostIface, mac, id)
	if err != nil {
		return err
	}
	if err := s.Backend(NFTables).Apply(rs); err != nil {
		return fmt.Errorf("install macspoofchk rules: %w", err)
	}
	return nil
}

func spoofRuleset(hostIface, mac, id string) (*Ruleset, error) {
	hw, err := net.ParseMAC(mac)
	if err != nil || len(hw) != 6 {
		return nil, Invalid("mac", mac, "macspoofchk needs an Ethernet MAC address")
	}
	port, err := ParseIfName("host interface", hostIface, 0)
	if err != nil {
		return nil, err
	}
	ifc, macc, cm, err := spoofNames(id)
	if err != nil {
		return nil, err
	}
	return &Ruleset{
		Table:  spoofTable,
		Owner:  Owner{Exact: cm.s},
		Shared: []*Chain{{Name: spoofPrerouting, Hook: &Hook{Type: "filter", Hook: "prerouting", Priority: -300}, Mode: Present}},
		Owned: []*Chain{
			{Name: macc, Rules: []Rule{
				{Comment: cm, Match: []Match{EtherSrc{MAC: hw}}, Verdict: Return{}},
				{Comment: cm, Verdict: Drop{}},
			}},
			{Name: ifc, Rules: []Rule{{Comment: cm, Verdict: Jump{Chain: macc}}}},
		},
		Rules: []Rule{{Chain: spoofPrerouting, Comment: cm, Match: []Match{Iface{Name: port}}, Verdict: Jump{Chain: ifc}}},
	}, nil
}

// TeardownSpoofCheck removes the check for id; missing pieces are fine.
func (s *Session) TeardownSpoofCheck(id string) error {
	ifc, macc, cm, err := spoofNames(id)
	if err != nil {
		return err
	}
	err = s.Backend(NFTables).Remove(Selector{Table: spoofTable, Owner: Owner{Exact: cm.s},
		In: []Name{spoofPrerouting}, Chains: []Name{ifc, macc}})
	if err != nil {
		return fmt.Errorf("remove macspoofchk rules: %w", err)
	}
	return nil
}

// CheckSpoofID checks, before anything is created, that the spoof check's
// chain names and comment can be made from id.
func CheckSpoofID(id string) error {
	_, _, _, err := spoofNames(id)
	return err
}
