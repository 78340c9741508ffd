package nodetest

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/patchbay-cni/patchbay/internal/tcprelay"
)

// supervisorEnv names the supervisor's configuration file; when set, this
// binary is a node's supervisor (see init), not a test.
const supervisorEnv = "PATCHBAY_NODETEST_SUPERVISOR"

func init() {
	if cfg := os.Getenv(supervisorEnv); cfg != "" {
		os.Exit(supervise(cfg))
	}
}

// supervisorConfig is what the test process tells the supervisor (as JSON).
type supervisorConfig struct {
	Dir        string
	Cgroup     string        // cgroup name under every hierarchy's root
	LoAddrs    []string      // added to lo: the node IP, the kubernetes Service IP
	Binds      []bindMount   // test directories mounted over node paths
	Sysctls    []sysctlCover // /proc/sys files covered for kubelet
	Components []component   // started as their After allow
	APIServer  string        // where the forwarders connect: host:port in the node
	// ServiceAddr (the kubernetes Service's ClusterIP:port) is forwarded
	// to APIServer too: no kube-proxy runs, yet in-cluster clients work.
	ServiceAddr string
	KeepDir     bool
}

type bindMount struct {
	Target, Source string
	Shared         bool // a shared mount (kubelet's root, /run/netns)
}

type sysctlCover struct {
	Path, File string // the /proc/sys file, the file covering it
}

type component struct {
	Name  string
	Argv  []string
	Ready probe
	// After names the components that must be ready before this one
	// starts; the others start at the same time.
	After []string
	// Then are commands run once the component is ready (image imports);
	// it counts as ready when they succeeded.
	Then [][]string
}

// probe says when a component is ready: a GET of URL answers 200 (over TLS
// trusting CAFile, with Token), or Command exits 0.
type probe struct {
	URL, CAFile, Token string
	Command            []string
	TimeoutSeconds     int
}

// event is one line the supervisor writes on its stdout.
type event struct {
	Event     string         `json:"event"` // started, ready, exited, failed, stopped
	Component string         `json:"component,omitempty"`
	PID       int            `json:"pid,omitempty"`
	PIDs      map[string]int `json:"pids,omitempty"`
	Millis    int64          `json:"ms,omitempty"`
	Error     string         `json:"error,omitempty"`
	Leftovers []string       `json:"leftovers,omitempty"`
}

// supervisor runs in the node's own network and mount namespaces (the test
// process started it with CLONE_NEWNET|CLONE_NEWNS) and its own session. It
// is a child subreaper, so the daemons' orphans (containerd's shims) become
// its children, and it reaps every child itself: nothing here uses os/exec,
// whose Wait would race with that.
type supervisor struct {
	cfg   supervisorConfig
	start time.Time
	out   *json.Encoder
	outMu sync.Mutex

	mu       sync.Mutex
	children map[int]*child
	running  map[string]*child // components by name
	stopping bool

	end       <-chan struct{} // closed when the test process is done with the node
	mounts    []string        // mount points, in mount order
	overlaid  map[string]bool
	origCg    map[string]string // hierarchy mount point → our cgroup there before
	relays    []*tcprelay.Relay
	leftovers []string
}

type child struct {
	name   string
	pid    int
	done   chan struct{}
	status syscall.WaitStatus
}

func supervise(cfgPath string) int {
	s := &supervisor{
		start:    time.Now(),
		out:      json.NewEncoder(os.Stdout),
		children: map[int]*child{},
		running:  map[string]*child{},
		overlaid: map[string]bool{},
		origCg:   map[string]string{},
	}
	log := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "%s supervisor: %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
	}
	b, err := os.ReadFile(cfgPath)
	if err == nil {
		err = json.Unmarshal(b, &s.cfg)
	}
	if err != nil {
		s.emit(event{Event: "failed", Error: "supervisor config: " + err.Error()})
		return 1
	}
	// The end: the test process closed the control pipe (Stop), or died.
	// SIGTERM/SIGINT/SIGHUP mean the same.
	end := make(chan struct{})
	go func() {
		io.Copy(io.Discard, os.Stdin)
		close(end)
	}()
	s.end = end
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	// Once the test process is gone, writing an event fails with EPIPE
	// instead of killing us with SIGPIPE before the teardown is done.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	go s.reapLoop()

	if err := s.setup(); err != nil {
		log("setup: %v", err)
		s.emit(event{Event: "failed", Error: "setup: " + err.Error()})
	} else if err := s.startAll(end); err != nil {
		log("start: %v", err)
		s.emit(event{Event: "failed", Error: err.Error()})
	} else {
		pids := map[string]int{}
		s.mu.Lock()
		for name, c := range s.running {
			pids[name] = c.pid
		}
		s.mu.Unlock()
		log("node ready in %v", time.Since(s.start))
		s.emit(event{Event: "ready", PIDs: pids, Millis: time.Since(s.start).Milliseconds()})
	}
	select {
	case <-end:
	case sig := <-sigs:
		log("%v: tearing down", sig)
	}
	t0 := time.Now()
	s.teardown()
	log("teardown took %v, leftovers: %q", time.Since(t0), s.leftovers)
	s.emit(event{Event: "stopped", Leftovers: s.leftovers, Millis: time.Since(t0).Milliseconds()})
	return 0
}

