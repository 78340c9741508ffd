package portmap

import (
	"fmt"
	"net"
	"net/netip"
	"os"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// enableRouteLocalnet sets route_localnet on the host interface that routes
// to the container, so that 127.0.0.1-sourced traffic may cross it (it is
// then masqueraded). Like the reference, it is skipped when no route exists.
func enableRouteLocalnet(cont netip.Addr) error {
	routes, err := netlink.RouteGet(net.IP(cont.AsSlice()))
	if err != nil || len(routes) == 0 {
		return nil
	}
	link, err := netlink.LinkByIndex(routes[0].LinkIndex)
	if err != nil {
		return nil
	}
	path := "/proc/sys/net/ipv4/conf/" + link.Attrs().Name + "/route_localnet"
	if b, err := os.ReadFile(path); err == nil && len(b) > 0 && b[0] == '1' {
		return nil
	}
	if err := os.WriteFile(path, []byte("1"), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// flushUDPConntrack deletes conntrack entries towards the mapped UDP host
// ports, for each family the container has.
func flushUDPConntrack(r *request) error {
	var filters []netlink.CustomConntrackFilter
	for _, m := range r.Mappings {
		if m.Proto != "udp" {
			continue
		}
		f := &netlink.ConntrackFilter{}
		if err := f.AddProtocol(unix.IPPROTO_UDP); err != nil {
			return err
		}
		if err := f.AddPort(netlink.ConntrackOrigDstPort, m.HostPort); err != nil {
			return err
		}
		filters = append(filters, f)
	}
	if len(filters) == 0 {
		return nil
	}
	for _, fam := range []struct {
		have bool
		f    netlink.InetFamily
	}{{r.ContV4.IsValid(), unix.AF_INET}, {r.ContV6.IsValid(), unix.AF_INET6}} {
		if !fam.have {
			continue
		}
		if _, err := netlink.ConntrackDeleteFilters(netlink.ConntrackTable, fam.f, filters...); err != nil {
			return err
		}
	}
	return nil
}
