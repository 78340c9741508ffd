package interop

import (
	"context"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/patchbay-cni/patchbay/internal/rundir"
)

// podmanEnv is one private podman installation: its own storage, run root,
// tmp dir, events log, containers.conf and CNI config dir, all under a test
// temp dir, so the machine's podman state and config are never touched.
type podmanEnv struct {
	hostNSPath string // podman and the CNI plugins run in this netns
	dir        string
	confFile   string // containers.conf (CONTAINERS_CONF)
	storConf   string // storage.conf (CONTAINERS_STORAGE_CONF)
	netDir     string // network_config_dir: our conflist
	root       string
	runroot    string
	// mountNS, if set, is a mount namespace (/proc/PID/ns/mnt) podman
	// runs in as well (see podmanMounts), where varLib is /var/lib/cni.
	mountNS, varLib string
}

// requirePodman fails (never skips) when the peers scripts/podman-deps.sh
// installs are missing.
func requirePodman(t *testing.T) {
	t.Helper()
	for _, c := range []string{"podman", "runc", "conmon", "nsenter"} {
		if _, err := exec.LookPath(c); err != nil {
			t.Fatalf("%s not found (%v): run scripts/podman-deps.sh as root (Debian podman 4.3, runc, conmon, busybox-static)", c, err)
		}
	}
}

// newPodmanEnv writes a containers.conf with what this machine needs (facts
// in DESIGN.md "Tests"): root lacks CAP_SYS_RESOURCE, so explicit ulimits;
// no systemd, so cgroupfs and a file events log; runc because crun fails on
// the hybrid cgroup layout; the CNI backend reading only netDir and running
// only the plugins in pluginDir.
func newPodmanEnv(t *testing.T, hostNSPath, pluginDir string) *podmanEnv {
	t.Helper()
	// Not t.TempDir(): podman refuses a runroot longer than 50 characters
	// (conmon's socket paths), and test temp dirs carry the test's name.
	dir, err := os.MkdirTemp("", "pbpm-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("remove %s: %v", dir, err)
		}
	})
	e := &podmanEnv{
		hostNSPath: hostNSPath,
		dir:        dir,
		confFile:   filepath.Join(dir, "containers.conf"),
		storConf:   filepath.Join(dir, "storage.conf"),
		netDir:     filepath.Join(dir, "net.d"),
		root:       filepath.Join(dir, "root"),
		runroot:    filepath.Join(dir, "runroot"),
	}
	for _, d := range []string{e.netDir, e.root, e.runroot, filepath.Join(dir, "tmp")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	conf := fmt.Sprintf(`[containers]
default_ulimits = ["nofile=20000:20000", "nproc=4096:4096"]

[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
events_logfile_path = %q
runtime = "runc"
tmp_dir = %q

[network]
network_backend = "cni"
cni_plugin_dirs = [%q]
network_config_dir = %q
`, filepath.Join(dir, "events.log"), filepath.Join(dir, "tmp"), pluginDir, e.netDir)
	// vfs needs no kernel support and --rootfs containers use no layers.
	stor := fmt.Sprintf("[storage]\ndriver = \"vfs\"\ngraphroot = %q\nrunroot = %q\n", e.root, e.runroot)
	writeFile(t, e.confFile, conf)
	writeFile(t, e.storConf, stor)
	// Safety net for a failed run: mounts podman left under our temp dir
	// would make its removal fail. Registered after RemoveAll, so runs first.
	t.Cleanup(func() { unmountUnder(t, dir) })
	return e
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// podman runs one podman command inside the test host netns, bounded by
// timeout. It uses `nsenter --net` and not `ip netns exec`: the latter gives
// the command a private mount namespace with a fresh /sys, which hides the
// cgroup mounts (runc then fails "no cgroup mount found in mountinfo") and
// would also hide the container netns podman bind-mounts under /run/netns
// from the next podman command (exec, rm → CNI DEL).
func (e *podmanEnv) podman(timeout time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	full := append([]string{"--net=" + e.hostNSPath, "podman", "--root", e.root, "--runroot", e.runroot, "--storage-driver", "vfs"}, args...)
	if e.mountNS != "" {
		full = append([]string{"--mount=" + e.mountNS}, full...)
	}
	cmd := exec.CommandContext(ctx, "nsenter", full...)
	env := os.Environ()
	if e.mountNS != "" {
		// conmon runs the exit command (podman container cleanup, which
		// may be the one to call DEL) with an environment of its own,
		// without PATCHBAY_RUN_DIR: every podman process must agree on the
		// run directory, so they all use the default one, /run/cni/patchbay,
		// which is the test's own in the private mount namespace.
		env = slices.DeleteFunc(env, func(kv string) bool { return strings.HasPrefix(kv, rundir.Env+"=") })
	}
	cmd.Env = append(env, "CONTAINERS_CONF="+e.confFile, "CONTAINERS_STORAGE_CONF="+e.storConf)
	cmd.WaitDelay = 2 * time.Second
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		err = fmt.Errorf("podman %s: timed out after %v: %w", strings.Join(args, " "), timeout, err)
	}
	return strings.TrimSpace(string(out)), err
}

