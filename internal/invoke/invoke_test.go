package invoke

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/patchbay-cni/patchbay/spec"
)

// script writes an executable shell script into dir.
func script(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func wantCode(t *testing.T, err error, code uint, frags ...string) *spec.Error {
	t.Helper()
	var ce *spec.Error
	if !errors.As(err, &ce) {
		t.Fatalf("want *spec.Error code %d, got %T %v", code, err, err)
	}
	if ce.Code != code {
		t.Errorf("code = %d, want %d (%v)", ce.Code, code, ce)
	}
	for _, f := range frags {
		if !strings.Contains(ce.Error(), f) {
			t.Errorf("%q does not mention %q", ce.Error(), f)
		}
	}
	return ce
}

func TestFindRejectsPaths(t *testing.T) {
	dir := t.TempDir()
	script(t, dir, "ok", "exit 0")
	for _, typ := range []string{"", ".", "..", "../ok", "a/b", "/bin/sh", `a\b`} {
		_, err := Find(typ, []string{dir})
		wantCode(t, err, spec.ErrInvalidNetworkConfig, "type")
	}
	_, err := Find("ok", nil)
	wantCode(t, err, spec.ErrInvalidEnvironment, "CNI_PATH")
}

func TestFindOrderAndSkips(t *testing.T) {
	nonExec, dirEntry, first, second := t.TempDir(), t.TempDir(), t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(nonExec, "p"), []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dirEntry, "p"), 0o755); err != nil {
		t.Fatal(err)
	}
	want := script(t, first, "p", "exit 0")
	script(t, second, "p", "exit 0")
	got, err := Find("p", []string{"", filepath.Join(first, "missing"), nonExec, dirEntry, first, second})
	if err != nil || got != want {
		t.Fatalf("Find = %q, %v; want %q", got, err, want)
	}
	// A symlink to an executable counts.
	links := t.TempDir()
	if err := os.Symlink(want, filepath.Join(links, "p")); err != nil {
		t.Fatal(err)
	}
	if got, err := Find("p", []string{nonExec, links}); err != nil || got != filepath.Join(links, "p") {
		t.Errorf("Find via symlink = %q, %v", got, err)
	}
	_, err = Find("p", []string{nonExec, dirEntry})
	wantCode(t, err, spec.ErrInvalidNetworkConfig, `"p"`)
}

func TestSplitPath(t *testing.T) {
	if got := SplitPath("/a::/b:"); !slices.Equal(got, []string{"/a", "/b"}) {
		t.Errorf("SplitPath = %q", got)
	}
	if SplitPath("") != nil {
		t.Error("SplitPath(\"\") != nil")
	}
}

func TestExecPassesEnvAndStdin(t *testing.T) {
	p := script(t, t.TempDir(), "echo", `echo "cmd=$CNI_COMMAND foo=$FOO"; cat; echo; echo log >&2`)
	var stderr bytes.Buffer
	out, err := Exec(context.Background(), p, []string{"CNI_COMMAND=ADD", "FOO=bar"}, []byte(`{"x":1}`), &stderr)
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != "cmd=ADD foo=bar\n{\"x\":1}\n" {
		t.Errorf("stdout = %q", out)
	}
	if stderr.String() != "log\n" {
		t.Errorf("stderr passthrough = %q", stderr.String())
	}
}