func (s *supervisor) emit(e event) {
	s.outMu.Lock()
	defer s.outMu.Unlock()
	s.out.Encode(e)
}

// setup makes the node's mount namespace, network and cgroup.
func (s *supervisor) setup() error {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("become subreaper: %w", err)
	}
	// Receive the machine's mounts, send none back: whatever the node
	// mounts stays in its namespace and goes away with it.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_SLAVE, ""); err != nil {
		return fmt.Errorf("make / a slave mount: %w", err)
	}
	binds := append([]bindMount(nil), s.cfg.Binds...)
	sort.Slice(binds, func(i, j int) bool { return binds[i].Target < binds[j].Target })
	// Overlays first: one mounted later on a parent would hide the binds
	// below it.
	for _, b := range binds {
		if err := s.overlayMissing(b.Target); err != nil {
			return err
		}
	}
	for _, b := range binds {
		if err := s.bind(b); err != nil {
			return err
		}
	}
	for _, c := range s.cfg.Sysctls {
		if err := unix.Mount(c.File, c.Path, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("cover %s: %w", c.Path, err)
		}
		s.mounts = append(s.mounts, c.Path)
	}
	// Check what the components will see: every node path is the test's
	// directory, every covered sysctl file the test's file.
	for _, b := range binds {
		if err := sameFile(b.Target, b.Source); err != nil {
			return err
		}
	}
	for _, c := range s.cfg.Sysctls {
		if err := sameFile(c.Path, c.File); err != nil {
			return err
		}
	}
	if err := s.network(); err != nil {
		return err
	}
	if err := s.joinCgroup(); err != nil {
		return err
	}
	return s.forward()
}

// overlayMissing makes a missing target creatable without touching the
// machine's disk: its deepest existing ancestor gets an overlay whose upper
// layer is in the test directory (unless one already covers it).
func (s *supervisor) overlayMissing(target string) error {
	if _, err := os.Stat(target); err == nil || !errors.Is(err, os.ErrNotExist) {
		return err
	}
	anc := filepath.Dir(target)
	for {
		if _, err := os.Stat(anc); err == nil {
			break
		}
		anc = filepath.Dir(anc)
	}
	if s.overlaid[anc] || s.underOverlay(anc) {
		return nil
	}
	if anc == "/" {
		return fmt.Errorf("%s: no parent directory to overlay but /", target)
	}
	return s.overlay(anc)
}

// bind mounts b.Source over b.Target (created inside an overlay if missing).
func (s *supervisor) bind(b bindMount) error {
	if err := os.MkdirAll(b.Target, 0o755); err != nil {
		return err
	}
	if err := unix.Mount(b.Source, b.Target, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind %s on %s: %w", b.Source, b.Target, err)
	}
	s.mounts = append(s.mounts, b.Target)
	prop := uintptr(unix.MS_PRIVATE)
	if b.Shared {
		prop = unix.MS_SHARED
	}
	if err := unix.Mount("", b.Target, "", prop, ""); err != nil {
		return fmt.Errorf("set propagation of %s: %w", b.Target, err)
	}
	return nil
}

func sameFile(a, b string) error {
	sa, err := os.Stat(a)
	if err != nil {
		return err
	}
	sb, err := os.Stat(b)
	if err != nil {
		return err
	}
	if !os.SameFile(sa, sb) {
		return fmt.Errorf("%s is not %s after mounting", a, b)
	}
	return nil
}

func (s *supervisor) underOverlay(p string) bool {
	for o := range s.overlaid {
		if strings.HasPrefix(p, o+"/") {
			return true
		}
	}
	return false
}

