package daemon

import (
	"context"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/patchbay-cni/patchbay/internal/invoke"
)

// cniVars are the variables the runtime library sets for a delegate.
var cniVars = []string{"CNI_COMMAND", "CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME", "CNI_ARGS", "CNI_PATH"}

func isCNIVar(k string) bool {
	for _, v := range cniVars {
		if k == v {
			return true
		}
	}
	return false
}

// executor runs one request's delegates: with the shim's environment (what
// the runtime gave the plugin, as in thin mode, not the daemon's own) plus
// the runtime library's CNI_* variables, chrooted when configured, timed
// per plugin.
type executor struct {
	runner  invoke.Runner
	chroot  string
	baseEnv []string
	m       *metrics
}

func (e *executor) prepare(path string, env []string) (string, []string, string) {
	out := make([]string, 0, len(e.baseEnv)+len(cniVars))
	out = append(out, e.baseEnv...)
	verb := ""
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		if !isCNIVar(k) {
			continue
		}
		if k == "CNI_COMMAND" {
			verb = v
		}
		if k == "CNI_PATH" && e.chroot != "" {
			var dirs []string
			for _, d := range filepath.SplitList(v) {
				dirs = append(dirs, unchroot(e.chroot, d))
			}
			kv = k + "=" + strings.Join(dirs, ":")
		}
		out = append(out, kv)
	}
	if e.chroot != "" {
		path = unchroot(e.chroot, path)
	}
	return path, out, verb
}

// unchroot is p inside root (p was found under root by the daemon).
func unchroot(root, p string) string {
	if rest, ok := strings.CutPrefix(p, root); ok && (rest == "" || rest[0] == '/') {
		if rest == "" {
			return "/"
		}
		return rest
	}
	return p
}

func (e *executor) Exec(ctx context.Context, path string, env []string, stdin []byte, stderr io.Writer) ([]byte, error) {
	p, env2, verb := e.prepare(path, env)
	start := time.Now()
	out, err := e.runner.Exec(ctx, p, env2, stdin, stderr)
	e.m.delegate.WithLabelValues(verb, filepath.Base(path), result(err)).Observe(time.Since(start).Seconds())
	return out, err
}

func (e *executor) ExecHeld(ctx context.Context, path string, env []string, hold func(context.Context) ([]byte, error), stderr io.Writer) ([]byte, error) {
	p, env2, verb := e.prepare(path, env)
	var released time.Time
	out, err := e.runner.ExecHeld(ctx, p, env2, func(ctx context.Context) ([]byte, error) {
		b, err := hold(ctx)
		if err == nil {
			released = time.Now()
		}
		return b, err
	}, stderr)
	if !released.IsZero() { // timed from the release: the wait was not the plugin's
		e.m.delegate.WithLabelValues(verb, filepath.Base(path), result(err)).Observe(time.Since(released).Seconds())
	}
	return out, err
}
