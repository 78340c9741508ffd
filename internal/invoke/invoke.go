// Package invoke finds and executes CNI plugin binaries. Both the runtime
// library and the plugin SDK (for IPAM delegation) use it.
package invoke

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/patchbay-cni/patchbay/spec"
)

// Find looks up the executable for a plugin type in the given directories.
// A type containing a path separator is refused (spec §1: it names a file,
// never a path), so a config cannot make the runtime run arbitrary binaries.
func Find(typ string, dirs []string) (string, error) {
	if err := spec.ValidatePluginType("type", typ); err != nil {
		return "", err
	}
	if len(dirs) == 0 {
		return "", spec.Errorf(spec.ErrInvalidEnvironment, "cannot find plugin %q: CNI_PATH is empty", typ)
	}
	for _, d := range dirs {
		if d == "" {
			continue
		}
		p := filepath.Join(d, typ)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", spec.Errorf(spec.ErrInvalidNetworkConfig, "failed to find plugin %q in path %v", typ, dirs)
}

// SplitPath splits a CNI_PATH value.
func SplitPath(p string) []string {
	var out []string
	for _, d := range filepath.SplitList(p) {
		if d != "" {
			out = append(out, d)
		}
	}
	return out
}

// Exec runs a plugin binary with the given environment and stdin and returns
// its stdout. On a non-zero exit the plugin's error JSON becomes a
// *spec.Error with its code; unstructured failures get code 999 with the
// plugin's stderr. Exec retries a few times on ETXTBSY, which happens when the
// binary was just written by a concurrent installer; if it stays busy, or the
// context ends, the error has code 11 (try again later).
func Exec(ctx context.Context, path string, env []string, stdin []byte, stderr io.Writer) ([]byte, error) {
	return Runner{}.Exec(ctx, path, env, stdin, stderr)
}

// Runner runs plugins as Exec and ExecHeld do, with process attributes.
// The zero Runner is Exec and ExecHeld.
type Runner struct {
	// Chroot, when set, is the plugin's root directory, and the path given
	// to Exec is a path inside it: a node daemon running in a container
	// runs the host's plugins in the host's file system this way (Multus's
	// "chrootDir").
	Chroot string
}

// Exec is Exec with r's attributes.
func (r Runner) Exec(ctx context.Context, path string, env []string, stdin []byte, stderr io.Writer) ([]byte, error) {
	return r.execRetrying(ctx, path, env, stdin, nil, stderr)
}

// ExecHeld is ExecHeld with r's attributes.
func (r Runner) ExecHeld(ctx context.Context, path string, env []string, hold func(context.Context) ([]byte, error), stderr io.Writer) ([]byte, error) {
	return r.execRetrying(ctx, path, env, nil, hold, stderr)
}

// ExecHeld is Exec for a caller that starts a plugin before it knows
// whether the plugin may run (multinet starts its cluster network's plugin
// while it reads the pod, and attaches nothing for a pod it will refuse):
// the process starts — its exec and initialisation, about 3 ms of a Go
// plugin here, overlap the caller's wait — and is held before it has read
// anything; hold then returns the configuration for its stdin. When hold
// fails, the plugin is killed before it received a byte, and hold's error
// is returned. hold is called at most once, in the calling goroutine.
// Should the caller die while holding, the plugin reads an empty stdin (the
// pipe's end), which no plugin can take for a configuration.
func ExecHeld(ctx context.Context, path string, env []string, hold func(context.Context) ([]byte, error), stderr io.Writer) ([]byte, error) {
	return Runner{}.ExecHeld(ctx, path, env, hold, stderr)
}

func (r Runner) execRetrying(ctx context.Context, path string, env []string, stdin []byte, hold func(context.Context) ([]byte, error), stderr io.Writer) ([]byte, error) {
	var lastErr error
	for attempt := 0; attempt < execAttempts; attempt++ {
		out, err := r.execOnceHeld(ctx, path, env, stdin, hold, stderr)
		if err == nil || !errors.Is(err, syscall.ETXTBSY) {
			return out, err
		}
		lastErr = err
		select {
		case <-ctx.Done():
			return nil, spec.Errorf(spec.ErrTryAgainLater, "plugin %s: %v (while %v)", filepath.Base(path), ctx.Err(), err)
		case <-time.After(time.Duration(attempt+1) * 20 * time.Millisecond):
		}
	}
	return nil, spec.Errorf(spec.ErrTryAgainLater, "failed to run plugin %s: %v", path, lastErr)
}

// execAttempts bounds the ETXTBSY retries (about 200ms of waiting in all).
const execAttempts = 5

// waitDelay bounds how long Exec waits, after the plugin was killed on
// timeout, for its output pipes to close: a child the plugin left behind
// may hold them open indefinitely.
const waitDelay = 500 * time.Millisecond

func execOnce(ctx context.Context, path string, env []string, stdin []byte, stderr io.Writer) ([]byte, error) {
	return Runner{}.execOnceHeld(ctx, path, env, stdin, nil, stderr)
}

// execOnceHeld runs the plugin once; with hold, its stdin comes from hold
// (see ExecHeld), else it is stdin.
func (r Runner) execOnceHeld(ctx context.Context, path string, env []string, stdin []byte, hold func(context.Context) ([]byte, error), stderr io.Writer) ([]byte, error) {
	var stdout bytes.Buffer
	errBuf := headBuffer{limit: stderrKept}
	cmd := exec.CommandContext(ctx, path)
	// Exactly the given environment: a nil env would make os/exec pass on
	// ours, leaking the caller's CNI_* variables into the plugin.
	cmd.Env = env
	if cmd.Env == nil {
		cmd.Env = []string{}
	}
	cmd.WaitDelay = waitDelay
	if r.Chroot != "" {
		cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: r.Chroot}
		cmd.Dir = "/"
	}
	var pipe io.WriteCloser
	if hold == nil {
		cmd.Stdin = bytes.NewReader(stdin)
	} else {
		var err error
		if pipe, err = cmd.StdinPipe(); err != nil {
			return nil, spec.Errorf(spec.ErrIOFailure, "failed to run plugin %s: %v", path, err)
		}
	}
	cmd.Stdout = &stdout
	if stderr != nil {
		cmd.Stderr = io.MultiWriter(stderr, &errBuf)
	} else {
		cmd.Stderr = &errBuf
	}
	err := cmd.Start()
	if err == nil && hold != nil {
		data, herr := hold(ctx)
		if herr != nil {
			cmd.Process.Kill() // before the pipe closes: not even an empty configuration
			pipe.Close()
			cmd.Wait()
			return nil, herr
		}
		// Written beside Wait, as os/exec does for a reader: a plugin that
		// exits without reading must not block us (Wait closes the pipe).
		go func() {
			pipe.Write(data)
			pipe.Close()
		}()
	}
	if err == nil {
		err = cmd.Wait()
	}
	// ErrWaitDelay after a clean exit: the plugin succeeded but left a child
	// holding its stdout; what it wrote before exiting is its answer.
	if err == nil || (errors.Is(err, exec.ErrWaitDelay) && ctx.Err() == nil && cmd.ProcessState != nil && cmd.ProcessState.Success()) {
		// Error JSON with exit 0 is still an error: no result or VERSION
		// answer has a "code", and taking it for an empty success would
		// cache it and hide the failure.
		if e, ok := spec.ParseError(stdout.Bytes()); ok {
			return nil, e
		}
		return stdout.Bytes(), nil
	}
	if errors.Is(err, syscall.ETXTBSY) {
		return nil, err
	}
	if ctx.Err() != nil {
		return nil, spec.Errorf(spec.ErrTryAgainLater, "plugin %s did not finish in time: %v", filepath.Base(path), ctx.Err())
	}
	if e, ok := spec.ParseError(stdout.Bytes()); ok {
		return nil, e
	}
	msg := strings.TrimSpace(errBuf.buf.String())
	if errBuf.dropped > 0 {
		msg += fmt.Sprintf(" ... (%d more bytes of stderr)", errBuf.dropped)
	}
	if msg == "" {
		out := stdout.Bytes()
		if len(out) > stderrKept {
			out = fmt.Appendf(out[:stderrKept:stderrKept], " ... (%d more bytes of stdout)", len(out)-stderrKept)
		}
		msg = strings.TrimSpace(string(out))
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return nil, spec.Errorf(spec.ErrIOFailure, "failed to run plugin %s: %v", path, err)
	}
	return nil, spec.NewError(spec.ErrInternal, fmt.Sprintf("plugin %s failed (%v)", filepath.Base(path), err), msg)
}

// stderrKept bounds the stderr kept for error messages: a plugin flooding
// stderr must not make the runtime hold (or print) megabytes.
const stderrKept = 8 << 10

// headBuffer keeps the first limit bytes written and counts the rest; the
// head says what went wrong (a Go panic's message comes first).
type headBuffer struct {
	limit   int
	buf     bytes.Buffer
	dropped int64
}

func (h *headBuffer) Write(p []byte) (int, error) {
	keep := min(len(p), h.limit-h.buf.Len())
	h.buf.Write(p[:keep])
	h.dropped += int64(len(p) - keep)
	return len(p), nil
}
