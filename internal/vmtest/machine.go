package vmtest

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/patchbay-cni/patchbay/internal/launch"
)

// initScript is stage 1, the initramfs's /init; vm-deps.sh builds the
// initramfs from this file and leaves a copy beside it, which Start compares.
//
//go:embed init.sh
var initScript []byte

const (
	// agentEnv tells the agent executable to serve (set by stage2 only).
	agentEnv = "PATCHBAY_VM_AGENT"
	// guestEnv is "1" in every command the agent runs (see InVM).
	guestEnv = "PATCHBAY_VM"
	// dirEnv names the kernel directory scripts/vm-deps.sh prepared.
	dirEnv = "PATCHBAY_VM_DIR"
)

// Options configure a Machine. The zero value is the test VM: 2 CPUs, 1 GiB,
// this executable as the agent.
type Options struct {
	// Agent is the executable that serves commands inside the VM: a test
	// binary whose TestMain calls Main, or a program whose main calls
	// AgentMain first. Default: this executable.
	Agent string
	// CPUs and MemoryMiB size the VM (default 2 and 1024). TCG runs one
	// host thread per CPU.
	CPUs, MemoryMiB int
	// BootTimeout bounds the boot (default 2 minutes; a boot takes ~2–3 s
	// on an idle machine, more while other tests compete for the CPU).
	BootTimeout time.Duration
	// Keep leaves the VM's directory (console log, QEMU log, share) in
	// place after Stop; Dir says where.
	Keep bool
	// Console, if set, receives the kernel console, with the full boot log
	// (else the kernel boots quiet and its console only goes to console.log
	// in the VM's directory).
	Console io.Writer
	// Shell boots into an interactive shell on the console, wired to this
	// process's stdin and stdout, instead of the agent; Exec is unusable.
	// Wait returns when the shell exits.
	Shell bool
	// NICs adds that many virtio network cards (PCI), all on one QEMU hub
	// and nowhere else: a wire between them inside the guest, for tests of
	// real PCI network devices (host-device's pciBusID). The guest names
	// them eth0, eth1, ... (no udev) with MACs NICMAC(0), NICMAC(1), ...
	NICs int
}

// NICMAC is the MAC address of the VM's i-th network card (Options.NICs).
func NICMAC(i int) string { return fmt.Sprintf("52:54:00:00:00:%02x", 0x10+i) }

// Machine is one running test VM.
type Machine struct {
	// Boot is the time from starting QEMU to the agent's first frame;
	// GuestUptime the guest kernel's uptime then (the rest is QEMU and
	// firmware).
	Boot, GuestUptime time.Duration
	// Release is the guest kernel's release (uname -r).
	Release string

	opts  Options
	dir   string
	qemu  *launch.Process
	conn  *os.File // host end of the control socketpair
	ready chan readyMessage

	wmu sync.Mutex // serializes frames to the guest

	mu       sync.Mutex
	sessions map[uint32]*session
	nextID   uint32
	readErr  error // why the control channel ended

	stopOnce sync.Once
}

type session struct {
	stdout, stderr io.Writer
	done           chan exitMessage
}

// Kernel is the kernel and initramfs that scripts/vm-deps.sh prepared.
type Kernel struct {
	Dir       string // $PATCHBAY_VM_DIR, default ~/.cache/patchbay/vm/current
	Release   string
	Vmlinux   string
	Initramfs string
	Modules   string // the modules tree, mounted at /lib/modules inside
}

// FindKernel locates the kernel directory and checks it is complete and was
// built from this package's init.sh.
func FindKernel() (*Kernel, error) {
	dir := os.Getenv(dirEnv)
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return nil, err
		}
		dir = filepath.Join(home, ".cache/patchbay/vm/current")
	}
	hint := "run `make test-deps` (or `bash scripts/vm-deps.sh`) as root"
	if _, err := os.Stat(filepath.Join(dir, "ready")); err != nil {
		return nil, fmt.Errorf("no test VM kernel in %s (%v): %s", dir, err, hint)
	}
	if dir2, err := filepath.EvalSymlinks(dir); err == nil {
		dir = dir2 // stable even if vm-deps.sh moves "current" meanwhile
	}
	rel, err := os.ReadFile(filepath.Join(dir, "release"))
	if err != nil {
		return nil, fmt.Errorf("test VM kernel in %s: %v: %s", dir, err, hint)
	}
	k := &Kernel{Dir: dir, Release: strings.TrimSpace(string(rel)),
		Vmlinux: filepath.Join(dir, "vmlinux"), Initramfs: filepath.Join(dir, "initramfs.cpio")}
	k.Modules = filepath.Join(dir, "lib/modules")
	for _, f := range []string{k.Vmlinux, k.Initramfs, filepath.Join(k.Modules, k.Release, "modules.dep")} {
		if _, err := os.Stat(f); err != nil {
			return nil, fmt.Errorf("test VM kernel incomplete: %v: %s", err, hint)
		}
	}
	built, err := os.ReadFile(filepath.Join(dir, "init.sh"))
	if err != nil || !bytes.Equal(built, initScript) {
		return nil, fmt.Errorf("the initramfs in %s was not built from this internal/vmtest/init.sh: %s", dir, hint)
	}
	return k, nil
}

