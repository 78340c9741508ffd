package plugin

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/patchbay-cni/patchbay/spec"
)

// parseLevel maps Multus's level names (and slog's) to slog levels.
func parseLevel(s string) (slog.Level, error) {
	switch strings.ToLower(s) {
	case "", "warn", "warning":
		return slog.LevelWarn, nil
	case "debug":
		return slog.LevelDebug, nil
	case "verbose", "info":
		return slog.LevelInfo, nil
	case "error", "panic":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("unknown level (debug, verbose, warn, error, panic)")
}

// NewLogger logs to LogFile (appended) and, with LogToStderr or no file,
// to stderr (which the runtime usually keeps). The closer closes the file.
func NewLogger(c *Config, stderr io.Writer) (*slog.Logger, func()) {
	level, _ := parseLevel(c.LogLevel)
	var w io.Writer = stderr
	closer := func() {}
	if c.LogFile != "" {
		f, err := os.OpenFile(c.LogFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
		if err == nil {
			closer = func() { f.Close() }
			w = f
			if c.LogToStderr {
				w = io.MultiWriter(f, stderr)
			}
		} else {
			fmt.Fprintf(stderr, "multinet: cannot open logFile %s: %v\n", c.LogFile, err)
		}
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level})).With("plugin", "multinet"), closer
}

// verbSummary is what a verb's log line reports beyond the pod: the
// attachments it worked on with their addresses where known, and extra
// key/value pairs (GC's deleted containers, STATUS's networks, ...).
type verbSummary struct {
	atts    []*Attachment
	results []*spec.Result // parallel to atts; shorter, or nil entries, where unknown
	attrs   []any
}

// logVerb writes the verb's one line: at verbose (info) level when it
// succeeded, at error level with the error when it failed. Pod, container,
// every attachment as "<network>@<interface>=<addresses>", and the time
// since the process started (what the runtime waited for, less the exec).
func (inv *invocation) logVerb(verb string, err error) {
	level, msg := slog.LevelInfo, verb
	if err != nil {
		level, msg = slog.LevelError, verb+" failed"
	}
	ctx := context.Background()
	if !inv.log.Enabled(ctx, level) {
		return
	}
	var attrs []any
	if verb != spec.CmdGC && verb != spec.CmdStatus {
		if inv.pod.Namespace != "" || inv.pod.Name != "" {
			attrs = append(attrs, "pod", inv.pod.ref())
		}
		attrs = append(attrs, "container", inv.args.ContainerID)
	}
	if s := inv.summary; s.atts != nil || verb == spec.CmdAdd || verb == spec.CmdDel || verb == spec.CmdCheck {
		attrs = append(attrs, "attachments", formatAttachments(s.atts, s.results))
	}
	attrs = append(attrs, inv.summary.attrs...)
	attrs = append(attrs, "took", time.Since(inv.start).Round(10*time.Microsecond).String())
	if err != nil {
		attrs = append(attrs, "error", spec.AsError(err, spec.ErrInternal).Msg)
	}
	inv.log.Log(ctx, level, msg, attrs...)
}

// formatAttachments renders attachments as "ns/name@ifname=addr,addr ..."
// (the annotation's "@" form, so a line reads like a selection).
func formatAttachments(atts []*Attachment, results []*spec.Result) string {
	var b strings.Builder
	for i, a := range atts {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(a.Name + "@" + a.IfName)
		if i >= len(results) || results[i] == nil {
			continue
		}
		sep := "="
		for _, ip := range results[i].IPs {
			if ip != nil && ip.Address.IsValid() {
				b.WriteString(sep + ip.Address.String())
				sep = ","
			}
		}
	}
	return b.String()
}
