// Package shim is multinet's thick mode on the wire: the request the shim
// (the CNI plugin "multinet-shim" that the runtime executes) sends the
// daemon ("multinet daemon") over a unix socket, the answer, and the shim
// itself. It links no Kubernetes client and no HTTP stack: the shim is on
// every pod's critical path, so it only forwards.
//
// Protocol: one connection per CNI invocation. The shim writes one JSON
// Request and closes its writing side; the daemon answers one JSON Response
// and closes the connection. A connection closed without a Response means
// the daemon went away (or is shutting down): the shim reports CNI error 11,
// try again later, as when it cannot connect at all.
package shim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/patchbay-cni/patchbay/skel"
	"github.com/patchbay-cni/patchbay/spec"
)

// Type is the shim's CNI plugin type.
const Type = "multinet-shim"

// DefaultSocketDir is where the daemon's socket is unless "daemonSocketDir"
// says otherwise (Multus's key and default directory layout).
const DefaultSocketDir = "/run/multinet"

// SocketName is the socket's file name in the socket directory.
const SocketName = "multinet.sock"

// SocketPath is the daemon's socket in dir ("" = DefaultSocketDir).
func SocketPath(dir string) string {
	if dir == "" {
		dir = DefaultSocketDir
	}
	return filepath.Join(dir, SocketName)
}

// Request is one CNI invocation as the shim received it.
type Request struct {
	// Env is the shim's environment: CNI_COMMAND, CNI_CONTAINERID,
	// CNI_NETNS, CNI_IFNAME, CNI_ARGS, CNI_PATH and the rest, which the
	// daemon passes on to the delegates as the thin plugin would.
	Env []string `json:"env"`
	// Config is the network configuration (stdin).
	Config []byte `json:"config"`
	// Start is the shim's process start (Unix nanoseconds): the daemon's
	// "took" counts from it, as the thin plugin's counts from its own start.
	Start int64 `json:"start"`
	// Sent is when the shim sent the request (Unix nanoseconds; debug
	// timing only).
	Sent int64 `json:"sent,omitempty"`
}

// Response is what the plugin would have produced as a process.
type Response struct {
	// ExitCode is the plugin's exit status: 0, or 1 with error JSON on
	// Stdout.
	ExitCode int    `json:"exitCode"`
	Stdout   []byte `json:"stdout,omitempty"`
	Stderr   []byte `json:"stderr,omitempty"`
}

// conf is what the shim reads of its configuration.
type conf struct {
	CNIVersion string `json:"cniVersion"`
	SocketDir  string `json:"daemonSocketDir"`
	// WaitSeconds bounds how long the shim waits for a daemon that is not
	// listening (restarting, being upgraded) before answering code 11;
	// nil means DefaultWait, 0 not at all.
	WaitSeconds *float64 `json:"daemonWaitSeconds"`
}

// readConf reads what the shim needs of its configuration; the daemon
// reports a malformed one.
func readConf(stdin []byte) conf {
	var c conf
	_ = json.Unmarshal(stdin, &c)
	return c
}

// DefaultWait is how long the shim waits for the daemon's socket: a
// DaemonSet rollout replaces the daemon in a few seconds, and waiting
// through it spares the pod a failed sandbox and the kubelet's back-off.
const DefaultWait = 15 * time.Second

func (c *conf) wait() time.Duration {
	if c.WaitSeconds == nil {
		return DefaultWait
	}
	if *c.WaitSeconds <= 0 {
		return 0
	}
	// Beyond what a Duration holds the conversion would give a negative
	// wait (not waiting at all).
	if *c.WaitSeconds >= float64(math.MaxInt64)/float64(time.Second) {
		return math.MaxInt64
	}
	return time.Duration(*c.WaitSeconds * float64(time.Second))
}

