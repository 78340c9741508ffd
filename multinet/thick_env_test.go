package multinet

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// daemonProc is a running "multinet daemon" of a test, in the test's host
// netns (where the delegates must run), serving the shims on socketDir.
type daemonProc struct {
	e          *env
	cmd        *exec.Cmd
	socketDir  string
	configFile string
	out        string // its stdout and stderr
	exited     chan struct{}
	exitErr    error
}

// daemonConfig is the daemon's configuration file of the env: multinet's
// keys as conf() would give the thin plugin (e.opts included), plus the
// daemon's own.
func (e *env) daemonConfig(extra map[string]any) map[string]any {
	c := map[string]any{
		// TLS (through the forwarder): client-go applies a kubeconfig's
		// credentials to https servers only.
		"kubeconfig": e.tlsKube, "clusterNetwork": e.clusterConf, "confDir": e.confDir, "cniDir": e.cniDir,
		"logFile": filepath.Join(e.dir, "multinet.log"), "logLevel": "debug",
		"socketDir": filepath.Join(e.dir, "run"), "metricsAddress": "127.0.0.1:9091",
	}
	for k, v := range e.opts {
		c[k] = v
	}
	for k, v := range extra {
		c[k] = v
	}
	return c
}

// startDaemon starts "multinet daemon" (through bin/multinet, which execs
// multinet-daemon) for the env's node and waits until /readyz says ready;
// the env is then in thick mode. It is stopped when the test ends.
func (e *env) startDaemon(extra map[string]any, env ...string) *daemonProc {
	e.t.Helper()
	if e.nodeName == "" {
		e.nodeName = "node-" + randHex(3)
	}
	cfg := e.daemonConfig(extra)
	d := &daemonProc{e: e, socketDir: cfg["socketDir"].(string), configFile: filepath.Join(e.dir, "daemon-config.json"),
		out: filepath.Join(e.dir, "daemon.out"), exited: make(chan struct{})}
	e.writeJSON(d.configFile, cfg)
	out, err := os.OpenFile(d.out, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		e.t.Fatal(err)
	}
	defer out.Close()
	d.cmd = exec.Command(filepath.Join(e.binDir, "multinet"), append([]string{"daemon", "-config", d.configFile, "-node-name", e.nodeName}, e.daemonFlags...)...)
	d.cmd.Env = append(os.Environ(), env...)
	d.cmd.Stdout, d.cmd.Stderr = out, out
	if err := e.inHost(d.cmd.Start); err != nil {
		e.t.Fatal(err)
	}
	go func() {
		d.exitErr = d.cmd.Wait()
		close(d.exited)
	}()
	e.t.Cleanup(func() { d.stop(syscall.SIGKILL) })
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, body, err := d.get("/readyz")
		if err == nil && code == http.StatusOK {
			break
		}
		select {
		case <-d.exited:
			e.t.Fatalf("the daemon exited: %v\n%s", d.exitErr, d.output())
		default:
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("the daemon is not ready after 30 s: %d %q %v\nrequests: %q\n%s", code, body, err, e.proxy.take(), d.output())
		}
		time.Sleep(20 * time.Millisecond)
	}
	e.daemon = d
	return d
}

func (d *daemonProc) output() string {
	b, _ := os.ReadFile(d.out)
	return "--- daemon output ---\n" + string(b) + d.e.log()
}

// stop sends sig and waits for the exit (SIGKILL after 60 s); it returns
// the exit error.
func (d *daemonProc) stop(sig syscall.Signal) error {
	select {
	case <-d.exited:
		return d.exitErr
	default:
	}
	d.cmd.Process.Signal(sig)
	select {
	case <-d.exited:
	case <-time.After(60 * time.Second):
		d.cmd.Process.Kill()
		<-d.exited
	}
	return d.exitErr
}

// get fetches a path of the metrics listener (in the host netns).
func (d *daemonProc) get(path string) (int, string, error) {
	var conn net.Conn
	if err := d.e.inHost(func() (err error) {
		conn, err = net.DialTimeout("tcp", "127.0.0.1:9091", 2*time.Second)
		return err
	}); err != nil {
		return 0, "", err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(conn, "GET %s HTTP/1.0\r\nHost: localhost\r\n\r\n", path)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// metrics returns the daemon's metrics as "name{labels}" → value.
func (d *daemonProc) metrics() map[string]float64 {
	d.e.t.Helper()
	code, body, err := d.get("/metrics")
	if err != nil || code != http.StatusOK {
		d.e.t.Fatalf("/metrics: %d %v", code, err)
	}
	out := map[string]float64{}
	for _, line := range strings.Split(body, "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] = v
		}
	}
	return out
}

// metric sums the samples of name whose labels contain every one of labels
// (`verb="ADD"`, ...).
func (d *daemonProc) metric(name string, labels ...string) float64 {
	d.e.t.Helper()
	var sum float64
	for k, v := range d.metrics() {
		n, l, _ := strings.Cut(k, "{")
		if n != name {
			continue
		}
		ok := true
		for _, want := range labels {
			ok = ok && strings.Contains(l, want)
		}
		if ok {
			sum += v
		}
	}
	return sum
}

// peakRSS is the daemon's peak resident set (VmHWM) in bytes.
func (d *daemonProc) peakRSS() int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", d.cmd.Process.Pid))
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	return -1
}
