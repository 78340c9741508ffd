package link

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/patchbay-cni/patchbay/internal/netns"
	"github.com/patchbay-cni/patchbay/internal/testutil"
)

// The veth pair looks like the reference's: the container side keeps the
// kernel's default queue length (1000), the host side has none (0, as the
// reference's peer gets), and the host side ignores router advertisements
// (accept_ra 0: the plugin owns the routes through it).
func TestVethLikeReference(t *testing.T) {
	host, hostPath := testutil.NewNS(t, "lvh")
	cont, contPath := testutil.NewNS(t, "lvc")
	var hostName string
	err := netns.Do(hostPath, func() error {
		h, err := Current()
		if err != nil {
			return err
		}
		defer h.Close()
		c, err := Open(contPath)
		if err != nil {
			return err
		}
		defer c.Close()
		hl, _, err := h.AddVeth(c, VethOpts{ContName: "eth0"})
		if err != nil {
			return err
		}
		hostName = hl.Attrs().Name
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	qlen := func(ns, dev string) string {
		b, err := exec.Command("ip", "netns", "exec", ns, "cat", "/sys/class/net/"+dev+"/tx_queue_len").Output()
		if err != nil {
			t.Fatalf("tx_queue_len of %s: %v", dev, err)
		}
		return strings.TrimSpace(string(b))
	}
	if q := qlen(cont, "eth0"); q != "1000" {
		t.Errorf("container eth0 tx_queue_len = %s, want 1000 (kernel default, as the reference)", q)
	}
	if q := qlen(host, hostName); q != "0" {
		t.Errorf("host %s tx_queue_len = %s, want 0 (as the reference)", hostName, q)
	}
	if out, _ := testutil.InNS(t, host, "cat", "/proc/sys/net/ipv6/conf/"+hostName+"/accept_ra"); out != "0" {
		t.Errorf("host %s accept_ra = %s, want 0", hostName, out)
	}
}
