package dhcp

import (
	"encoding/json"
	"errors"
	"net"
	"net/netip"

	"github.com/patchbay-cni/patchbay/spec"
)

// The plugin and the daemon speak the reference's protocol (rpc.go): Go
// net/rpc over HTTP CONNECT on a unix socket, gob-encoded, with methods
// Allocate and Release taking the reference's skel.CmdArgs and returning its
// current.Result. Gob matches struct fields by name, so the types below
// (same field names) interoperate with the reference in both directions: the
// reference plugin works against our daemon, ours against the reference
// daemon for ADD and DEL. Check, GC and Status are ours. Types crossing the
// wire are exported because gob encodes exported fields only.

// WireArgs has the field names of the reference's skel.CmdArgs.
type WireArgs struct {
	ContainerID   string
	Netns         string
	IfName        string
	Args          string
	Path          string
	NetnsOverride string
	StdinData     []byte
}

// WireResult has the field names of the reference's current.Result (version
// 1.x types), the reply of Allocate and Check.
type WireResult struct {
	CNIVersion string
	Interfaces []*WireInterface
	IPs        []*WireIPConfig
	Routes     []*WireRoute
	DNS        WireDNS
}

type WireInterface struct {
	Name, Mac, Sandbox, SocketPath, PciID string
	Mtu                                   int
}

type WireIPConfig struct {
	Interface *int
	Address   net.IPNet
	Gateway   net.IP
}

type WireRoute struct {
	Dst      net.IPNet
	GW       net.IP
	MTU      int
	AdvMSS   int
	Priority int
	Table    *int
	Scope    *int
}

type WireDNS struct {
	Nameservers []string
	Domain      string
	Search      []string
	Options     []string
}

// GCArgs is GC's request: the network and its still valid attachments.
type GCArgs struct {
	Network string
	Valid   []spec.Attachment
}

// GCReply lists the attachments whose leases GC released.
type GCReply struct {
	Released []string
}

// StatusReply is Status's reply.
type StatusReply struct {
	Leases int
}

func toRPC(r *spec.Result) *WireResult {
	out := &WireResult{CNIVersion: spec.Current, DNS: WireDNS(r.DNS)}
	for _, ip := range r.IPs {
		c := &WireIPConfig{Address: net.IPNet{IP: ip.Address.Addr().AsSlice(), Mask: net.CIDRMask(ip.Address.Bits(), ip.Address.Addr().BitLen())}}
		if ip.Gateway.IsValid() {
			c.Gateway = ip.Gateway.AsSlice()
		}
		out.IPs = append(out.IPs, c)
	}
	for _, rt := range r.Routes {
		w := &WireRoute{Dst: net.IPNet{IP: rt.Dst.Addr().AsSlice(), Mask: net.CIDRMask(rt.Dst.Bits(), rt.Dst.Addr().BitLen())},
			MTU: rt.MTU, AdvMSS: rt.AdvMSS, Priority: rt.Priority, Table: rt.Table, Scope: rt.Scope}
		if rt.GW.IsValid() {
			w.GW = rt.GW.AsSlice()
		}
		out.Routes = append(out.Routes, w)
	}
	return out
}

// fromRPC converts a daemon reply, refusing addresses that do not decode
// (a daemon answering garbage must not become a bogus result).
func fromRPC(w *WireResult) (*spec.Result, error) {
	r := &spec.Result{DNS: spec.DNS(w.DNS)}
	for _, c := range w.IPs {
		p, ok := prefixOf(c.Address)
		if !ok {
			return nil, spec.Errorf(spec.ErrInternal, "the daemon returned an invalid address %v", c.Address)
		}
		ipc := &spec.IPConfig{Address: p}
		if gw, ok := netip.AddrFromSlice(c.Gateway); ok {
			ipc.Gateway = gw.Unmap()
		}
		r.IPs = append(r.IPs, ipc)
	}
	for _, w := range w.Routes {
		p, ok := prefixOf(w.Dst)
		if !ok {
			return nil, spec.Errorf(spec.ErrInternal, "the daemon returned an invalid route destination %v", w.Dst)
		}
		rt := &spec.Route{Dst: p.Masked(), MTU: w.MTU, AdvMSS: w.AdvMSS, Priority: w.Priority, Table: w.Table, Scope: w.Scope}
		if gw, ok := netip.AddrFromSlice(w.GW); ok {
			rt.GW = gw.Unmap()
		}
		r.Routes = append(r.Routes, rt)
	}
	return r, nil
}

func prefixOf(n net.IPNet) (netip.Prefix, bool) {
	a, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	a = a.Unmap()
	ones, bits := n.Mask.Size()
	if bits == 0 {
		return netip.Prefix{}, false
	}
	if bits == 128 && a.Is4() {
		ones -= 96
	}
	p := netip.PrefixFrom(a, ones)
	return p, p.IsValid()
}

// rpcError carries a CNI error through net/rpc, which keeps only a string:
// the daemon sends the error JSON, the plugin decodes it (the reference
// plugin shows it as text).
func rpcError(err error) error {
	if err == nil {
		return nil
	}
	ce := spec.AsError(err, spec.ErrInternal)
	b, _ := json.Marshal(ce)
	return errors.New(string(b))
}

// fromRPCError turns a daemon error back into a CNI error.
func fromRPCError(method string, err error) error {
	var se rpcServerError
	if errors.As(err, &se) {
		if ce, ok := spec.ParseError([]byte(se)); ok {
			return ce
		}
		return spec.Errorf(spec.ErrInternal, "daemon %s: %s", method, string(se))
	}
	return spec.Errorf(spec.ErrTryAgainLater, "daemon %s: %v", method, err)
}
