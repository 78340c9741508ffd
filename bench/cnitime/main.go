// Command cnitime times a CNI plugin for `make bench`'s node workload.
// Installed as <dir>/<type> in the node's CNI bin dir, it runs the real
// plugin <dir>/.real/<type> with the same arguments, environment and
// standard streams, and appends one line to the file named by
// CNITIME_LOG (default /var/lib/cni/cnitime.log):
//
//	<type> <CNI_COMMAND> <CNI_CONTAINERID> <CNI_IFNAME> <K8S_POD_NAME> <start unix ns> <duration ns> <exit code>
//
// It reads its whole standard input before starting the clock: a caller
// that starts a plugin early and holds its configuration back (multinet
// does, to overlap the plugin's start with its API reads) is timed from
// the moment the plugin could work, so the wait is never counted as the
// plugin's time. The wrapper's own cost (its start, the extra fork and
// exec) is measured separately by the bench and subtracted per exec.
package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

func main() {
	in, err := io.ReadAll(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "cnitime:", err)
		os.Exit(1)
	}
	name := filepath.Base(os.Args[0])
	real := filepath.Join(filepath.Dir(os.Args[0]), ".real", name)
	// Never run ourselves: a .real/<type> that resolves to this wrapper
	// (an installer copied the wrapper there, or a type link points back
	// at it) would fork without end.
	if sameFile(real, "/proc/self/exe") {
		fmt.Fprintf(os.Stderr, "cnitime: %s is this wrapper, not the plugin: refusing to run it\n", real)
		os.Exit(1)
	}
	start := time.Now()
	cmd := exec.Command(real, os.Args[1:]...)
	cmd.Args[0] = os.Args[0] // multi-call binaries dispatch on the name
	cmd.Stdin, cmd.Stdout, cmd.Stderr = bytes.NewReader(in), os.Stdout, os.Stderr
	err = cmd.Run()
	took := time.Since(start)
	code := 0
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		fmt.Fprintln(os.Stderr, "cnitime:", err)
		code = 127
	}
	log := os.Getenv("CNITIME_LOG")
	if log == "" {
		log = "/var/lib/cni/cnitime.log"
	}
	pod := ""
	for _, kv := range strings.Split(os.Getenv("CNI_ARGS"), ";") {
		if k, v, ok := strings.Cut(kv, "="); ok && k == "K8S_POD_NAME" {
			pod = v
		}
	}
	line := fmt.Sprintf("%s %s %s %s %s %d %d %d\n", name, orDash(os.Getenv("CNI_COMMAND")), orDash(os.Getenv("CNI_CONTAINERID")),
		orDash(os.Getenv("CNI_IFNAME")), orDash(pod), start.UnixNano(), took.Nanoseconds(), code)
	// One write with O_APPEND: lines of concurrent plugins never interleave.
	if f, err := os.OpenFile(log, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644); err == nil {
		f.WriteString(line)
		f.Close()
	}
	os.Exit(code)
}

func sameFile(a, b string) bool {
	sa, err1 := os.Stat(a)
	sb, err2 := os.Stat(b)
	return err1 == nil && err2 == nil && os.SameFile(sa, sb)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
