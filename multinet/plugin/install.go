package plugin

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/patchbay-cni/patchbay/internal/atomicfile"
	"github.com/patchbay-cni/patchbay/spec"
)

// Install is the readiness method of §6.1/§6.1.1: it waits until the
// cluster network is ready — its configuration resolves from disk (when
// clusterNetwork is a path or a confDir name) and the readiness indicator
// file exists (when configured) — and only then writes multinet's
// configuration (the file src, a .conf or .conflist holding a "multinet"
// plugin) atomically into destDir, the directory kubelet/the CRI runtime
// reads. It fails after timeout (0: wait forever) without writing anything.
func Install(ctx context.Context, src, destDir string, timeout time.Duration) (string, error) {
	data, err := os.ReadFile(src)
	if err != nil {
		return "", err
	}
	l, err := spec.ParseAny(data)
	if err != nil {
		return "", fmt.Errorf("%s: %w", src, err)
	}
	var cfg *Config
	for _, p := range l.Plugins {
		if p.Network.Type == "multinet" {
			if cfg, err = ParseConfig(p.Bytes); err != nil {
				return "", fmt.Errorf("%s: %w", src, err)
			}
		}
	}
	if cfg == nil {
		return "", fmt.Errorf("%s: no plugin of type \"multinet\"", src)
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	for {
		why := notReady(cfg)
		if why == "" {
			break
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("the cluster network is not ready after %v (%s); %s not written", timeout, why, src)
		case <-time.After(200 * time.Millisecond):
		}
	}
	dest := filepath.Join(destDir, filepath.Base(src))
	if err := writeAtomic(dest, data); err != nil {
		return "", err
	}
	return dest, nil
}

// notReady says why the cluster network is not ready, or "".
func notReady(cfg *Config) string {
	if f := cfg.ReadinessIndicatorFile; f != "" {
		if _, err := os.Stat(f); err != nil {
			return "readiness indicator file: " + err.Error()
		}
	}
	if _, onDisk, err := clusterFromDisk(cfg); onDisk && err != nil {
		return "clusterNetwork: " + err.Error()
	}
	return ""
}

func writeAtomic(dest string, data []byte) error {
	if !json.Valid(data) {
		return fmt.Errorf("refusing to write invalid JSON to %s", dest)
	}
	return atomicfile.Write(dest, data, 0o644, true)
}