// Start boots a VM and waits for its agent. The caller must Stop it. QEMU
// dies with this process even when it is SIGKILLed (Pdeathsig, and the agent
// powers off when the control channel closes).
func Start(opts Options) (*Machine, error) {
	if opts.CPUs == 0 {
		opts.CPUs = 2
	}
	if opts.MemoryMiB == 0 {
		opts.MemoryMiB = 1024
	}
	if opts.BootTimeout == 0 {
		opts.BootTimeout = 2 * time.Minute
	}
	if opts.Agent == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, err
		}
		opts.Agent = exe
	}
	k, err := FindKernel()
	if err != nil {
		return nil, err
	}
	qemu, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		return nil, fmt.Errorf("%v: run `make test-deps` (or `bash scripts/vm-deps.sh`) as root", err)
	}
	removeStale()
	dir, err := os.MkdirTemp("", "patchbay-vm-")
	if err != nil {
		return nil, err
	}
	m := &Machine{opts: opts, dir: dir, ready: make(chan readyMessage, 1),
		sessions: map[uint32]*session{}}
	t0 := time.Now()
	if err := m.start(qemu, k); err != nil {
		m.Stop()
		return nil, err
	}
	if opts.Shell {
		return m, nil
	}
	select {
	case r := <-m.ready:
		m.Boot, m.Release = time.Since(t0), r.Release
		up, _ := strconv.ParseFloat(r.Uptime, 64)
		m.GuestUptime = time.Duration(up * float64(time.Second))
		return m, nil
	case <-m.qemu.Done():
		_, werr := m.qemu.Exited()
		err = fmt.Errorf("the VM stopped while booting (%v)", werr)
	case <-time.After(opts.BootTimeout):
		err = fmt.Errorf("the VM did not boot within %v", opts.BootTimeout)
	}
	tails := m.logTails()
	m.Stop()
	return nil, fmt.Errorf("%w\n%s", err, tails)
}

func (m *Machine) start(qemu string, k *Kernel) error {
	share := m.Share()
	if err := os.Mkdir(share, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(share, "stage2"), stage2(k, m.opts), 0o755); err != nil {
		return err
	}
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	// Non-blocking, so that os.File uses the poller and Close really closes
	// while readLoop is blocked in Read (the agent sees the hang-up).
	if err := syscall.SetNonblock(fds[0], true); err != nil {
		syscall.Close(fds[0])
		syscall.Close(fds[1])
		return err
	}
	m.conn = os.NewFile(uintptr(fds[0]), "vmtest-control")
	guest := os.NewFile(uintptr(fds[1]), "vmtest-control-guest")
	defer guest.Close()

	args := []string{
		"-nodefaults", "-no-user-config", "-nographic", "-no-reboot",
		"-M", "q35", "-accel", "tcg,thread=multi", "-cpu", "max",
		"-smp", strconv.Itoa(m.opts.CPUs), "-m", strconv.Itoa(m.opts.MemoryMiB),
		"-kernel", k.Vmlinux, "-initrd", k.Initramfs,
		"-append", cmdline(m.opts),
		"-nic", "none", // no default card: Options.NICs below, or none
		"-virtfs", "local,path=/,mount_tag=root,security_model=none,readonly=on,multidevs=remap",
		"-virtfs", "local,path=" + qemuEscape(share) + ",mount_tag=vmtest,security_model=none,multidevs=remap",
		"-device", "virtio-serial-pci",
		"-chardev", "socket,id=vmtest,fd=3",
		"-device", "virtserialport,chardev=vmtest,name=" + portName,
	}
	for i := range m.opts.NICs {
		args = append(args, "-netdev", fmt.Sprintf("hubport,id=vmtestnic%d,hubid=0", i),
			"-device", fmt.Sprintf("virtio-net-pci,netdev=vmtestnic%d,mac=%s,romfile=", i, NICMAC(i)))
	}
	// qboot: a minimal firmware, boots ~0.3 s faster than SeaBIOS here. It
	// hangs before the kernel with a virtio-net-pci card (QEMU 7.2, seen
	// with and without the card's option ROM): SeaBIOS then.
	if _, err := os.Stat("/usr/share/qemu/qboot.rom"); err == nil && m.opts.NICs == 0 {
		args = append(args, "-bios", "/usr/share/qemu/qboot.rom")
	}
	console := filepath.Join(m.dir, "console.log")
	qlog, err := os.Create(filepath.Join(m.dir, "qemu.log"))
	if err != nil {
		return err
	}
	defer qlog.Close()
	cmd := exec.Command(qemu)
	cmd.ExtraFiles = []*os.File{guest}
	if m.opts.Shell {
		args = append(args, "-serial", "mon:stdio")
		cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	} else {
		args = append(args, "-serial", "file:"+qemuEscape(console), "-monitor", "none")
		cmd.Stdout, cmd.Stderr = qlog, qlog
	}
	cmd.Args = append(cmd.Args, args...)
	if m.qemu, err = launch.Start(cmd); err != nil {
		return fmt.Errorf("start QEMU: %w", err)
	}
	if !m.opts.Keep {
		// The directory lives as long as this QEMU (see removeStale).
		owner := fmt.Sprintf("%d %s\n", m.qemu.Pid(), launch.StartTime(m.qemu.Pid()))
		if err := os.WriteFile(filepath.Join(m.dir, "owner"), []byte(owner), 0o644); err != nil {
			return err
		}
	}
	if m.opts.Console != nil && !m.opts.Shell {
		go m.followConsole(console)
	}
	go m.readLoop()
	return nil
}