func (s *supervisor) overlay(dir string) error {
	base := filepath.Join(s.cfg.Dir, "overlay", strings.ReplaceAll(strings.Trim(dir, "/"), "/", "_"))
	upper, work := filepath.Join(base, "upper"), filepath.Join(base, "work")
	for _, d := range []string{upper, work} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	opts := "lowerdir=" + dir + ",upperdir=" + upper + ",workdir=" + work
	if err := unix.Mount("overlay", dir, "overlay", 0, opts); err != nil {
		return fmt.Errorf("overlay %s: %w", dir, err)
	}
	s.mounts = append(s.mounts, dir)
	s.overlaid[dir] = true
	return nil
}

// network brings up lo with 127.0.0.1 and the node IP.
func (s *supervisor) network() error {
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return err
	}
	if err := netlink.LinkSetUp(lo); err != nil {
		return fmt.Errorf("lo up: %w", err)
	}
	for _, a := range s.cfg.LoAddrs {
		addr, err := netlink.ParseAddr(a + "/32")
		if err != nil {
			return err
		}
		if err := netlink.AddrAdd(lo, addr); err != nil {
			return fmt.Errorf("%s on lo: %w", a, err)
		}
	}
	return nil
}

// joinCgroup creates the node's cgroup in every hierarchy and moves the
// supervisor into its "system" child: every component starts there, and
// kubelet puts the pods beside it (cgroupRoot is the node's cgroup).
func (s *supervisor) joinCgroup() error {
	hs, err := hierarchies()
	if err != nil {
		return err
	}
	own, err := ownCgroups()
	if err != nil {
		return err
	}
	for _, h := range hs {
		s.origCg[h.mount] = own[h.key]
		sys := filepath.Join(h.mount, s.cfg.Cgroup, "system")
		if err := os.MkdirAll(sys, 0o755); err != nil {
			return fmt.Errorf("cgroup %s: %w", sys, err)
		}
		if h.cpuset {
			// A new cpuset cgroup has no CPUs or memory nodes: copy the root's.
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				v, err := os.ReadFile(filepath.Join(h.mount, f))
				if err != nil {
					return err
				}
				for _, d := range []string{filepath.Dir(sys), sys} {
					if err := os.WriteFile(filepath.Join(d, f), v, 0o644); err != nil {
						return fmt.Errorf("%s/%s: %w", d, f, err)
					}
				}
			}
		}
		if err := os.WriteFile(filepath.Join(sys, "cgroup.procs"), []byte(itoa(os.Getpid())), 0o644); err != nil {
			return fmt.Errorf("join %s: %w", sys, err)
		}
	}
	return nil
}

