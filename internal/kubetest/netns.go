package kubetest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/patchbay-cni/patchbay/internal/link"
	"github.com/patchbay-cni/patchbay/internal/netns"
)

// clusterNetns is the cluster's own network namespace: unnamed, lo up, the
// servers listening on its 127.0.0.1. Its only references are this
// descriptor and the servers inside it, so it is gone once Stop has closed
// the descriptor after they exited, and when the test binary dies in any
// way (the kernel closes the descriptor; Pdeathsig kills the servers):
// nothing is named under /run/netns and nothing needs a reaper.
type clusterNetns struct {
	nsenter string
	mu      sync.RWMutex // dials hold it for reading, close for writing
	f       *os.File     // nil once closed
	fdPath  string       // /proc/self/fd/N: the namespace, for this process
}

// newNetns creates the namespace: inside netns.Do (which locks the thread
// and switches it back afterwards, or discards it if it cannot), the thread
// unshares into a new network namespace and keeps a descriptor of it. (The
// thread must switch back, not merely be discarded: it may be the main
// thread, which the runtime never ends and whose namespace /proc/self
// shows.)
func newNetns() (*clusterNetns, error) {
	nsenter, err := exec.LookPath("nsenter")
	if err != nil {
		return nil, fmt.Errorf("nsenter (util-linux) not found: %v", err)
	}
	var f *os.File
	err = netns.Do("/proc/self/ns/net", func() error {
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("unshare network namespace: %w", err)
		}
		var err error
		f, err = os.Open("/proc/thread-self/ns/net")
		return err
	})
	if err != nil {
		if f != nil {
			f.Close()
		}
		return nil, err
	}
	ns := &clusterNetns{f: f, fdPath: fmt.Sprintf("/proc/self/fd/%d", f.Fd()), nsenter: nsenter}
	if err := ns.loUp(); err != nil {
		ns.close()
		return nil, err
	}
	return ns, nil
}

func (ns *clusterNetns) loUp() error {
	h, err := link.Open(ns.fdPath)
	if err != nil {
		return err
	}
	defer h.Close()
	lo, err := h.LinkByName("lo")
	if err != nil {
		return err
	}
	if err := h.H.LinkSetUp(lo); err != nil {
		return fmt.Errorf("lo up in the cluster's network namespace: %w", err)
	}
	return nil
}

// command runs bin inside the namespace: nsenter joins it and execs bin,
// keeping the PID (and launch's Pdeathsig: root's exec changes no
// credentials). The namespace's descriptor is nsenter's fd 3.
func (ns *clusterNetns) command(bin string, args ...string) *exec.Cmd {
	cmd := exec.Command(ns.nsenter, append([]string{"--net=/proc/self/fd/3", "--", bin}, args...)...)
	cmd.ExtraFiles = []*os.File{ns.f}
	return cmd
}

// dial connects to addr (host:port) inside the namespace: the socket is
// made on a thread switched into it, then used from anywhere.
func (ns *clusterNetns) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	ns.mu.RLock()
	defer ns.mu.RUnlock()
	if ns.f == nil {
		return nil, errors.New("the cluster's network namespace is closed (cluster stopped)")
	}
	var c net.Conn
	err := netns.Do(ns.fdPath, func() (err error) {
		d := net.Dialer{Timeout: 10 * time.Second}
		c, err = d.DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

// close drops this process's reference; the namespace is gone once no
// process is left in it.
func (ns *clusterNetns) close() {
	if ns == nil {
		return
	}
	ns.mu.Lock()
	defer ns.mu.Unlock()
	if ns.f != nil {
		ns.f.Close()
		ns.f = nil
	}
}

// listenHost listens on a free port of 127.0.0.1 in the process's own
// network namespace. A fresh goroutine never runs on a thread a caller
// locked into another namespace, so this holds even when Start is called
// from inside netns.Do.
func listenHost() (net.Listener, error) {
	type result struct {
		ln  net.Listener
		err error
	}
	ch := make(chan result, 1)
	go func() {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		ch <- result{ln, err}
	}()
	r := <-ch
	return r.ln, r.err
}