// removeStale removes the directories of VMs whose QEMU is gone: a test
// binary that was SIGKILLed could not remove its own (QEMU died with it).
// Directories without an owner file (being set up, or kept) stay.
func removeStale() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "patchbay-vm-*"))
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "owner"))
		if err != nil {
			continue
		}
		var pid int
		var start string
		if _, err := fmt.Sscanf(string(b), "%d %s", &pid, &start); err != nil || launch.StartTime(pid) != start {
			os.RemoveAll(d)
		}
	}
}

// cmdline is the kernel's command line: quiet unless someone watches the
// console (it is a slow emulated UART); panic=-1 with -no-reboot turns a
// guest panic into QEMU exiting (and the panic is in console.log);
// no_timer_check skips the early timer IRQ test, which fails when the host
// is so busy that the emulated CPU misses its deadline (seen at load 20:
// "MP-BIOS bug: 8254 timer not connected to IO-APIC", then QEMU gone).
func cmdline(o Options) string {
	c := "console=ttyS0 panic=-1 mitigations=off no_timer_check"
	if o.Console == nil && !o.Shell {
		c += " quiet"
	}
	return c
}

// stage2 is the script stage 1 hands over to (as PID 1) once the host's root
// is the VM's root: it mounts what a test expects (/sys, /run/netns, the
// kernel's modules, a modprobe for the kernel's autoloading) and runs the
// agent, or a shell; the VM powers off when that ends.
func stage2(k *Kernel, o Options) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, `# stage 2 of the test VM, written by internal/vmtest for this VM.
B=/run/busybox
$B mount -t sysfs sysfs /sys
$B mount -t cgroup2 cgroup2 /sys/fs/cgroup 2>/dev/null
$B mkdir -p /dev/pts /dev/shm /run/netns /run/lock /run/guest /lib/modules
$B mount -t devpts -o newinstance,ptmxmode=0666 devpts /dev/pts
$B ln -sf pts/ptmx /dev/ptmx
$B mount -t tmpfs shm /dev/shm
$B mount --bind %s /lib/modules || echo "vmtest stage2: no modules" >/dev/console
$B ln -s /run/busybox /run/guest/modprobe
echo /run/guest/modprobe >/proc/sys/kernel/modprobe
$B hostname patchbay-vm
$B ip link set lo up
cd /
`, shQuote(k.Modules))
	if o.NICs > 0 {
		// No udev: the network cards' driver is loaded here.
		b.WriteString("$B modprobe virtio_net || echo \"vmtest stage2: no virtio_net\" >/dev/console\n")
	}
	if o.Shell {
		// The caller's environment and directory, as Exec gives commands.
		for _, kv := range os.Environ() {
			if k, v, ok := strings.Cut(kv, "="); ok && validEnvName(k) {
				fmt.Fprintf(&b, "export %s=%s\n", k, shQuote(v))
			}
		}
		wd, _ := os.Getwd()
		fmt.Fprintf(&b, `export %s=1 PS1='vm# '
cd %s
echo "patchbay test VM, kernel $($B uname -r): the host's root read-only under a tmpfs overlay; exit (or Ctrl-D) powers off"
sh=/bin/bash; [ -x $sh ] || sh=/bin/sh
$B setsid $B cttyhack $sh
`, guestEnv, shQuote(wd))
	} else {
		fmt.Fprintf(&b, "%s=1 %s\necho \"vmtest stage2: agent exited ($?)\" >/dev/console\n", agentEnv, shQuote(o.Agent))
	}
	b.WriteString("$B poweroff -f\n")
	return []byte(b.String())
}

