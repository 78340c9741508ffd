package nodetest

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// hierarchy is one mounted cgroup hierarchy.
type hierarchy struct {
	mount  string // e.g. /sys/fs/cgroup/memory, or /sys/fs/cgroup on cgroup v2
	key    string // its /proc/self/cgroup key: controllers ("cpu,cpuacct", "name=systemd"), "" for v2
	v2     bool
	cpuset bool
}

// hierarchies lists the mounted cgroup hierarchies (v1 controllers, named
// v1 hierarchies and the v2 unified one), from /proc/self/mountinfo.
func hierarchies() ([]hierarchy, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var hs []hierarchy
	seen := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent maj:min root mountpoint options [optional...] - fstype source superoptions
		fields := strings.Fields(sc.Text())
		sep := -1
		for i, f := range fields {
			if f == "-" {
				sep = i
				break
			}
		}
		if sep < 0 || sep+3 >= len(fields) || fields[3] != "/" {
			continue
		}
		h := hierarchy{mount: unescapeMountinfo(fields[4])}
		switch fields[sep+1] {
		case "cgroup2":
			h.v2 = true
		case "cgroup":
			var keys []string
			for _, o := range strings.Split(fields[sep+3], ",") {
				switch {
				case strings.HasPrefix(o, "name="):
					keys = append(keys, o)
				case o == "rw" || o == "ro" || strings.Contains(o, "=") || cgroupV1Flags[o]:
				default:
					keys = append(keys, o)
					h.cpuset = h.cpuset || o == "cpuset"
				}
			}
			h.key = strings.Join(keys, ",")
		default:
			continue
		}
		if seen[h.key+"\x00"+strconv.FormatBool(h.v2)] {
			continue // the same hierarchy mounted twice
		}
		seen[h.key+"\x00"+strconv.FormatBool(h.v2)] = true
		hs = append(hs, h)
	}
	if len(hs) == 0 {
		return nil, errors.New("no cgroup hierarchy mounted")
	}
	return hs, sc.Err()
}

// cgroupV1Flags are cgroup v1 mount options that are not controllers.
var cgroupV1Flags = map[string]bool{"noprefix": true, "clone_children": true, "xattr": true, "cpuset_v2_mode": true}

// ownCgroups maps each hierarchy key of /proc/self/cgroup to our cgroup in
// it ("" is the v2 hierarchy).
func ownCgroups() (map[string]string, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) == 3 {
			m[parts[1]] = parts[2]
		}
	}
	return m, nil
}

// cgroupProcs returns the PIDs in the cgroup directory dir and below it.
func cgroupProcs(dir string) []int {
	var pids []int
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		b, err := os.ReadFile(filepath.Join(p, "cgroup.procs"))
		if err != nil {
			return nil
		}
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				pids = append(pids, pid)
			}
		}
		return nil
	})
	return pids
}

// killCgroup kills every process in the node's cgroup /name (every
// hierarchy) except the process except, and waits (bounded) until none is
// left. These are all the node's: the supervisor started the components
// there, and their children (shims, containers) inherit it. Where a cgroup
// v2 hierarchy is mounted, cgroup.kill kills the whole tree at once (no PID
// can be reused between reading and killing); the PID loop catches the
// rest. It returns what is left.
func killCgroup(name string, except int) []string {
	hs, err := hierarchies()
	if err != nil {
		return []string{err.Error()}
	}
	var dirs []string
	for _, h := range hs {
		d := filepath.Join(h.mount, name)
		if _, err := os.Stat(d); err != nil {
			continue
		}
		dirs = append(dirs, d)
		if h.v2 && !inCgroup(except, name) {
			os.WriteFile(filepath.Join(d, "cgroup.kill"), []byte("1"), 0o644)
		}
	}
	if len(dirs) == 0 {
		return nil
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		left := map[int]bool{}
		for _, d := range dirs {
			for _, pid := range cgroupProcs(d) {
				if pid != except {
					left[pid] = true
				}
			}
		}
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			var s []string
			for pid := range left {
				s = append(s, fmt.Sprintf("process %d (%s) in cgroup /%s", pid, procName(pid), name))
			}
			sort.Strings(s)
			return s
		}
		for pid := range left {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// removeCgroups removes /name and everything below it in every hierarchy,
// deepest first, retrying while killed processes finish leaving. It
// returns what could not be removed.
func removeCgroups(name string) []string {
	hs, err := hierarchies()
	if err != nil {
		return []string{err.Error()}
	}
	var left []string
	for _, h := range hs {
		root := filepath.Join(h.mount, name)
		var dirs []string
		filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		// Deepest first: longer paths are below shorter ones.
		sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
		for _, d := range dirs {
			var err error
			for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
				err = syscall.Rmdir(d)
				if err == nil || errors.Is(err, syscall.ENOENT) || !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline) {
					break
				}
			}
			if err != nil && !errors.Is(err, syscall.ENOENT) {
				left = append(left, fmt.Sprintf("cgroup %s: %v", d, err))
			}
		}
	}
	return left
}

// inCgroup reports whether process pid is in the cgroup v2 tree /name.
func inCgroup(pid int, name string) bool {
	if pid == 0 {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			return p == "/"+name || strings.HasPrefix(p, "/"+name+"/")
		}
	}
	return false
}

func procName(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(string(b))
}
