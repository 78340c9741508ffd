package dhcp

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/patchbay-cni/patchbay/internal/testutil"
	"github.com/patchbay-cni/patchbay/spec"
)

// TestDelWhileDaemonDown: a daemon killed outright leaves its socket; DEL
// then gets "connection refused" and succeeds without it (as with no
// socket at all), so the chain's DEL goes on and the interface plugin
// deletes the interface. The daemon, started again, drops that lease
// instead of resuming it.
func TestDelWhileDaemonDown(t *testing.T) {
	t.Parallel()
	l := newLab(t, serverOpts{})
	l.startDaemon()
	c := l.container("eth0")
	conf := l.ipamConf(spec.Current, nil)
	res := l.add(c, "down1", conf, "")
	c.configure(t, res.IPs[0].Address)
	l.daemon.stop(t, 9)
	if !fileExists(l.sock) {
		t.Fatalf("expected a stale socket after SIGKILL")
	}
	del := pluginCall{cmd: "DEL", id: "down1", netns: c.path, ifName: c.ifName}
	if _, err := l.run(del, conf); err != nil {
		t.Fatalf("DEL with the daemon down (stale socket): %v", err)
	}
	c.deleteIface(t) // the interface plugin's DEL, after IPAM's
	if err := os.Remove(l.sock); err != nil {
		t.Fatal(err)
	}
	if _, err := l.run(del, conf); err != nil {
		t.Fatalf("DEL with no daemon socket: %v", err)
	}
	if recs := stateRecords(t, l.state); len(recs) != 1 {
		t.Fatalf("the persisted lease: %+v", recs)
	}
	l.startDaemon()
	if !strings.Contains(readFile(l.dlog), `msg="dropping lease of an interface that is gone"`) {
		t.Errorf("the restarted daemon did not drop the lease:\n%s", readFile(l.dlog))
	}
	if recs := stateRecords(t, l.state); len(recs) != 0 {
		t.Errorf("state after the restart: %+v", recs)
	}
}

// TestDelWithSilentDaemon: a daemon that accepts the connection but never
// answers makes DEL fail with code 11 (the runtime retries) once
// answerTimeout passes, instead of blocking the chain's DEL.
func TestDelWithSilentDaemon(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "dhcp.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close() // held open, never answered
		}
	}()
	old := answerTimeout
	answerTimeout = 300 * time.Millisecond
	defer func() { answerTimeout = old }()
	conf := `{"cniVersion":"1.0.0","name":"n","type":"dhcp","ipam":{"type":"dhcp","daemonSocketPath":"` + sock + `"}}`
	env := map[string]string{"CNI_COMMAND": "DEL", "CNI_CONTAINERID": "silent1", "CNI_IFNAME": "eth0"}
	done := make(chan struct{})
	go func() {
		defer close(done)
		out, rc := testutil.RunPlugin(t, Plugin(), "", env, conf)
		testutil.ExpectCNIError(t, out, rc, int(spec.ErrTryAgainLater), "did not answer within")
	}()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("DEL still waiting for a silent daemon after 60 s")
	}
}
