// Package daemon is multinet's thick mode: one long-running process per
// node ("multinet daemon") that runs the verbs of multinet/plugin — the
// same code as the thin plugin — for the shims (multinet/shim) that the
// runtime executes, with the node's pods and the NetworkAttachmentDefinitions
// read from client-go informers instead of one API read per call, bounded
// concurrency, Prometheus metrics, and a graceful shutdown.
//
// Nothing of a pod's attachments lives only in the daemon's memory: the
// per-container plans and results are in cniDir on disk, as in thin mode,
// so a restarted (or replaced) daemon DELs what its predecessor added.
package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/client-go/rest"

	"github.com/patchbay-cni/patchbay/internal/invoke"
	"github.com/patchbay-cni/patchbay/multinet/kube"
	"github.com/patchbay-cni/patchbay/multinet/plugin"
	"github.com/patchbay-cni/patchbay/multinet/shim"
	"github.com/patchbay-cni/patchbay/skel"
	"github.com/patchbay-cni/patchbay/spec"
)

// Options are the daemon's command line.
type Options struct {
	// NodeName is this node's name (flag, else NODE_NAME, else the
	// configuration's nodeName, else the hostname).
	NodeName string
	// ServiceAccountDir holds the in-cluster token and ca.crt
	// (DefaultServiceAccountDir when empty).
	ServiceAccountDir string
}

// Daemon is a running multinet daemon.
type Daemon struct {
	cfg *Config
	// log is the daemon's own; verbLog the verbs' (their lines read as
	// the thin plugin's).
	log, verbLog *slog.Logger
	node         string
	m            *metrics
	inf          *informers
	api          *informerAPI

	ln        net.Listener
	metricsLn net.Listener
	httpSrv   *http.Server
	sem       chan struct{}
	draining  chan struct{} // closed at shutdown: no new request runs
	drainOnce sync.Once
	listening atomic.Bool
	requests  sync.WaitGroup // accepted connections
	async     sync.WaitGroup // asyncNetworkStatus writes
	// ctx ends when the shutdown gives up waiting for in-flight requests.
	ctx      context.Context
	cancel   context.CancelFunc
	stopInf  chan struct{}
	closeLog func()
}

// New prepares a daemon: configuration, logger, API client and informers.
// Start runs it.
func New(cfg *Config, opts Options) (*Daemon, error) {
	log, closeLog := plugin.NewLogger(&plugin.Config{LogFile: cfg.LogFile, LogLevel: cfg.LogLevel, LogToStderr: cfg.LogToStderr}, os.Stderr)
	d := &Daemon{cfg: cfg, log: log.With("component", "daemon"), verbLog: log, closeLog: closeLog, m: newMetrics(),
		sem: make(chan struct{}, cfg.MaxParallelRequests), draining: make(chan struct{}), stopInf: make(chan struct{})}
	d.ctx, d.cancel = context.WithCancel(context.Background())
	d.node = nodeName(opts.NodeName, cfg.NodeName)
	if d.node == "" {
		return nil, errors.New("no node name: set NODE_NAME (the downward API's spec.nodeName) or -node-name")
	}
	rc, err := restConfig(cfg.Kubeconfig, opts.ServiceAccountDir)
	if err != nil {
		return nil, err
	}
	rc.Wrap(func(rt http.RoundTripper) http.RoundTripper { return &roundTripper{d.m, rt} })
	hc, err := rest.HTTPClientFor(rc)
	if err != nil {
		return nil, err
	}
	if d.inf, err = newInformers(rc, hc, d.node); err != nil {
		return nil, err
	}
	u, _, err := rest.DefaultServerUrlFor(rc)
	if err != nil {
		return nil, err
	}
	d.api = &informerAPI{Client: kube.NewWithHTTP(u.String(), apiTimeoutClient(hc, cfg.Plugin.APITimeout())), inf: d.inf, m: d.m}
	d.api.Client.UserAgent = "multinet-daemon"
	return d, nil
}

func nodeName(flag, cfg string) string {
	for _, n := range []string{flag, os.Getenv("NODE_NAME"), cfg} {
		if n != "" {
			return n
		}
	}
	h, _ := os.Hostname()
	return h
}

