package kubetest_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/patchbay-cni/patchbay/internal/kubetest"
	"github.com/patchbay-cni/patchbay/internal/launch"
	"github.com/patchbay-cni/patchbay/internal/link"
)

// clusterID is what a cluster could leave behind.
type clusterID struct {
	Procs      []proc   // etcd, kube-apiserver (and restarted ones)
	NetnsInode uint64   // the servers' network namespace
	Relays     []string // host:port of the relays on the machine's loopback
}

// proc identifies a process across PID reuse.
type proc struct {
	PID   int
	Start string // launch.StartTime
}

func nsInode(path string) (uint64, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return 0, err
	}
	return st.Ino, nil
}

func identifyCluster(c *kubetest.Cluster) (clusterID, error) {
	var id clusterID
	u, err := url.Parse(c.URL)
	if err != nil {
		return id, err
	}
	id.Relays = []string{u.Host}
	for _, pid := range c.PIDs() {
		st := launch.StartTime(pid)
		if st == "" {
			return id, fmt.Errorf("pid %d not running", pid)
		}
		id.Procs = append(id.Procs, proc{pid, st})
	}
	id.NetnsInode, err = nsInode(fmt.Sprintf("/proc/%d/ns/net", c.PIDs()[0]))
	return id, err
}

func identify(t *testing.T, c *kubetest.Cluster) clusterID {
	t.Helper()
	id, err := identifyCluster(c)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// checkIsolated checks that etcd and kube-apiserver run in the namespace
// ino, which is not the test process's (the machine's), has only lo, and
// holds their listening sockets; that they have no socket in the machine's
// namespace; and that the URL is on the machine's loopback.
func checkIsolated(t *testing.T, c *kubetest.Cluster, ino uint64) {
	t.Helper()
	own, err := nsInode("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	if own == ino {
		t.Fatalf("the cluster's network namespace %d is the test process's", ino)
	}
	// No thread of ours was left in it (a relay's dial switches one in and
	// back; nothing else may).
	tasks, _ := filepath.Glob("/proc/self/task/*/ns/net")
	for _, p := range tasks {
		if got, err := nsInode(p); err == nil && got == ino {
			t.Errorf("a thread of the test process is in the cluster's network namespace: %s", p)
		}
	}
	machine := tcpTable(t, "/proc/self/net")
	for i, pid := range c.PIDs() {
		name := []string{"etcd", "kube-apiserver"}[i]
		nsPath := fmt.Sprintf("/proc/%d/ns/net", pid)
		if got, err := nsInode(nsPath); err != nil || got != ino {
			t.Errorf("%s (pid %d) in network namespace %d (%v), want the cluster's %d", name, pid, got, err, ino)
		}
		theirs := tcpTable(t, fmt.Sprintf("/proc/%d/net", pid))
		listening := 0
		for _, s := range socketInodes(t, pid) {
			if st, ok := machine[s]; ok {
				t.Errorf("%s (pid %d) has a socket in the machine's namespace: %s", name, pid, st)
			}
			if st, ok := theirs[s]; ok && strings.HasSuffix(st, " 0A") {
				listening++
			}
		}
		if listening == 0 {
			t.Errorf("%s (pid %d) listens on nothing in its namespace", name, pid)
		}
	}
	h, err := link.Open(fmt.Sprintf("/proc/%d/ns/net", c.PIDs()[0]))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	links, err := h.H.LinkList()
	if err != nil {
		t.Fatal(err)
	}
	if len(links) != 1 || links[0].Attrs().Name != "lo" || links[0].Attrs().Flags&net.FlagUp == 0 {
		var names []string
		for _, l := range links {
			names = append(names, l.Attrs().Name+"/"+l.Attrs().Flags.String())
		}
		t.Errorf("links in the cluster's namespace: %v, want lo up alone", names)
	}
	if addrs, err := h.H.AddrList(links[0], netlink.FAMILY_V4); err != nil || len(addrs) != 1 || !addrs[0].IP.IsLoopback() {
		t.Errorf("lo addresses %v (%v), want 127.0.0.1 alone", addrs, err)
	}
	if u, err := url.Parse(c.URL); err != nil || u.Hostname() != "127.0.0.1" {
		t.Errorf("URL %s is not on the loopback", c.URL)
	}
}

// tcpTable maps socket inode → "local-address state" for the TCP sockets of
// the namespace whose /proc/PID/net directory is dir.
func tcpTable(t *testing.T, dir string) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, f := range []string{"tcp", "tcp6"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(b), "\n")[1:] {
			fs := strings.Fields(l)
			if len(fs) > 9 {
				m[fs[9]] = fs[1] + " " + fs[3]
			}
		}
	}
	return m
}

