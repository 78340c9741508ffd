package runtime

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/patchbay-cni/patchbay/internal/atomicfile"
	"github.com/patchbay-cni/patchbay/spec"
)

// DefaultCacheDir is libcni's default, so a node can switch runtimes
// (or use cnitool and patchbay side by side) and keep its attachments.
const DefaultCacheDir = "/var/lib/cni"

// cacheKind marks libcni's cache format version 1.
const cacheKind = "cniCacheV1"

// cacheEntry is libcni's on-disk cache record. Config is the network
// configuration as JSON bytes (base64 on disk, as encoding/json does for
// []byte), Result the final ADD result in the list's version.
type cacheEntry struct {
	Kind           string          `json:"kind"`
	ContainerID    string          `json:"containerId"`
	Config         []byte          `json:"config"`
	IfName         string          `json:"ifName"`
	NetworkName    string          `json:"networkName"`
	NetNS          string          `json:"netns,omitempty"`
	CNIArgs        [][2]string     `json:"cniArgs,omitempty"`
	CapabilityArgs map[string]any  `json:"capabilityArgs,omitempty"`
	Result         json.RawMessage `json:"result,omitempty"`
}

// CachedAttachment is one attachment recorded in the cache by a successful ADD.
type CachedAttachment struct {
	File           string
	Network        string
	ContainerID    string
	IfName         string
	NetNS          string
	CNIArgs        [][2]string
	CapabilityArgs map[string]any
	// Config is the network configuration used for the ADD (a conflist).
	Config []byte
	// Result is the final ADD result; nil if the entry has none.
	Result *spec.Result
}

// CacheError reports a cache file that exists but cannot be used.
type CacheError struct {
	File string
	Err  error
}

func (e *CacheError) Error() string { return fmt.Sprintf("corrupt cache file %s: %v", e.File, e.Err) }
func (e *CacheError) Unwrap() error { return e.Err }

func (c *CNI) cacheDir() string {
	if c.CacheDir != "" {
		return c.CacheDir
	}
	return DefaultCacheDir
}

func (c *CNI) resultsDir() string { return filepath.Join(c.cacheDir(), "results") }

// cacheFile is libcni's path, <cacheDir>/results/<net>-<containerID>-<ifName>,
// whenever that name fits in a path component, so libcni runtimes (cnitool)
// and we read each other's entries. A longer one (the spec bounds neither
// container IDs nor network names; libcni fails to write those) gets a
// bounded, collision-free name (atomicfile.BoundedName: "_" and a hash),
// which libcni's own listing of the directory still reads.
func (c *CNI) cacheFile(network, containerID, ifName string) string {
	return filepath.Join(c.resultsDir(), atomicfile.BoundedName(network+"-"+containerID+"-"+ifName, "", network, containerID, ifName))
}

// readEntry decodes one cache file. It returns (nil, nil) when the file does
// not exist and a *CacheError when it exists but is unusable.
func readEntry(file string) (*CachedAttachment, error) {
	data, err := os.ReadFile(file)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, &CacheError{File: file, Err: err}
	}
	var e cacheEntry
	if err := json.Unmarshal(data, &e); err != nil {
		return nil, &CacheError{File: file, Err: fmt.Errorf("invalid JSON: %w", err)}
	}
	if e.Kind != cacheKind {
		return nil, &CacheError{File: file, Err: fmt.Errorf("kind is %q, want %q", e.Kind, cacheKind)}
	}
	if e.NetworkName == "" || e.ContainerID == "" || e.IfName == "" {
		return nil, &CacheError{File: file, Err: errors.New("networkName, containerId or ifName is missing")}
	}
	a := &CachedAttachment{
		File: file, Network: e.NetworkName, ContainerID: e.ContainerID, IfName: e.IfName,
		NetNS: e.NetNS, CNIArgs: e.CNIArgs, CapabilityArgs: e.CapabilityArgs, Config: e.Config,
	}
	if len(e.Result) > 0 && string(e.Result) != "null" {
		// The result carries its own cniVersion; fall back to the config's.
		fallback := ""
		if l, err := spec.ParseAny(e.Config); err == nil {
			fallback = l.Version()
		}
		r, err := spec.ParseResult(e.Result, fallback)
		if err != nil {
			return nil, &CacheError{File: file, Err: fmt.Errorf("result: %w", err)}
		}
		a.Result = r
	}
	return a, nil
}

// lookup reads the cache entry of one attachment; see readEntry. An entry
// whose fields name another attachment (file names can collide when names
// contain '-') counts as unusable.
func (c *CNI) lookup(network, containerID, ifName string) (*CachedAttachment, error) {
	file := c.cacheFile(network, containerID, ifName)
	a, err := readEntry(file)
	if a != nil && (a.Network != network || a.ContainerID != containerID || a.IfName != ifName) {
		return nil, &CacheError{File: file, Err: fmt.Errorf("it records attachment (%s, %s) of network %q", a.ContainerID, a.IfName, a.Network)}
	}
	return a, err
}

// writeEntry stores an ADD's outcome atomically (atomicfile.Write: a kill
// leaves the old entry or the new one, and at most a temporary that DEL
// removes; no fsync, like libcni, which does not fsync either). Dirs are
// 0700 and files 0600 (results may hold addresses of other tenants).
func (c *CNI) writeEntry(list *spec.ConfList, rt *RuntimeConf, result *spec.Result) error {
	res, err := result.Encode(list.Version())
	if err != nil {
		return err
	}
	cfg, err := selfContained(list)
	if err != nil {
		return err
	}
	data, err := json.Marshal(&cacheEntry{
		Kind: cacheKind, ContainerID: rt.ContainerID, Config: cfg, IfName: rt.IfName,
		NetworkName: list.Name, NetNS: rt.NetNS, CNIArgs: rt.Args, CapabilityArgs: rt.CapabilityArgs,
		Result: res,
	})
	if err != nil {
		return err
	}
	dir := c.resultsDir()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return atomicfile.Write(c.cacheFile(list.Name, rt.ContainerID, rt.IfName), data, 0o600, false)
}

