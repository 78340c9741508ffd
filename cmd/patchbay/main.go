// Command patchbay runs CNI network configurations, like the reference
// cnitool and with its environment, plus listing and cache inspection.
package main

import (
	"bytes"
	"context"
	"crypto/sha512"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/patchbay-cni/patchbay/internal/invoke"
	pbrt "github.com/patchbay-cni/patchbay/runtime"
	"github.com/patchbay-cni/patchbay/spec"
)

const usage = `patchbay: run CNI network configurations (cnitool-compatible)

Usage:
  patchbay add    NETWORK NETNS-PATH   attach: ADD through the chain, print the result JSON
  patchbay check  NETWORK NETNS-PATH   CHECK the attachment against the cached ADD result
  patchbay del    NETWORK NETNS-PATH   detach: DEL in reverse order, drop the cache entry
                                       (with the configuration cached at ADD if the
                                       network's file is gone or broken)
  patchbay status NETWORK [NETNS-PATH] STATUS of every plugin (1.1.0 configurations)
  patchbay gc     NETWORK [NETNS-PATH] garbage-collect the network (see below)
  patchbay list                        networks in NETCONFPATH (broken files flagged)
  patchbay cache  [NETWORK]            attachments in the result cache
  patchbay version                     our version and the CNI versions we speak
  patchbay help                        this text

Environment (as cnitool):
  NETCONFPATH      network configuration directory (default /etc/cni/net.d)
  CNI_PATH         plugin directories, ':'-separated (default /opt/cni/bin)
  CNI_IFNAME       interface name in the container (default eth0)
  CNI_ARGS         extra arguments, "K1=V1;K2=V2"
  CAP_ARGS         capability arguments, a JSON object (e.g. {"mac":"0a:58:0a:01:00:05"})
  CNI_CONTAINERID  container ID; default, as cnitool: "cnitool-" followed by the
                   hex of the first 10 bytes of the SHA-512 of the absolute netns path
  CNI_CACHE_DIR    result cache directory (default /var/lib/cni, shared with libcni)
  PATCHBAY_TIMEOUT time limit per plugin execution, a Go duration (default none)

gc: the valid attachments are every cached attachment of NETWORK except those
of the container of NETNS-PATH (all its interfaces): those get a DEL, then
every plugin gets GC (1.1.0). Without NETNS-PATH nothing cached is deleted and
the plugins' GC only reclaims what the cache does not know about. (cnitool gc
instead treats every attachment as stale; pass the netns of each container you
want to collect.)

Errors go to stderr as one line, "error (code N): message", where N
is the CNI error code (spec §5; 999 for failures without a code). Exit status:
0 success, 1 a CNI or runtime error, 2 a usage error.
`

type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(report(err, os.Stderr))
}

// report prints err and returns the exit status.
func report(err error, stderr io.Writer) int {
	if err == nil {
		return 0
	}
	var ue usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(stderr, "patchbay: %s\nRun 'patchbay help' for usage.\n", ue.msg)
		return 2
	}
	ce := spec.AsError(err, spec.ErrInternal)
	fmt.Fprintf(stderr, "error (code %d): %s\n", ce.Code, oneLine(ce.Error()))
	return 1
}

func oneLine(s string) string { return strings.ReplaceAll(strings.TrimSpace(s), "\n", "; ") }

func getenv(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func newCNI(stderr io.Writer) (*pbrt.CNI, error) {
	c := &pbrt.CNI{
		Path:     invoke.SplitPath(getenv("CNI_PATH", "/opt/cni/bin")),
		CacheDir: os.Getenv("CNI_CACHE_DIR"),
		Stderr:   stderr,
	}
	if t := os.Getenv("PATCHBAY_TIMEOUT"); t != "" {
		d, err := time.ParseDuration(t)
		if err != nil || d < 0 {
			return nil, usageError{fmt.Sprintf("PATCHBAY_TIMEOUT=%q is not a duration (e.g. 30s)", t)}
		}
		c.Timeout = d
	}
	return c, nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return usageError{"no command given"}
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	case "version", "--version":
		return cmdVersion(stdout)
	case "list":
		if len(rest) != 0 {
			return usageError{"list takes no arguments"}
		}
		return cmdList(stdout)
	case "cache":
		if len(rest) > 1 {
			return usageError{"usage: patchbay cache [NETWORK]"}
		}
		network := ""
		if len(rest) == 1 {
			network = rest[0]
		}
		return cmdCache(stdout, stderr, network)
	case "add", "check", "del":
		if len(rest) != 2 {
			return usageError{fmt.Sprintf("usage: patchbay %s NETWORK NETNS-PATH", cmd)}
		}
	case "gc", "status":
		if len(rest) < 1 || len(rest) > 2 {
			return usageError{fmt.Sprintf("usage: patchbay %s NETWORK [NETNS-PATH]", cmd)}
		}
	default:
		return usageError{fmt.Sprintf("unknown command %q", cmd)}
	}
	return cmdNetwork(ctx, cmd, rest, stdout, stderr)
}

