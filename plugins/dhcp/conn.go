package dhcp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/mdlayher/packet"
	"github.com/vishvananda/netlink"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"

	"github.com/patchbay-cni/patchbay/internal/link"
)

const (
	clientPort = 68
	serverPort = 67
)

var broadcastMAC = net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

// conn is a DHCP client socket on one interface: an AF_PACKET datagram
// socket opened inside the container's namespace, so it works before the
// interface has an address and needs no port 68 of its own. nclient4's raw
// socket always sends to the broadcast MAC from 0.0.0.0; RENEWING and
// RELEASE must be unicast from the leased address (RFC 2131 4.4.5, 4.4.6;
// dnsmasq ignores a RELEASE from 0.0.0.0), so the IPv4/UDP framing is ours
// (a few lines, below) and the server's MAC is learnt from its replies.
type conn struct {
	pc  *packet.Conn
	mac net.HardwareAddr
}

// dhcpReplyFilter passes unfragmented IPv4 UDP datagrams to port 68 only,
// so a waiting client is not woken by the container's other traffic.
var dhcpReplyFilter = func() []bpf.RawInstruction {
	prog, err := bpf.Assemble([]bpf.Instruction{
		bpf.LoadAbsolute{Off: 9, Size: 1}, // IP protocol
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.IPPROTO_UDP, SkipFalse: 6},
		bpf.LoadAbsolute{Off: 6, Size: 2}, // flags + fragment offset
		bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: 0x1fff, SkipTrue: 4},
		bpf.LoadMemShift{Off: 0},          // X = IP header length
		bpf.LoadIndirect{Off: 2, Size: 2}, // UDP destination port
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: clientPort, SkipFalse: 1},
		bpf.RetConstant{Val: 0xffff},
		bpf.RetConstant{Val: 0},
	})
	if err != nil {
		panic(err) // a constant program
	}
	return prog
}()