// socketInodes lists the inodes of the sockets a process holds.
func socketInodes(t *testing.T, pid int) []string {
	t.Helper()
	fds, err := filepath.Glob(fmt.Sprintf("/proc/%d/fd/*", pid))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, fd := range fds {
		if l, err := os.Readlink(fd); err == nil && strings.HasPrefix(l, "socket:[") {
			out = append(out, strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]"))
		}
	}
	return out
}

// checkGone fails the test if anything of the cluster is left, waiting up
// to wait for it to go: a process, anything holding its network namespace
// (a thread in it, a descriptor of it, a mount of it), a relay accepting.
func checkGone(t *testing.T, id clusterID, wait time.Duration) {
	t.Helper()
	var left []string
	for deadline := time.Now().Add(wait); ; time.Sleep(100 * time.Millisecond) {
		left = leftovers(id)
		if len(left) == 0 || time.Now().After(deadline) {
			break
		}
	}
	for _, l := range left {
		t.Errorf("left behind: %s", l)
	}
}

func leftovers(id clusterID) []string {
	var left []string
	for _, p := range id.Procs {
		if launch.StartTime(p.PID) == p.Start {
			left = append(left, fmt.Sprintf("process %d", p.PID))
		}
	}
	ns := "net:[" + strconv.FormatUint(id.NetnsInode, 10) + "]"
	tasks, _ := filepath.Glob("/proc/[0-9]*/task/[0-9]*/ns/net")
	for _, p := range tasks {
		if l, err := os.Readlink(p); err == nil && l == ns {
			left = append(left, "a thread in the cluster's network namespace: "+p)
		}
	}
	fds, _ := filepath.Glob("/proc/[0-9]*/fd/*")
	for _, p := range fds {
		if l, err := os.Readlink(p); err == nil && l == ns {
			left = append(left, "a descriptor of the cluster's network namespace: "+p)
		}
	}
	if b, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(b), ns) {
		left = append(left, "a mount of the cluster's network namespace")
	}
	for _, r := range id.Relays {
		if c, err := net.DialTimeout("tcp", r, time.Second); err == nil {
			c.Close()
			left = append(left, "a relay accepting on "+r)
		}
	}
	return left
}

// ownerEnv, set to a directory, makes the test binary an owner helper:
// it starts a cluster there (see ownerHelper).
const ownerEnv = "PATCHBAY_KUBETEST_OWNER"

// A test binary killed by SIGKILL (no cleanup runs in it) leaves nothing of
// its cluster: the servers die with it, the namespace with them, the relays
// with its sockets.
func TestKilledOwnerLeavesNothing(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), ownerEnv+"="+t.TempDir())
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	owner, err := launch.Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Stop("owner helper", 0, nil)
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var id clusterID
	select {
	case l, ok := <-lines:
		if !ok || json.Unmarshal([]byte(l), &id) != nil {
			<-owner.Done()
			t.Fatalf("owner helper: %q\n%s", l, stderr.String())
		}
	case <-time.After(3 * time.Minute):
		t.Fatalf("owner helper did not start a cluster\n%s", stderr.String())
	}
	if len(id.Procs) != 2 || len(id.Relays) != 2 || id.NetnsInode == 0 {
		t.Fatalf("owner helper's cluster: %+v", id)
	}
	if left := leftovers(id); len(left) < 5 { // 2 processes, their namespace, 2 relays
		t.Fatalf("the owner's cluster is not running: only %q", left)
	}
	if err := owner.Cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-owner.Done()
	t0 := time.Now()
	checkGone(t, id, 30*time.Second)
	t.Logf("cluster gone %v after its owner was killed", time.Since(t0).Round(time.Millisecond))
}

// ownerHelper starts a cluster in dir with a second relay, prints its
// identity as JSON and waits to be killed.
func ownerHelper(dir string) {
	c, err := kubetest.StartIn(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	id, err := identifyCluster(c)
	var ln net.Listener
	if err == nil {
		ln, err = net.Listen("tcp", "127.0.0.1:0")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		c.Stop()
		os.Exit(1)
	}
	c.Relay(ln)
	id.Relays = append(id.Relays, ln.Addr().String())
	b, _ := json.Marshal(id)
	fmt.Println(string(b))
	time.Sleep(10 * time.Minute)
	c.Stop()
	os.Exit(1)
}
