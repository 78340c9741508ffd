package dhcp

import (
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/patchbay-cni/patchbay/spec"
)

// BenchmarkAddDel measures ADD and DEL of the dhcp IPAM plugin against one
// dnsmasq, ours and the reference v1.9.1 (plugin + daemon each), on a fresh
// veth per iteration (down, as an interface plugin hands it to IPAM):
//
//	go test -run XXX -bench AddDel -benchtime 20x ./plugins/dhcp/
//
// add-ms and del-ms are medians; ADD is dominated by the DHCP exchange.
func BenchmarkAddDel(b *testing.B) {
	l := newLab(b, serverOpts{})
	l.startDaemon()
	refBin, refSock := l.startRefDaemon()
	for _, side := range []struct {
		name, bin, sock string
		up              bool
	}{{"ours/down", "", l.sock, false}, {"ref/down", refBin, refSock, false}, {"ours/up", "", l.sock, true}, {"ref/up", refBin, refSock, true}} {
		b.Run(side.name, func(b *testing.B) {
			conf := strings.Replace(l.ipamConf(spec.Current, nil), l.sock, side.sock, 1)
			var adds, dels []time.Duration
			// ns/op includes the namespace set-up; the medians are the figures.
			for i := range b.N {
				c := l.container("eth0")
				// down: the interface arrives fresh and down, as the bridge
				// and macvlan plugins hand it to IPAM. up: already up and
				// transmitting (the DHCP exchange alone).
				if side.up {
					l.up(c)
				}
				id := fmt.Sprintf("bench-%s-%d", strings.ReplaceAll(side.name, "/", "-"), i)
				call := pluginCall{bin: side.bin, id: id, netns: c.path, ifName: c.ifName}
				call.cmd = "ADD"
				start := time.Now()
				out, err := l.run(call, conf)
				adds = append(adds, time.Since(start))
				if err != nil {
					b.Fatal(err)
				}
				res, err := spec.ParseResult([]byte(out), spec.Current)
				if err != nil {
					b.Fatal(err)
				}
				c.configure(b, res.IPs[0].Address)
				call.cmd = "DEL"
				start = time.Now()
				if _, err := l.run(call, conf); err != nil {
					b.Fatal(err)
				}
				dels = append(dels, time.Since(start))
				exec.Command("ip", "netns", "del", c.name).Run()
			}
			b.ReportMetric(median(adds), "add-ms")
			b.ReportMetric(median(dels), "del-ms")
		})
	}
}

func median(d []time.Duration) float64 {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return float64(s[len(s)/2]) / float64(time.Millisecond)
}