// openConn opens the socket on link l of namespace ns. The socket belongs to
// the namespace it was created in, so only its creation needs the thread
// inside ns; reads and writes work from any goroutine afterwards.
func openConn(ns *link.NS, l netlink.Link) (*conn, error) {
	a := l.Attrs()
	ifi := &net.Interface{Index: a.Index, Name: a.Name, HardwareAddr: a.HardwareAddr, MTU: a.MTU}
	var pc *packet.Conn
	err := ns.Do(func() error {
		var err error
		pc, err = packet.Listen(ifi, packet.Datagram, unix.ETH_P_IP, &packet.Config{Filter: dhcpReplyFilter})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("open DHCP socket on %q: %w", a.Name, err)
	}
	if len(a.HardwareAddr) != 6 {
		pc.Close()
		return nil, fmt.Errorf("interface %q has no Ethernet address (got %q)", a.Name, a.HardwareAddr)
	}
	return &conn{pc: pc, mac: a.HardwareAddr}, nil
}

func (c *conn) Close() error { return c.pc.Close() }

// send frames msg as UDP 68→67 from src to dst, to the link-layer address
// dstMAC (broadcast when nil).
func (c *conn) send(msg *dhcpv4.DHCPv4, src, dst netip.Addr, dstMAC net.HardwareAddr) error {
	if dstMAC == nil {
		dstMAC = broadcastMAC
	}
	_, err := c.pc.WriteTo(udp4(msg.ToBytes(), src, dst), &packet.Addr{HardwareAddr: dstMAC})
	return err
}

// errTimeout is a receive deadline passing without a matching reply.
var errTimeout = errors.New("no reply")

// recv waits until deadline for a BOOTREPLY addressed to our MAC for which
// match is true; it returns the reply and the link-layer address it came
// from (the server's, or the relay's: the next hop toward the server).
func (c *conn) recv(deadline time.Time, match func(*dhcpv4.DHCPv4) bool) (*dhcpv4.DHCPv4, net.HardwareAddr, error) {
	if err := c.pc.SetReadDeadline(deadline); err != nil {
		return nil, nil, err
	}
	buf := make([]byte, 1600)
	for {
		n, from, err := c.pc.ReadFrom(buf)
		if err != nil {
			if errors.Is(err, unix.EAGAIN) || isTimeout(err) {
				return nil, nil, errTimeout
			}
			return nil, nil, err
		}
		payload, ok := udpPayload(buf[:n])
		if !ok {
			continue
		}
		msg, err := dhcpv4.FromBytes(payload)
		if err != nil || msg.OpCode != dhcpv4.OpcodeBootReply || !equalMAC(msg.ClientHWAddr, c.mac) || !match(msg) {
			continue
		}
		var mac net.HardwareAddr
		if pa, ok := from.(*packet.Addr); ok && len(pa.HardwareAddr) == 6 {
			mac = append(net.HardwareAddr(nil), pa.HardwareAddr...)
		}
		return msg, mac, nil
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func equalMAC(a, b net.HardwareAddr) bool {
	return len(a) == len(b) && string(a) == string(b)
}

// udp4 wraps payload in IPv4 and UDP headers (client port to server port).
func udp4(payload []byte, src, dst netip.Addr) []byte {
	const ipLen, udpLen = 20, 8
	total := ipLen + udpLen + len(payload)
	b := make([]byte, total)
	b[0] = 0x45 // version 4, header length 5 words
	b[1] = 0x10 // DSCP/ECN: low delay, as DHCP clients commonly mark
	binary.BigEndian.PutUint16(b[2:], uint16(total))
	b[8] = 64 // TTL
	b[9] = unix.IPPROTO_UDP
	s, d := src.As4(), dst.As4()
	copy(b[12:16], s[:])
	copy(b[16:20], d[:])
	binary.BigEndian.PutUint16(b[10:], checksum(b[:ipLen], 0))

	u := b[ipLen:]
	binary.BigEndian.PutUint16(u[0:], clientPort)
	binary.BigEndian.PutUint16(u[2:], serverPort)
	binary.BigEndian.PutUint16(u[4:], uint16(udpLen+len(payload)))
	copy(u[udpLen:], payload)
	// Pseudo-header: addresses, protocol, UDP length.
	pseudo := uint32(0)
	for i := 12; i < 20; i += 2 {
		pseudo += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	pseudo += unix.IPPROTO_UDP + uint32(udpLen+len(payload))
	sum := checksum(u, pseudo)
	if sum == 0 {
		sum = 0xffff // 0 means "no checksum" in UDP over IPv4
	}
	binary.BigEndian.PutUint16(u[6:], sum)
	return b
}

// checksum is the Internet checksum of b, starting from the partial sum.
func checksum(b []byte, sum uint32) uint16 {
	for len(b) >= 2 {
		sum += uint32(binary.BigEndian.Uint16(b))
		b = b[2:]
	}
	if len(b) == 1 {
		sum += uint32(b[0]) << 8
	}
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	return ^uint16(sum)
}

// udpPayload returns the UDP payload of an IPv4 packet for port 68, trimmed
// to the lengths the headers state (frames may carry padding).
func udpPayload(p []byte) ([]byte, bool) {
	if len(p) < 20 || p[0]>>4 != 4 {
		return nil, false
	}
	ihl := int(p[0]&0x0f) * 4
	total := int(binary.BigEndian.Uint16(p[2:]))
	if ihl < 20 || total < ihl+8 || total > len(p) || p[9] != unix.IPPROTO_UDP {
		return nil, false
	}
	u := p[ihl:total]
	if binary.BigEndian.Uint16(u[2:]) != clientPort {
		return nil, false
	}
	ulen := int(binary.BigEndian.Uint16(u[4:]))
	if ulen < 8 || ulen > len(u) {
		return nil, false
	}
	return u[8:ulen], true
}