// removeEntry deletes an attachment's cache file and the temporary a
// killed writeEntry may have left; missing ones are fine.
func (c *CNI) removeEntry(network, containerID, ifName string) error {
	return atomicfile.Remove(c.cacheFile(network, containerID, ifName))
}

// selfContained returns the list as conflist bytes that load on their own
// and say so (loadOnlyInlinedPlugins: true, which cachedList relies on): the
// original file when it already is such a conflist, or else a synthesized
// conflist keeping the file's other keys, with every plugin inlined (libcni
// also caches a synthesized list for a legacy .conf).
func selfContained(list *spec.ConfList) ([]byte, error) {
	if !list.Legacy && len(list.Bytes) > 0 {
		if orig, err := spec.ParseConfList(list.Bytes); err == nil && orig.LoadOnlyInlinedPlugins && len(orig.Plugins) == len(list.Plugins) {
			return list.Bytes, nil
		}
	}
	m := map[string]json.RawMessage{}
	if !list.Legacy && len(list.Bytes) > 0 {
		if err := json.Unmarshal(list.Bytes, &m); err != nil {
			m = map[string]json.RawMessage{}
		}
	}
	set := func(k string, v any) {
		b, _ := json.Marshal(v)
		m[k] = b
	}
	set("name", list.Name)
	if list.CNIVersion != "" {
		set("cniVersion", list.CNIVersion)
	}
	plugins := make([]json.RawMessage, 0, len(list.Plugins))
	for _, p := range list.Plugins {
		plugins = append(plugins, json.RawMessage(p.Bytes))
	}
	set("plugins", plugins)
	set("loadOnlyInlinedPlugins", true) // every plugin is inlined now
	return json.Marshal(m)
}

// GetCachedConfig returns the network configuration an attachment was added
// with, for tearing it down after its file was removed or broke (as CRI-O
// does); nil, nil when nothing is cached. A libcni-written entry holds the
// file's bytes only, without plugins aggregated from <dir>/<network>/.
func (c *CNI) GetCachedConfig(network string, rt *RuntimeConf) (*spec.ConfList, error) {
	if err := spec.ValidateNetworkName(network); err != nil {
		return nil, err
	}
	if err := validate(rt, spec.CmdDel); err != nil {
		return nil, err
	}
	a, err := c.lookup(network, rt.ContainerID, rt.IfName)
	if err != nil || a == nil || len(a.Config) == 0 {
		return nil, err
	}
	l, err := spec.ParseAny(a.Config)
	if err != nil {
		return nil, &CacheError{File: a.File, Err: fmt.Errorf("config: %w", err)}
	}
	if l.Name != network || len(l.Plugins) == 0 {
		return nil, &CacheError{File: a.File, Err: fmt.Errorf("config is of network %q with %d plugin(s)", l.Name, len(l.Plugins))}
	}
	return l, nil
}

// UpdateCachedResult replaces the result of an attachment's cache entry,
// keeping what ADD recorded with it (config, netns, args, capability args).
// It is for a delegating plugin that changes an attachment after its chain
// ran (multinet moving the default route), so CHECK and DEL see the change.
// The entry must exist.
func (c *CNI) UpdateCachedResult(list *spec.ConfList, rt *RuntimeConf, result *spec.Result) error {
	a, err := c.lookup(list.Name, rt.ContainerID, rt.IfName)
	if err != nil {
		return err
	}
	if a == nil {
		return spec.Errorf(spec.ErrUnknownContainer, "network %q: no cached attachment for container %q interface %q", list.Name, rt.ContainerID, rt.IfName)
	}
	return c.writeEntry(list, &RuntimeConf{ContainerID: a.ContainerID, NetNS: a.NetNS, IfName: a.IfName,
		Args: a.CNIArgs, CapabilityArgs: a.CapabilityArgs}, result)
}

// GetCachedResult returns the final ADD result cached for the attachment, in
// the list's version; nil, nil when nothing is cached; a *CacheError when the
// cache file is corrupt.
func (c *CNI) GetCachedResult(list *spec.ConfList, rt *RuntimeConf) (*spec.Result, error) {
	a, err := c.lookup(list.Name, rt.ContainerID, rt.IfName)
	if err != nil || a == nil || a.Result == nil {
		return nil, err
	}
	r := a.Result.Clone()
	r.CNIVersion = list.Version()
	return r, nil
}

// GetCachedAttachments lists the attachments in the cache, sorted by file
// name, optionally only those of one network and/or container ("" = any).
// Unusable files are skipped and reported together in the error (a
// *CacheError each, joined); the usable attachments are returned anyway.
func (c *CNI) GetCachedAttachments(network, containerID string) ([]*CachedAttachment, error) {
	entries, err := os.ReadDir(c.resultsDir())
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		// Dot files are temporaries of an interrupted write (GC removes them).
		if !e.IsDir() && !strings.HasPrefix(e.Name(), ".") {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	var out []*CachedAttachment
	var errs []error
	for _, n := range names {
		a, err := readEntry(filepath.Join(c.resultsDir(), n))
		if err != nil {
			// A broken file can only be attributed by its name's prefix.
			if network == "" || strings.HasPrefix(n, network+"-") {
				errs = append(errs, err)
			}
			continue
		}
		if a == nil || (network != "" && a.Network != network) || (containerID != "" && a.ContainerID != containerID) {
			continue
		}
		out = append(out, a)
	}
	return out, errors.Join(errs...)
}