// validEnvName is true for names sh can export.
func validEnvName(k string) bool {
	for i, c := range k {
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return k != ""
}

// shQuote quotes s for sh.
func shQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// qemuEscape escapes a value inside QEMU's comma-separated options.
func qemuEscape(s string) string { return strings.ReplaceAll(s, ",", ",,") }

// readLoop dispatches the guest's frames until the channel closes.
func (m *Machine) readLoop() {
	r := bufio.NewReaderSize(m.conn, 64<<10)
	var err error
	for {
		var f frame
		if f, err = readFrame(r); err != nil {
			break
		}
		switch f.kind {
		case frameReady:
			var rm readyMessage
			json.Unmarshal(f.data, &rm)
			select {
			case m.ready <- rm:
			default:
			}
		case frameStdout, frameStderr, frameExit:
			m.mu.Lock()
			s := m.sessions[f.id]
			if f.kind == frameExit {
				delete(m.sessions, f.id)
			}
			m.mu.Unlock()
			if s == nil {
				continue // a session the host gave up on
			}
			switch f.kind {
			case frameStdout:
				s.stdout.Write(f.data)
			case frameStderr:
				s.stderr.Write(f.data)
			default:
				var em exitMessage
				if err := json.Unmarshal(f.data, &em); err != nil {
					em = exitMessage{Code: -1, Err: "bad exit frame: " + err.Error()}
				}
				s.done <- em
			}
		}
	}
	m.mu.Lock()
	m.readErr = err
	sessions := m.sessions
	m.sessions = map[uint32]*session{}
	m.mu.Unlock()
	for _, s := range sessions {
		close(s.done)
	}
}

func (m *Machine) send(f frame) error {
	m.wmu.Lock()
	defer m.wmu.Unlock()
	_, err := m.conn.Write(appendFrame(nil, f))
	return err
}

// Command is a command to run inside the VM.
type Command struct {
	Args []string
	// Env is the command's environment; nil means this process's. The
	// agent adds PATCHBAY_VM=1.
	Env []string
	// Dir is its working directory; "" means this process's.
	Dir string
	// Stdout and Stderr receive its output (nil discards). When both are
	// the same writer, the command gets one pipe for both, so their order
	// is kept. Writes come from one goroutine per Machine.
	Stdout, Stderr io.Writer
}

// killGrace is how long Exec waits for a killed command's end before it
// takes the VM for hung and stops it.
var killGrace = 10 * time.Second

// Exec runs c inside the VM and returns its exit status (-1 when a signal
// killed it). err is only set when it could not run to its end: the VM
// broke, or ctx ended (the command is then killed; if the VM does not
// report its end within 10 s, the VM is stopped).
func (m *Machine) Exec(ctx context.Context, c Command) (code int, err error) {
	if m.opts.Shell {
		return -1, errors.New("vmtest: Exec on a Shell machine")
	}
	if len(c.Args) == 0 {
		return -1, errors.New("vmtest: Exec without Args")
	}
	req := startRequest{Args: c.Args, Env: c.Env, Dir: c.Dir}
	if req.Env == nil {
		req.Env = os.Environ()
	}
	if req.Dir == "" {
		if req.Dir, err = os.Getwd(); err != nil {
			return -1, err
		}
	}
	s := &session{stdout: c.Stdout, stderr: c.Stderr, done: make(chan exitMessage, 1)}
	if s.stdout == nil {
		s.stdout = io.Discard
	}
	if s.stderr == nil {
		s.stderr = io.Discard
	}
	req.Merge = c.Stdout != nil && c.Stdout == c.Stderr
	body, err := json.Marshal(req)
	if err != nil {
		return -1, err
	}
	if len(body) > maxPayload {
		return -1, fmt.Errorf("vmtest: command and environment exceed %d bytes", maxPayload)
	}
	m.mu.Lock()
	if m.readErr != nil {
		m.mu.Unlock()
		return -1, m.deadError()
	}
	m.nextID++
	id := m.nextID
	m.sessions[id] = s
	m.mu.Unlock()
	if err := m.send(frame{kind: frameStart, id: id, data: body}); err != nil {
		return -1, m.deadError()
	}
	var em exitMessage
	var ok bool
	select {
	case em, ok = <-s.done:
	case <-ctx.Done():
		m.send(frame{kind: frameKill, id: id})
		select {
		case <-s.done:
			return -1, fmt.Errorf("vmtest: %q killed: %w", c.Args[0], ctx.Err())
		case <-time.After(killGrace):
			m.mu.Lock()
			delete(m.sessions, id) // its writers may be gone after we return
			m.mu.Unlock()
			tails := m.logTails()
			m.stop(0)
			return -1, fmt.Errorf("vmtest: %q did not end within %v of SIGKILL after %v; VM stopped\n%s", c.Args[0], killGrace, ctx.Err(), tails)
		}
	}
	if !ok {
		return -1, m.deadError()
	}
	if em.Code == -1 && em.Err != "" {
		return -1, fmt.Errorf("vmtest: %q: %s", c.Args[0], em.Err)
	}
	return em.Code, nil
}

// deadError explains a broken control channel, with the VM's logs.
func (m *Machine) deadError() error {
	select {
	case <-m.qemu.Done():
	case <-time.After(5 * time.Second):
	}
	m.mu.Lock()
	rerr := m.readErr
	m.mu.Unlock()
	state := "running"
	if done, werr := m.qemu.Exited(); done {
		state = fmt.Sprintf("exited: %v", werr)
	}
	return fmt.Errorf("vmtest: the VM's control channel broke (%v; QEMU %s)\n%s", rerr, state, m.logTails())
}

// Exited reports whether QEMU has ended.
func (m *Machine) Exited() bool {
	done, _ := m.qemu.Exited()
	return done
}

// Wait waits for QEMU to end (a Shell machine's shell exiting).
func (m *Machine) Wait() error {
	<-m.qemu.Done()
	_, err := m.qemu.Exited()
	return err
}

// PID is QEMU's process id.
func (m *Machine) PID() int { return m.qemu.Pid() }

// Dir holds console.log, qemu.log, share/ (the guest's /run/vmtest) and
// owner (QEMU's pid and start time).
func (m *Machine) Dir() string { return m.dir }

// GuestShare is where the VM sees Share: the one place a command inside can
// leave files for the host (everything else it writes stays in the VM).
const GuestShare = "/run/vmtest"

// Share is the host directory the VM has read-write at GuestShare.
func (m *Machine) Share() string { return filepath.Join(m.dir, "share") }

// Stop ends the VM: it closes the control channel (the agent powers off),
// then kills QEMU by PID if it is still there after 5 s, and removes the
// VM's directory unless Options.Keep. It is safe to call more than once.
func (m *Machine) Stop() error { return m.stop(5 * time.Second) }

// stop is Stop with grace instead of 5 s (0 for a VM known to be hung).
func (m *Machine) stop(grace time.Duration) error {
	var err error
	m.stopOnce.Do(func() {
		if m.qemu != nil {
			err = m.qemu.Stop("QEMU", grace, func() error { m.conn.Close(); return nil })
		}
		if m.conn != nil {
			m.conn.Close()
		}
		if !m.opts.Keep {
			os.RemoveAll(m.dir)
		}
	})
	return err
}

// followConsole copies console.log to Options.Console while QEMU runs.
func (m *Machine) followConsole(path string) {
	var f *os.File
	for f == nil {
		var err error
		if f, err = os.Open(path); err != nil {
			select {
			case <-m.qemu.Done():
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	defer f.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := f.Read(buf)
		if n > 0 {
			m.opts.Console.Write(buf[:n])
		}
		if err == io.EOF {
			select {
			case <-m.qemu.Done():
				if n == 0 {
					return
				}
			case <-time.After(50 * time.Millisecond):
			}
		} else if err != nil {
			return
		}
	}
}

// logTails is the end of the console and QEMU logs, for error reports.
func (m *Machine) logTails() string {
	var b strings.Builder
	for _, name := range []string{"console.log", "qemu.log"} {
		data, err := os.ReadFile(filepath.Join(m.dir, name))
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		if len(lines) > 40 {
			lines = lines[len(lines)-40:]
		}
		fmt.Fprintf(&b, "--- %s (last %d lines) ---\n%s\n", name, len(lines), strings.Join(lines, "\n"))
	}
	return b.String()
}