// Start starts the informers, the metrics listener and the socket. Requests
// are served at once: until the informers have synced, their reads fall
// back to API GETs (as for any object they have not seen yet).
func (d *Daemon) Start() error {
	var err error
	if d.metricsLn, err = net.Listen("tcp", d.cfg.MetricsAddress); err != nil {
		return fmt.Errorf("metrics listener: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(d.m.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") })
	mux.HandleFunc("/readyz", d.readyz)
	d.httpSrv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go d.httpSrv.Serve(d.metricsLn)

	d.inf.run(d.stopInf)

	if err := os.MkdirAll(d.cfg.SocketDir, 0o755); err != nil {
		return fmt.Errorf("socket directory: %w", err)
	}
	sock := shim.SocketPath(d.cfg.SocketDir)
	// A socket left by a daemon that died: nobody answers on it.
	if c, err := net.Dial("unix", sock); err == nil {
		c.Close()
		return fmt.Errorf("another daemon is serving %s", sock)
	}
	os.Remove(sock)
	if d.ln, err = net.Listen("unix", sock); err != nil {
		return fmt.Errorf("socket: %w", err)
	}
	if err := os.Chmod(sock, 0o600); err != nil { // the runtime (root) only
		return err
	}
	d.listening.Store(true)
	go d.accept()
	d.log.Info("multinet daemon serving", "socket", sock, "metrics", d.metricsLn.Addr().String(), "node", d.node,
		"maxParallelRequests", d.cfg.MaxParallelRequests, "chrootDir", d.cfg.ChrootDir, "ignoredKeys", strings.Join(d.cfg.Ignored, ","))
	return nil
}

// MetricsAddr is the metrics listener's address.
func (d *Daemon) MetricsAddr() string { return d.metricsLn.Addr().String() }

// Ready reports whether the informers have synced and the socket listens.
func (d *Daemon) Ready() bool { return d.listening.Load() && d.inf.synced() }

func (d *Daemon) readyz(w http.ResponseWriter, _ *http.Request) {
	var why []string
	if !d.listening.Load() {
		why = append(why, "socket not listening")
	}
	if !d.inf.pods.HasSynced() {
		why = append(why, "pod informer not synced")
	}
	if !d.inf.nads.HasSynced() {
		why = append(why, "NetworkAttachmentDefinition informer not synced")
	}
	if len(why) > 0 {
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, strings.Join(why, "; ")+"\n")
		return
	}
	io.WriteString(w, "ok\n")
}

func (d *Daemon) accept() {
	for {
		conn, err := d.ln.Accept()
		if err != nil {
			select {
			case <-d.draining:
				return
			default:
			}
			d.log.Error("accept", "error", err)
			time.Sleep(10 * time.Millisecond)
			continue
		}
		d.requests.Add(1)
		go func() {
			defer d.requests.Done()
			d.serve(conn)
		}()
	}
}

// maxRequest bounds a request's size (a configuration with a prevResult
// is a few kB).
const maxRequest = 16 << 20

func (d *Daemon) serve(conn net.Conn) {
	defer conn.Close()
	received := time.Now()
	conn.SetReadDeadline(received.Add(10 * time.Second))
	data, err := io.ReadAll(io.LimitReader(conn, maxRequest))
	var req *shim.Request
	var env skel.Env
	if err == nil {
		req, env, err = decodeRequest(data)
	}
	if err != nil {
		d.m.refused.WithLabelValues("malformed").Inc()
		d.answer(conn, refusal(nil, spec.ErrInternal, "multinet daemon: unreadable request: "+err.Error()))
		return
	}
	verb := env["CNI_COMMAND"]
	// Refused while shutting down, before and after waiting for a slot.
	select {
	case <-d.draining:
		d.m.refused.WithLabelValues("shutdown").Inc()
		d.answer(conn, refusal(req.Config, spec.ErrTryAgainLater, "multinet daemon: shutting down; try again"))
		return
	default:
	}
	d.m.waiting.Inc()
	select {
	case d.sem <- struct{}{}:
		d.m.waiting.Dec()
	case <-d.draining:
		d.m.waiting.Dec()
		d.m.refused.WithLabelValues("shutdown").Inc()
		d.answer(conn, refusal(req.Config, spec.ErrTryAgainLater, "multinet daemon: shutting down; try again"))
		return
	}
	d.m.inFlight.Inc()
	resp := d.run(env, req)
	d.m.inFlight.Dec()
	<-d.sem
	res := "success"
	if resp.ExitCode != 0 {
		res = "error"
	}
	d.m.verb.WithLabelValues(verb, res).Observe(time.Since(received).Seconds())
	d.answer(conn, resp)
}

func (d *Daemon) answer(conn net.Conn, resp *shim.Response) {
	data, _ := json.Marshal(resp)
	conn.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Write(data); err != nil {
		d.log.Warn("cannot answer the shim (gone?)", "error", err)
	}
}

// decodeRequest decodes a shim's request and the verbs' environment.
func decodeRequest(data []byte) (*shim.Request, skel.Env, error) {
	var req shim.Request
	if err := json.Unmarshal(data, &req); err != nil {
		return nil, nil, err
	}
	return &req, skel.EnvFromList(req.Env), nil
}