// startAll starts every component as soon as those it comes After are
// ready, and returns when all are ready or one failed.
func (s *supervisor) startAll(end <-chan struct{}) error {
	ready := map[string]chan struct{}{}
	for _, c := range s.cfg.Components {
		ready[c.Name] = make(chan struct{})
	}
	failed := make(chan struct{})
	var once sync.Once
	var firstErr error
	fail := func(err error) {
		once.Do(func() {
			firstErr = err
			close(failed)
		})
	}
	var wg sync.WaitGroup
	for _, c := range s.cfg.Components {
		for _, dep := range c.After {
			if ready[dep] == nil {
				return fmt.Errorf("%s comes after unknown component %q", c.Name, dep)
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, dep := range c.After {
				select {
				case <-ready[dep]:
				case <-failed:
					return
				}
			}
			if err := s.startOne(c, end); err != nil {
				fail(err)
				return
			}
			close(ready[c.Name])
		}()
	}
	wg.Wait()
	return firstErr
}

// startOne starts a component, waits until it is ready and runs its
// follow-up commands.
func (s *supervisor) startOne(c component, end <-chan struct{}) error {
	t0 := time.Now()
	ch, err := s.spawn(c.Name, c.Argv, filepath.Join(s.cfg.Dir, "logs", c.Name+".log"), nil)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.running[c.Name] = ch
	s.mu.Unlock()
	s.emit(event{Event: "started", Component: c.Name, PID: ch.pid})
	if err := s.waitReady(c, ch, end); err != nil {
		return err
	}
	for _, argv := range c.Then {
		if out, err := s.run(argv, 2*time.Minute); err != nil {
			return fmt.Errorf("after %s: %s: %v: %s", c.Name, strings.Join(argv, " "), err, out)
		}
	}
	fmt.Fprintf(os.Stderr, "%s supervisor: %s ready in %v\n", time.Now().Format("15:04:05.000"), c.Name, time.Since(t0))
	return nil
}

func (s *supervisor) waitReady(c component, ch *child, end <-chan struct{}) error {
	timeout := time.Duration(c.Ready.TimeoutSeconds) * time.Second
	if timeout == 0 {
		timeout = time.Minute
	}
	var client *http.Client
	if c.Ready.URL != "" {
		tr := &http.Transport{}
		if c.Ready.CAFile != "" {
			pem, err := os.ReadFile(c.Ready.CAFile)
			if err != nil {
				return err
			}
			pool := x509.NewCertPool()
			pool.AppendCertsFromPEM(pem)
			tr.TLSClientConfig = &tls.Config{RootCAs: pool}
		}
		client = &http.Client{Transport: tr, Timeout: 5 * time.Second}
		defer tr.CloseIdleConnections()
	}
	deadline := time.Now().Add(timeout)
	last := "no answer yet"
	for {
		select {
		case <-ch.done:
			return fmt.Errorf("%s (pid %d) exited before it was ready: %s", c.Name, ch.pid, describe(ch.status))
		case <-end:
			return fmt.Errorf("stopped while waiting for %s", c.Name)
		default:
		}
		if client != nil {
			req, _ := http.NewRequest(http.MethodGet, c.Ready.URL, nil)
			if c.Ready.Token != "" {
				req.Header.Set("Authorization", "Bearer "+c.Ready.Token)
			}
			resp, err := client.Do(req)
			if err == nil {
				body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					return nil
				}
				last = fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(body)))
			} else {
				last = err.Error()
			}
		} else if out, err := s.run(c.Ready.Command, 10*time.Second); err == nil {
			return nil
		} else {
			last = fmt.Sprintf("%v: %s", err, strings.TrimSpace(out))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s (pid %d) not ready after %v: %s", c.Name, ch.pid, timeout, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// componentEnv is the environment of every process the supervisor starts.
var componentEnv = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root"}

// spawn starts argv with its output to logPath (or to out when logPath is
// ""). The child dies with the supervisor (Pdeathsig; the supervisor never
// locks a goroutine to a thread, so no thread it forks from ever exits).
func (s *supervisor) spawn(name string, argv []string, logPath string, out *os.File) (*child, error) {
	if len(argv) == 0 {
		return nil, fmt.Errorf("%s: empty command", name)
	}
	if logPath != "" {
		f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		out = f
	}
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return nil, err
	}
	defer devnull.Close()
	// Holding mu from start to registration: the reaper cannot collect the
	// child before we know it.
	s.mu.Lock()
	defer s.mu.Unlock()
	p, err := os.StartProcess(argv[0], argv, &os.ProcAttr{
		Env:   componentEnv,
		Files: []*os.File{devnull, out, out},
		Sys:   &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL},
	})
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	c := &child{name: name, pid: p.Pid, done: make(chan struct{})}
	s.children[p.Pid] = c
	p.Release() // the reaper waits for it, not os.Process
	return c, nil
}

// run runs a command to completion (bounded) and returns its output.
func (s *supervisor) run(argv []string, timeout time.Duration) (string, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return "", err
	}
	c, err := s.spawn(filepath.Base(argv[0]), argv, "", w)
	w.Close()
	if err != nil {
		r.Close()
		return "", err
	}
	outc := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(io.LimitReader(r, 1<<20))
		r.Close()
		outc <- b
	}()
	select {
	case <-c.done:
	case <-time.After(timeout):
		syscall.Kill(c.pid, syscall.SIGKILL) // our own child, not yet reaped
		<-c.done
		return string(<-outc), fmt.Errorf("timed out after %v", timeout)
	case <-s.end:
		syscall.Kill(c.pid, syscall.SIGKILL)
		<-c.done
		return string(<-outc), errors.New("stopped")
	}
	out := string(<-outc)
	if !c.status.Exited() || c.status.ExitStatus() != 0 {
		return out, errors.New(describe(c.status))
	}
	return out, nil
}

func describe(ws syscall.WaitStatus) string {
	switch {
	case ws.Exited():
		return fmt.Sprintf("exit status %d", ws.ExitStatus())
	case ws.Signaled():
		return "killed by " + ws.Signal().String()
	}
	return fmt.Sprintf("wait status %#x", uint32(ws))
}

// reapLoop collects every child that exits: ours, and the orphans the
// kernel hands to us as subreaper. A component exiting outside teardown is
// reported.
func (s *supervisor) reapLoop() {
	sigs := make(chan os.Signal, 64)
	signal.Notify(sigs, syscall.SIGCHLD)
	tick := time.NewTicker(time.Second) // SIGCHLDs can coalesce: poll too
	for {
		select {
		case <-sigs:
		case <-tick.C:
		}
		s.reapAll()
	}
}