// mustPodman is podman that fails the test on error.
func (e *podmanEnv) mustPodman(t *testing.T, timeout time.Duration, args ...string) string {
	t.Helper()
	out, err := e.podman(timeout, args...)
	if err != nil {
		t.Fatalf("podman %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// busyboxRootfs builds a minimal root filesystem around the static busybox
// from Debian's busybox-static: the binary, one link per applet, a passwd
// and group for root, the mount points runc needs, and /www/index.html
// holding body.
func busyboxRootfs(t *testing.T, body string) string {
	t.Helper()
	src := ""
	for _, p := range []string{"/bin/busybox", "/usr/bin/busybox"} {
		if _, err := os.Stat(p); err == nil {
			src = p
			break
		}
	}
	if src == "" {
		t.Fatal("busybox not found: run scripts/podman-deps.sh (installs busybox-static)")
	}
	if f, err := elf.Open(src); err != nil {
		t.Fatalf("%s: %v", src, err)
	} else {
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				f.Close()
				t.Fatalf("%s is dynamically linked and cannot run in a bare rootfs: install busybox-static (scripts/podman-deps.sh)", src)
			}
		}
		f.Close()
	}
	rootfs := filepath.Join(t.TempDir(), "rootfs")
	for _, d := range []string{"bin", "etc", "proc", "sys", "dev", "tmp", "www"} {
		if err := os.MkdirAll(filepath.Join(rootfs, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bin, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(rootfs, "bin", "busybox"), bin, 0o755); err != nil {
		t.Fatal(err)
	}
	list, err := exec.Command(src, "--list").Output()
	if err != nil {
		t.Fatalf("%s --list: %v", src, err)
	}
	for _, applet := range strings.Fields(string(list)) {
		// The list names busybox itself: linking it would replace the binary.
		if applet == "busybox" || strings.Contains(applet, "/") {
			continue
		}
		if err := os.Symlink("busybox", filepath.Join(rootfs, "bin", applet)); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(rootfs, "etc", "passwd"), "root:x:0:0:root:/:/bin/sh\n")
	writeFile(t, filepath.Join(rootfs, "etc", "group"), "root:x:0:\n")
	writeFile(t, filepath.Join(rootfs, "www", "index.html"), body)
	return rootfs
}

// procStart returns a process's start time (field 22 of /proc/PID/stat), so
// a PID recorded earlier is only acted on while it names the same process.
func procStart(pid int) (string, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "", false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return "", false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return "", false
	}
	// f[0] is field 3 (state); field 22 is f[19].
	return f[19], true
}

// procRunning reports whether pid still names the process that started at
// start and has not exited. A zombie has exited: only its parent (PID 1
// here, for conmon) can reap it.
func procRunning(pid int, start string) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return false
	}
	if st, ok := procStart(pid); !ok || st != start {
		return false
	}
	return s[i+2] != 'Z' && s[i+2] != 'X'
}

// pidsMentioning lists live processes whose command line contains s (a
// 64-hex container ID: conmon and runc carry it in their arguments).
func pidsMentioning(s string) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, ent := range ents {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile("/proc/" + ent.Name() + "/cmdline")
		if err != nil || !strings.Contains(string(b), s) {
			continue
		}
		if st, ok := procStart(pid); ok && procRunning(pid, st) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// waitFor polls cond every 50ms until it holds or timeout passes.
func waitFor(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// unmountUnder lazily unmounts every mount point below dir, deepest first.
func unmountUnder(t *testing.T, dir string) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return
	}
	var points []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			points = append(points, f[4])
		}
	}
	for i := len(points) - 1; i >= 0; i-- {
		if out, err := exec.Command("umount", "-l", points[i]).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", points[i], err, out)
		} else {
			t.Errorf("podman left %s mounted (unmounted by the test)", points[i])
		}
	}
}
