package vmtest

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// portName is the virtio-serial port the agent serves on.
const portName = "vmtest"

// agent runs inside the VM, started by stage2: it runs the commands the host
// asks for and streams their output and exit status back.
type agent struct {
	wmu  sync.Mutex
	port *os.File

	mu    sync.Mutex
	procs map[uint32]*os.Process
}

// serveGuest runs the agent until the host closes the port (or it breaks)
// and returns the process exit code; stage2 then powers the VM off.
func serveGuest() int {
	port, err := openPort(portName, 10*time.Second)
	if err != nil {
		fmt.Fprintf(os.Stderr, "vmtest agent: %v\n", err)
		return 1
	}
	a := &agent{port: port, procs: map[uint32]*os.Process{}}
	var ready readyMessage
	var uts syscall.Utsname
	if syscall.Uname(&uts) == nil {
		ready.Release = utsString(uts.Release[:])
	}
	if b, err := os.ReadFile("/proc/uptime"); err == nil {
		ready.Uptime, _, _ = strings.Cut(strings.TrimSpace(string(b)), " ")
	}
	a.sendJSON(frameReady, 0, ready)
	r := bufio.NewReaderSize(port, 64<<10)
	for {
		f, err := readFrame(r)
		if err != nil {
			if errors.Is(err, io.EOF) {
				return 0 // the host is gone or done: power off
			}
			fmt.Fprintf(os.Stderr, "vmtest agent: %v\n", err)
			return 1
		}
		switch f.kind {
		case frameStart:
			var req startRequest
			if err := json.Unmarshal(f.data, &req); err != nil || len(req.Args) == 0 {
				a.sendJSON(frameExit, f.id, exitMessage{Code: -1, Err: fmt.Sprintf("bad start request: %v", err)})
				continue
			}
			a.start(f.id, req)
		case frameKill:
			a.mu.Lock()
			if p := a.procs[f.id]; p != nil {
				syscall.Kill(-p.Pid, syscall.SIGKILL)
			}
			a.mu.Unlock()
		}
	}
}

// openPort finds the virtio-serial port by name (no udev here to make
// /dev/virtio-ports/NAME); it may appear a moment after boot.
func openPort(name string, wait time.Duration) (*os.File, error) {
	deadline := time.Now().Add(wait)
	for {
		names, _ := filepath.Glob("/sys/class/virtio-ports/*/name")
		for _, n := range names {
			if b, err := os.ReadFile(n); err == nil && strings.TrimSpace(string(b)) == name {
				return os.OpenFile("/dev/"+filepath.Base(filepath.Dir(n)), os.O_RDWR, 0)
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("no virtio-serial port named %q after %v", name, wait)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func utsString(b []int8) string {
	s := make([]byte, 0, len(b))
	for _, c := range b {
		if c == 0 {
			break
		}
		s = append(s, byte(c))
	}
	return string(s)
}

func (a *agent) send(kind byte, id uint32, data []byte) {
	a.wmu.Lock()
	defer a.wmu.Unlock()
	// A failed write means the host is gone; the read loop sees it too.
	a.port.Write(appendFrame(nil, frame{kind: kind, id: id, data: data}))
}

func (a *agent) sendJSON(kind byte, id uint32, v any) {
	b, _ := json.Marshal(v)
	a.send(kind, id, b)
}

// streamWriter sends what a command writes as output frames of its session.
type streamWriter struct {
	a    *agent
	id   uint32
	kind byte
}

func (w streamWriter) Write(p []byte) (int, error) {
	for rest := p; len(rest) > 0; {
		n := min(len(rest), chunk)
		w.a.send(w.kind, w.id, rest[:n])
		rest = rest[n:]
	}
	return len(p), nil
}

// start runs one command in its own process group; when it ends, whatever
// it left running in that group is killed (the VM is shared by the tests of
// a package) and the exit frame follows its last output.
func (a *agent) start(id uint32, req startRequest) {
	cmd := exec.Command(req.Args[0], req.Args[1:]...)
	// Look the command up in the caller's PATH, not the agent's.
	cmd.Path, cmd.Err = lookPath(req.Args[0], req.Env)
	cmd.Env = append(req.Env, guestEnv+"=1")
	cmd.Dir = req.Dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out := streamWriter{a: a, id: id, kind: frameStdout}
	cmd.Stdout = out
	if req.Merge {
		cmd.Stderr = out
	} else {
		cmd.Stderr = streamWriter{a: a, id: id, kind: frameStderr}
	}
	// A background child holding the output pipe must not hold up the exit.
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		a.sendJSON(frameExit, id, exitMessage{Code: -1, Err: err.Error()})
		return
	}
	a.mu.Lock()
	a.procs[id] = cmd.Process
	a.mu.Unlock()
	go func() {
		err := cmd.Wait()
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		a.mu.Lock()
		delete(a.procs, id)
		a.mu.Unlock()
		msg := exitMessage{Code: cmd.ProcessState.ExitCode()}
		var ee *exec.ExitError
		if err != nil && (!errors.As(err, &ee) || msg.Code == -1) {
			msg.Err = err.Error()
		}
		a.sendJSON(frameExit, id, msg)
	}()
}

// lookPath finds name as a shell would with env's PATH; a name with a slash
// is used as it is (relative to the command's directory).
func lookPath(name string, env []string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	path := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%q not found in PATH %q", name, path)
}