// Main is the shim: it forwards one invocation to the daemon and writes
// the daemon's answer as its own. VERSION, and a call without CNI_COMMAND,
// are answered here: they need no daemon.
func Main(start time.Time) int {
	cmd := os.Getenv("CNI_COMMAND")
	stdin, err := io.ReadAll(os.Stdin)
	if err != nil {
		return fail(os.Stdout, "", spec.NewError(spec.ErrIOFailure, "multinet-shim: failed to read the network configuration from stdin", err.Error()))
	}
	if cmd == "" || cmd == spec.CmdVersion {
		return skel.Run(context.Background(), skel.Plugin{
			Type:  Type,
			Add:   func(*skel.CmdArgs) (*spec.Result, error) { return nil, nil },
			About: "multinet-shim: the CNI plugin of multinet's thick mode; forwards each call to the multinet daemon (see multinet/README.md)",
		}, skel.EnvFromOS(), bytes.NewReader(stdin), os.Stdout, os.Stderr)
	}
	c := readConf(stdin)
	resp, err := Forward(SocketPath(c.SocketDir), &Request{Env: os.Environ(), Config: stdin, Start: start.UnixNano()}, c.wait())
	if err != nil {
		return fail(os.Stdout, c.CNIVersion, err)
	}
	os.Stderr.Write(resp.Stderr)
	os.Stdout.Write(resp.Stdout)
	return resp.ExitCode
}

// fail writes err as a CNI error in version, or in ours when version is
// not one we speak (a runtime could not read it).
func fail(w io.Writer, version string, err error) int {
	if !spec.IsSupported(version) {
		version = spec.Current
	}
	ce := spec.AsError(err, spec.ErrInternal)
	w.Write(append(ce.Marshal(version), '\n'))
	return 1
}

// Forward sends req to the daemon listening on socket and returns its
// answer. A daemon that is not listening is waited for, up to wait (it is
// being restarted or upgraded); nothing has been sent to it then, so
// trying again is safe for every verb. When the daemon cannot be reached
// in time, or goes away before answering, the error is a *spec.Error with
// code 11 (try again later).
func Forward(socket string, req *Request, wait time.Duration) (*Response, error) {
	deadline := time.Now().Add(wait)
	conn, err := net.Dial("unix", socket)
	for err != nil && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		conn, err = net.Dial("unix", socket)
	}
	if err != nil {
		return nil, unavailable(socket, err)
	}
	defer conn.Close()
	if req.Start != 0 {
		req.Sent = time.Now().UnixNano()
	}
	data, err := json.Marshal(req)
	if err != nil {
		return nil, spec.Errorf(spec.ErrInternal, "multinet-shim: %v", err)
	}
	if _, err := conn.Write(data); err != nil {
		return nil, unavailable(socket, err)
	}
	if err := conn.(*net.UnixConn).CloseWrite(); err != nil {
		return nil, unavailable(socket, err)
	}
	answer, err := io.ReadAll(conn)
	if err != nil {
		return nil, unavailable(socket, err)
	}
	if len(answer) == 0 {
		return nil, unavailable(socket, errors.New("the daemon closed the connection without answering (restarting or shutting down)"))
	}
	var resp Response
	if err := json.Unmarshal(answer, &resp); err != nil {
		return nil, spec.Errorf(spec.ErrInternal, "multinet-shim: undecodable answer from the daemon at %s: %v", socket, err)
	}
	// Main exits with it: 256 would exit 0, a success the daemon never
	// reported.
	if resp.ExitCode != 0 && resp.ExitCode != 1 {
		return nil, spec.Errorf(spec.ErrInternal, "multinet-shim: answer from the daemon at %s has exit status %d (want 0 or 1)", socket, resp.ExitCode)
	}
	return &resp, nil
}

func unavailable(socket string, err error) error {
	return spec.NewError(spec.ErrTryAgainLater,
		fmt.Sprintf("multinet-shim: the multinet daemon is not available at %s (is the multinet DaemonSet running on this node?)", socket),
		err.Error())
}