// refusal is a CNI error answer in the request configuration's version,
// or in ours when we do not speak that one (as skel answers).
func refusal(config []byte, code uint, msg string) *shim.Response {
	var c struct {
		CNIVersion string `json:"cniVersion"`
	}
	_ = json.Unmarshal(config, &c)
	version := spec.ConfigVersion(c.CNIVersion)
	if !spec.IsSupported(version) {
		version = spec.Current
	}
	e := &spec.Error{Code: code, Msg: msg}
	return &shim.Response{ExitCode: 1, Stdout: append(e.Marshal(version), '\n')}
}

// prepare returns the configuration (stdin) and environment the verbs of
// a request run with.
func (c *Config) prepare(env skel.Env, req *shim.Request) ([]byte, skel.Env) {
	stdin, err := c.RequestConfig(req.Config)
	if err != nil {
		stdin = req.Config // skel reports it as the thin plugin would
	}
	if c.ChrootDir != "" {
		env = env.With("CNI_PATH", chrootPath(c.ChrootDir, env["CNI_PATH"]))
	}
	return stdin, env
}

// run runs one request through the verbs, in process.
func (d *Daemon) run(env skel.Env, req *shim.Request) *shim.Response {
	start := time.Now()
	if req.Start > 0 {
		// The shim's start, unless clocks disagree absurdly.
		if s := time.Unix(0, req.Start); s.Before(start) && start.Sub(s) < time.Minute {
			start = s
		}
	}
	ex := &executor{runner: invoke.Runner{Chroot: d.cfg.ChrootDir}, chroot: d.cfg.ChrootDir, m: d.m}
	for k, v := range env {
		if !isCNIVar(k) {
			ex.baseEnv = append(ex.baseEnv, k+"="+v)
		}
	}
	stdin, env := d.cfg.prepare(env, req)
	d.verbLog.Debug("request", "verb", env["CNI_COMMAND"], "container", env["CNI_CONTAINERID"],
		"sent_us", time.Unix(0, req.Sent).Sub(start).Microseconds(), // from the shim's start, for BenchmarkPodAddDel
		"received_us", time.Since(start).Microseconds())
	host := &plugin.Host{API: d.api, Exec: ex, Log: d.verbLog, Start: start,
		AsyncStatus: d.runAsync, Observe: d.m.observeAttachment, LocalReads: true}
	ctx, cancel := context.WithTimeout(d.ctx, d.cfg.requestTimeout())
	defer cancel()
	var stdout, stderr bytes.Buffer
	code := skel.Run(ctx, plugin.PluginFor(host), env, bytes.NewReader(stdin), &stdout, &stderr)
	return &shim.Response{ExitCode: code, Stdout: stdout.Bytes(), Stderr: stderr.Bytes()}
}

// runAsync runs an asyncNetworkStatus write; the shutdown waits for it.
func (d *Daemon) runAsync(f func()) {
	d.async.Add(1)
	go func() {
		defer d.async.Done()
		f()
	}()
}

// chrootPath prefixes every directory of a CNI_PATH value with root (the
// runtime's directories are host paths); empty means the default bin dir.
func chrootPath(root, path string) string {
	var dirs []string
	for _, p := range filepath.SplitList(path) {
		if p != "" {
			dirs = append(dirs, inRoot(root, p))
		}
	}
	if len(dirs) == 0 {
		dirs = []string{inRoot(root, plugin.DefaultBinDir)}
	}
	return strings.Join(dirs, string(os.PathListSeparator))
}

// Shutdown stops taking requests — the socket is closed, so shims get CNI
// error 11 (try again) — lets the in-flight ones finish (at most
// shutdownTimeoutSeconds, then cancels them) with their asyncNetworkStatus
// writes, and stops the informers and the metrics listener.
func (d *Daemon) Shutdown() {
	d.drainOnce.Do(func() {
		d.log.Info("shutting down: refusing new requests, finishing the ones in flight")
		close(d.draining)
		d.listening.Store(false)
		if d.ln != nil {
			d.ln.Close() // removes the socket file
		}
		done := make(chan struct{})
		go func() {
			d.requests.Wait()
			d.async.Wait()
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(d.cfg.shutdownTimeout()):
			d.log.Warn("in-flight requests did not finish in time: cancelling them", "timeout", d.cfg.shutdownTimeout())
			d.cancel()
			<-done
		}
		d.cancel()
		close(d.stopInf)
		if d.httpSrv != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			d.httpSrv.Shutdown(ctx)
			cancel()
		}
		d.log.Info("stopped")
		d.closeLog()
	})
}