func TestExecErrors(t *testing.T) {
	dir := t.TempDir()
	t.Run("error JSON keeps its code", func(t *testing.T) {
		p := script(t, dir, "fail", `echo '{"cniVersion":"1.0.0","code":117,"msg":"custom","details":"more"}'; exit 1`)
		_, err := Exec(context.Background(), p, nil, nil, nil)
		ce := wantCode(t, err, 117)
		if *ce != (spec.Error{CNIVersion: "1.0.0", Code: 117, Msg: "custom", Details: "more"}) {
			t.Errorf("error = %+v", ce)
		}
	})
	t.Run("unstructured failure", func(t *testing.T) {
		p := script(t, dir, "crash", `echo "panic: boom" >&2; exit 2`)
		var stderr bytes.Buffer
		_, err := Exec(context.Background(), p, nil, nil, &stderr)
		ce := wantCode(t, err, spec.ErrInternal, "crash", "exit status 2")
		if ce.Details != "panic: boom" || stderr.String() != "panic: boom\n" {
			t.Errorf("details = %q, stderr = %q", ce.Details, stderr.String())
		}
	})
	t.Run("unstructured stdout", func(t *testing.T) {
		p := script(t, dir, "stdout", `echo "not json"; exit 1`)
		_, err := Exec(context.Background(), p, nil, nil, nil)
		if ce := wantCode(t, err, spec.ErrInternal); ce.Details != "not json" {
			t.Errorf("details = %q", ce.Details)
		}
	})
	t.Run("cannot start", func(t *testing.T) {
		_, err := Exec(context.Background(), filepath.Join(dir, "missing"), nil, nil, nil)
		wantCode(t, err, spec.ErrIOFailure, "missing")
		bad := filepath.Join(dir, "garbage")
		if err := os.WriteFile(bad, []byte("\x00\x01\x02"), 0o755); err != nil {
			t.Fatal(err)
		}
		_, err = Exec(context.Background(), bad, nil, nil, nil)
		wantCode(t, err, spec.ErrIOFailure, "garbage")
	})
}

// A plugin that overruns the context is killed and reported as code 11,
// promptly even when a child it started keeps its stdout open.
func TestExecTimeout(t *testing.T) {
	p := script(t, t.TempDir(), "slow", `sleep 5; echo done`)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := Exec(ctx, p, nil, nil, nil)
	wantCode(t, err, spec.ErrTryAgainLater, "slow", "in time")
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Exec returned after %v", d)
	}
}

// A plugin that exits but leaves a child holding stdout still succeeds.
func TestExecChildHoldsStdout(t *testing.T) {
	p := script(t, t.TempDir(), "daemon", `echo '{"ok":true}'; sleep 3 & exit 0`)
	start := time.Now()
	out, err := Exec(context.Background(), p, nil, nil, nil)
	if err != nil || string(out) != "{\"ok\":true}\n" {
		t.Errorf("out = %q, err = %v", out, err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Exec returned after %v", d)
	}
}

// writeHeld writes an executable and returns it with the writer still open:
// exec(2) of a file open for writing fails with ETXTBSY.
func writeHeld(t *testing.T, body string) (string, *os.File) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "fresh")
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if _, err := f.WriteString("#!/bin/sh\n" + body + "\n"); err != nil {
		t.Fatal(err)
	}
	return p, f
}

// With the writer never closed, every attempt fails with ETXTBSY: Exec gives
// up with code 11. This also shows the condition is provoked reliably.
func TestExecTextBusyGivesUp(t *testing.T) {
	p, _ := writeHeld(t, "echo hi")
	if _, err := execOnce(context.Background(), p, nil, nil, nil); !errors.Is(err, syscall.ETXTBSY) {
		t.Fatalf("could not provoke ETXTBSY: %v", err)
	}
	start := time.Now()
	_, err := Exec(context.Background(), p, nil, nil, nil)
	wantCode(t, err, spec.ErrTryAgainLater, "text file busy")
	// It waited between attempts (20+40+60+80ms) rather than failing at once.
	if d := time.Since(start); d < 150*time.Millisecond {
		t.Errorf("gave up after %v: no retries", d)
	}
	// A context ending during the retries is code 11 too.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	_, err = Exec(ctx, p, nil, nil, nil)
	wantCode(t, err, spec.ErrTryAgainLater)
}