// attachment builds the runtime configuration from the netns path and the
// cnitool environment.
func attachment(netnsPath string) (*pbrt.RuntimeConf, error) {
	abs, err := filepath.Abs(netnsPath)
	if err != nil {
		return nil, err
	}
	rt := &pbrt.RuntimeConf{NetNS: abs, IfName: getenv("CNI_IFNAME", "eth0"), ContainerID: os.Getenv("CNI_CONTAINERID")}
	if rt.ContainerID == "" {
		rt.ContainerID = containerID(abs)
	}
	if s := os.Getenv("CNI_ARGS"); s != "" {
		if rt.Args, err = spec.ParseCNIArgs(s); err != nil {
			return nil, err
		}
	}
	if s := os.Getenv("CAP_ARGS"); s != "" {
		if rt.CapabilityArgs, err = capArgs(s); err != nil {
			return nil, err
		}
	}
	return rt, nil
}

// capArgs decodes CAP_ARGS, which must be a JSON object: naming what it is
// instead (not Go's "cannot unmarshal ... map[string]interface {}"), and
// refusing null, which would otherwise pass as no capability arguments.
func capArgs(s string) (map[string]any, error) {
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		return nil, spec.Errorf(spec.ErrInvalidEnvironment, "CAP_ARGS is not valid JSON: %v", err)
	}
	m, ok := v.(map[string]any)
	if !ok {
		kind := "null"
		switch v.(type) {
		case []any:
			kind = "an array"
		case string:
			kind = "a string"
		case float64:
			kind = "a number"
		case bool:
			kind = "a boolean"
		}
		return nil, spec.Errorf(spec.ErrInvalidEnvironment, "CAP_ARGS must be a JSON object, got %s: %s (e.g. {\"mac\":\"0a:58:0a:01:00:05\"})", kind, s)
	}
	return m, nil
}

// containerID derives the ID from the absolute netns path as cnitool v1.3.1
// does, so both tools agree on attachments (and share libcni's cache).
func containerID(absNetNS string) string {
	sum := sha512.Sum512([]byte(absNetNS))
	return fmt.Sprintf("cnitool-%x", sum[:10])
}

func cmdNetwork(ctx context.Context, cmd string, args []string, stdout, stderr io.Writer) error {
	c, err := newCNI(stderr)
	if err != nil {
		return err
	}
	var rt *pbrt.RuntimeConf
	if len(args) == 2 {
		if rt, err = attachment(args[1]); err != nil {
			return err
		}
	}
	list, err := pbrt.LoadNetwork(getenv("NETCONFPATH", "/etc/cni/net.d"), args[0])
	if err != nil && cmd == "del" {
		// The file was removed or broke since ADD: tear down with the
		// configuration cached at ADD rather than leak the attachment.
		if cached, cerr := c.GetCachedConfig(args[0], rt); cerr == nil && cached != nil {
			fmt.Fprintf(stderr, "patchbay: warning: %s; deleting with the configuration cached at ADD\n", oneLine(err.Error()))
			list, err = cached, nil
		}
	}
	if err != nil {
		return err
	}
	switch cmd {
	case "add":
		res, err := c.AddNetworkList(ctx, list, rt)
		if err != nil {
			return err
		}
		out, err := res.Encode("")
		if err != nil {
			return err
		}
		return printJSON(stdout, out)
	case "check":
		return c.CheckNetworkList(ctx, list, rt)
	case "del":
		return c.DelNetworkList(ctx, list, rt)
	case "status":
		return c.StatusNetworkList(ctx, list)
	case "gc":
		return gc(ctx, c, list, rt)
	}
	return nil
}

// gc keeps every cached attachment of the network except those of rt's
// container (when a netns was given).
func gc(ctx context.Context, c *pbrt.CNI, list *spec.ConfList, rt *pbrt.RuntimeConf) error {
	// Unreadable cache files are reported by GCNetworkList itself.
	cached, _ := c.GetCachedAttachments(list.Name, "")
	valid := []spec.Attachment{}
	for _, a := range cached {
		if rt == nil || a.ContainerID != rt.ContainerID {
			valid = append(valid, spec.Attachment{ContainerID: a.ContainerID, IfName: a.IfName})
		}
	}
	return c.GCNetworkList(ctx, list, valid)
}

func printJSON(w io.Writer, data []byte) error {
	var buf bytes.Buffer
	if err := json.Indent(&buf, data, "", "    "); err != nil {
		return err
	}
	buf.WriteByte('\n')
	_, err := w.Write(buf.Bytes())
	return err
}

func ourVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}

func cmdVersion(w io.Writer) error {
	_, err := fmt.Fprintf(w, "patchbay %s\nCNI protocol versions: %s\n", ourVersion(), strings.Join(spec.AllVersions, ", "))
	return err
}