func (s *supervisor) reapAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
		c := s.children[pid]
		if c == nil {
			continue // an orphan: reaped, nothing else to do
		}
		delete(s.children, pid)
		c.status = ws
		close(c.done)
		if s.running[c.name] == c {
			delete(s.running, c.name)
			if !s.stopping {
				go s.emit(event{Event: "exited", Component: c.name, PID: pid, Error: describe(ws)})
			}
		}
	}
}

// forward serves two forwarders to the apiserver. One accepts on the
// listener the test process passed as fd 3 (on the machine's loopback): the
// tests' clients, exec and logs included, reach the apiserver without the
// machine's namespace ever being changed. The other stands in for
// kube-proxy for the one Service that matters: the kubernetes Service's
// ClusterIP:443, so in-cluster clients (hostNetwork or on the pod network)
// work with the environment kubelet gives them.
func (s *supervisor) forward() error {
	f := os.NewFile(3, "forwarder listener")
	l, err := net.FileListener(f)
	f.Close()
	if err != nil {
		return fmt.Errorf("forwarder listener: %w", err)
	}
	s.relays = append(s.relays, tcprelay.Serve(l, s.dialAPIServer))
	if s.cfg.ServiceAddr != "" {
		l, err := net.Listen("tcp", s.cfg.ServiceAddr)
		if err != nil {
			return fmt.Errorf("kubernetes Service forwarder: %w", err)
		}
		s.relays = append(s.relays, tcprelay.Serve(l, s.dialAPIServer))
	}
	return nil
}

func (s *supervisor) dialAPIServer(ctx context.Context) (net.Conn, error) {
	d := net.Dialer{Timeout: 10 * time.Second}
	return d.DialContext(ctx, "tcp", s.cfg.APIServer)
}

// teardown kills everything in the node's cgroup, unmounts what setup
// mounted, and removes the cgroups and the test directory. What cannot be
// removed is recorded in s.leftovers.
func (s *supervisor) teardown() {
	s.mu.Lock()
	s.stopping = true
	s.mu.Unlock()
	for _, r := range s.relays {
		r.Close()
	}
	// Leave the node's cgroup first so that killing it spares us.
	for mount, cg := range s.origCg {
		if err := os.WriteFile(filepath.Join(mount, cg, "cgroup.procs"), []byte(itoa(os.Getpid())), 0o644); err != nil {
			s.leftovers = append(s.leftovers, fmt.Sprintf("supervisor could not leave its cgroup in %s: %v", mount, err))
		}
	}
	if s.cfg.Cgroup != "" {
		s.leftovers = append(s.leftovers, killCgroup(s.cfg.Cgroup, os.Getpid())...)
	}
	s.reapAll()
	for i := len(s.mounts) - 1; i >= 0; i-- {
		if err := unix.Unmount(s.mounts[i], unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
			s.leftovers = append(s.leftovers, fmt.Sprintf("unmount %s: %v", s.mounts[i], err))
		}
	}
	if s.cfg.Cgroup != "" {
		s.leftovers = append(s.leftovers, removeCgroups(s.cfg.Cgroup)...)
	}
	if !s.cfg.KeepDir && s.cfg.Dir != "" {
		if err := removeDir(s.cfg.Dir); err != nil {
			s.leftovers = append(s.leftovers, err.Error())
		}
	}
}

// removeDir removes the test directory after detaching any mount under it
// (in the caller's mount namespace), so the removal never reaches into a
// mounted file system.
func removeDir(dir string) error {
	if dir == "" || dir == "/" {
		return fmt.Errorf("refusing to remove %q", dir)
	}
	mps, err := mountPointsUnder(dir)
	if err != nil {
		return err
	}
	for i := len(mps) - 1; i >= 0; i-- {
		unix.Unmount(mps[i], unix.MNT_DETACH)
	}
	if err := os.RemoveAll(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove %s: %w", dir, err)
	}
	return nil
}

// mountPointsUnder lists the mount points at or under dir, in mount order.
func mountPointsUnder(dir string) ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMountinfo(fields[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	return out, sc.Err()
}

// unescapeMountinfo undoes mountinfo's octal escapes (\040 for a space).
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v int
			if _, err := fmt.Sscanf(s[i+1:i+4], "%3o", &v); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
