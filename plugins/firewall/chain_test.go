package firewall

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/patchbay-cni/patchbay/internal/netns"
	"github.com/patchbay-cni/patchbay/internal/testutil"
)

// uplink links the node to a client netns (a peer outside the host):
// 192.0.2.1 on the node, 192.0.2.2 in the client, routes to the container
// subnets via the node.
func uplink(t *testing.T, n *node) (name, path string) {
	t.Helper()
	name, path = testutil.NewNS(t, "fwx")
	n.sh("ip", "link", "add", "fwup0", "type", "veth", "peer", "name", "fwup1", "netns", name)
	n.sh("ip", "addr", "add", "192.0.2.1/24", "dev", "fwup0")
	n.sh("ip", "link", "set", "fwup0", "up")
	for _, c := range [][]string{
		{"ip", "addr", "add", "192.0.2.2/24", "dev", "fwup1"},
		{"ip", "link", "set", "fwup1", "up"},
		{"ip", "route", "add", "10.0.0.0/8", "via", "192.0.2.1"},
	} {
		if out, err := testutil.InNS(t, name, c...); err != nil {
			t.Fatalf("%v: %v: %s", c, err, out)
		}
	}
	return name, path
}

// TestForwardDropPolicy is what the plugin is for: a host whose FORWARD
// chain drops by default (iptables and ip6tables policy DROP, as distros
// and Docker set it). Through the iptables backend the container reaches
// a peer outside the host and gets the replies; a new connection from
// outside to the container stays dropped (the reference's rules accept
// only replies towards the container); after DEL the container is cut off
// again and the rule set is as before.
func TestForwardDropPolicy(t *testing.T) {
	n := newNode(t)
	client, _ := uplink(t, n)
	n.sh("iptables", "-P", "FORWARD", "DROP")
	n.sh("ip6tables", "-P", "FORWARD", "DROP")
	before := n.state()
	l := n.list(bridgeFirewall("1.0.0", "fwd", "fwbrd", "10.36.0.0/24", "", `,"backend":"iptables"`))
	res := n.mustAdd(l, "d1", nil)
	if !n.ping("d1", "192.0.2.2") {
		t.Error("the container does not reach the peer through FORWARD DROP")
	}
	if out, err := testutil.InNS(t, client, "ping", "-c1", "-W1", addrOf(t, res, false)); err == nil {
		t.Errorf("a new connection from outside reached the container: %s", out)
	}
	n.mustDel(l, "d1")
	if after := n.state(); after != before {
		t.Fatalf("left rules:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	// bridge's DEL does not remove the bridge: a second container on it
	// without the firewall plugin is cut off.
	bare := n.list(`{"cniVersion":"1.0.0","name":"fwd","plugins":[{"type":"bridge","bridge":"fwbrd","isGateway":true,
	  "ipam":{"type":"host-local","dataDir":"{{DIR}}/ipam","ranges":[[{"subnet":"10.36.0.0/24"}]],"routes":[{"dst":"0.0.0.0/0"}]}}]}`)
	n.mustAdd(bare, "d2", nil)
	if n.ping("d2", "192.0.2.2") {
		t.Error("control: without the firewall plugin the container still reaches the peer (FORWARD DROP not in effect?)")
	}
	n.mustDel(bare, "d2")
}

// TestPodmanShapedChain: bridge + portmap + firewall + tuning, the shape of
// Podman's default network, through our runtime with a port mapping, for
// each rule backend (firewall and portmap alike): a peer outside reaches
// the container's listener through the host port, CHECK of the whole
// chain passes, and DEL leaves the rule set as before.
func TestPodmanShapedChain(t *testing.T) {
	for _, backend := range []string{backendIPT, backendNFT} {
		t.Run(backend, func(t *testing.T) {
			n := newNode(t)
			_, clientPath := uplink(t, n)
			l := n.list(fmt.Sprintf(`{"cniVersion":"0.4.0","name":"podman","plugins":[
 {"type":"bridge","bridge":"cni-podman0","isGateway":true,"ipMasq":true,"hairpinMode":true,
  "ipam":{"type":"host-local","dataDir":"{{DIR}}/ipam","routes":[{"dst":"0.0.0.0/0"}],"ranges":[[{"subnet":"10.88.0.0/16","gateway":"10.88.0.1"}]]}},
 {"type":"portmap","capabilities":{"portMappings":true},"backend":%q},
 {"type":"firewall","backend":%q,"dataDir":"{{DIR}}/fw"},
 {"type":"tuning","dataDir":"{{DIR}}/tuning"}]}`, backend, backend))
			caps := map[string]any{"portMappings": []any{map[string]any{"hostPort": 18081, "containerPort": 8081, "protocol": "tcp"}}}
			// bridge keeps its ipMasq table and chains (the reference's
			// layout) after DEL: a first container's ADD and DEL put them
			// in place before the comparison starts.
			n.mustAdd(l, "p0", caps)
			n.mustDel(l, "p0")
			before := n.state()
			res := n.mustAdd(l, "p1", caps)
			ip := addrOf(t, res, false)
			ln := listenIn(t, n.containerPaths["p1"], ip+":8081")
			defer ln.Close()
			go serveOnce(ln, "hello from p1")
			if got := dialIn(t, clientPath, "192.0.2.1:18081"); got != "hello from p1" {
				t.Errorf("through the host port: got %q", got)
			}
			if err := n.check(l, "p1"); err != nil {
				t.Errorf("CHECK of the chain: %v", err)
			}
			n.mustDel(l, "p1")
			if after := n.state(); after != before {
				t.Fatalf("left rules:\nbefore:\n%s\nafter:\n%s", before, after)
			}
		})
	}
}

func listenIn(t *testing.T, nsPath, addr string) net.Listener {
	t.Helper()
	var ln net.Listener
	if err := netns.Do(nsPath, func() (err error) {
		ln, err = net.Listen("tcp", addr)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return ln
}

func serveOnce(ln net.Listener, msg string) {
	c, err := ln.Accept()
	if err != nil {
		return
	}
	defer c.Close()
	fmt.Fprintln(c, msg)
}

func dialIn(t *testing.T, nsPath, addr string) string {
	t.Helper()
	var line string
	err := netns.Do(nsPath, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		line, err = bufio.NewReader(c).ReadString('\n')
		return err
	})
	if err != nil {
		t.Errorf("dial %s: %v", addr, err)
	}
	return strings.TrimSpace(line)
}