// The writer closes shortly after the first attempt: a retry succeeds.
func TestExecTextBusyRetries(t *testing.T) {
	p, f := writeHeld(t, "echo hi")
	if _, err := execOnce(context.Background(), p, nil, nil, nil); !errors.Is(err, syscall.ETXTBSY) {
		t.Fatalf("could not provoke ETXTBSY: %v", err)
	}
	time.AfterFunc(30*time.Millisecond, func() { f.Close() })
	out, err := Exec(context.Background(), p, nil, nil, nil)
	if err != nil || string(out) != "hi\n" {
		t.Fatalf("out = %q, err = %v", out, err)
	}
}

// A nil environment is an empty one, not ours.
func TestExecNilEnvIsEmpty(t *testing.T) {
	t.Setenv("CNI_COMMAND", "LEAKED")
	p := script(t, t.TempDir(), "env", `echo "cmd=$CNI_COMMAND"`)
	out, err := Exec(context.Background(), p, nil, nil, nil)
	if err != nil || string(out) != "cmd=\n" {
		t.Errorf("out = %q, err = %v", out, err)
	}
}

// Error JSON on stdout is a failure even when the plugin exits 0: a result
// never has a "code", and caching it as an empty success would hide the error.
func TestExecErrorJSONWithExitZero(t *testing.T) {
	p := script(t, t.TempDir(), "liar", `echo '{"cniVersion":"1.0.0","code":7,"msg":"bad config"}'; exit 0`)
	_, err := Exec(context.Background(), p, nil, nil, nil)
	wantCode(t, err, spec.ErrInvalidNetworkConfig, "bad config")
	// "code": 0 is no error (spec.ParseError): the output is returned.
	p = script(t, t.TempDir(), "zero", `echo '{"code":0}'; exit 0`)
	if out, err := Exec(context.Background(), p, nil, nil, nil); err != nil || !strings.Contains(string(out), "code") {
		t.Errorf("code 0: %q %v", out, err)
	}
}

// A plugin flooding stderr before failing: the error keeps a bounded head of
// it (the first lines say what went wrong); the stderr writer gets it all.
func TestExecHugeStderrBounded(t *testing.T) {
	p := script(t, t.TempDir(), "noisy", `{ echo "first line"; head -c 8000000 /dev/zero | tr '\0' x; } >&2; exit 3`)
	var all countWriter
	_, err := Exec(context.Background(), p, nil, nil, &all)
	ce := wantCode(t, err, spec.ErrInternal, "first line", "more bytes")
	if len(ce.Details) > 16<<10 {
		t.Errorf("details hold %d bytes of stderr", len(ce.Details))
	}
	if all.n != 8000000+len("first line\n") {
		t.Errorf("stderr writer got %d bytes", all.n)
	}
}

// The same bound holds for a non-JSON stdout used as the message.
func TestExecHugeStdoutMessageBounded(t *testing.T) {
	p := script(t, t.TempDir(), "chatty", `head -c 3000000 /dev/zero | tr '\0' y; exit 1`)
	_, err := Exec(context.Background(), p, nil, nil, nil)
	if ce := wantCode(t, err, spec.ErrInternal, "more bytes of stdout"); len(ce.Details) > 16<<10 {
		t.Errorf("details hold %d bytes", len(ce.Details))
	}
}

type countWriter struct{ n int }

func (w *countWriter) Write(p []byte) (int, error) { w.n += len(p); return len(p), nil }

// Runner.Chroot runs the plugin with another root: the path is inside it,
// and the plugin sees only that tree (a static busybox "sh" reading its
// script from stdin lists the root).
func TestRunnerChroot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("chroot needs root; run the tests as root")
	}
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "bin"), 0o755)
	bb, err := os.ReadFile("/bin/busybox") // busybox-static, installed by make test-deps
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(root, "bin", "sh"), bb, 0o755)
	os.WriteFile(filepath.Join(root, "marker"), nil, 0o644)
	out, err := Runner{Chroot: root}.Exec(context.Background(), "/bin/sh", []string{"PATH=/bin"}, []byte("echo /*\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(out)); got != "/bin /marker" {
		t.Errorf("the chrooted plugin sees %q, want \"/bin /marker\"", got)
	}
}
