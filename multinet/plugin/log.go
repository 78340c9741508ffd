package plugin

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
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

// newLogger logs to LogFile (appended) and, with LogToStderr or no file,
// to stderr (which the runtime usually keeps). The closer closes the file.
func newLogger(c *Config, stderr io.Writer) (*slog.Logger, func()) {
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
