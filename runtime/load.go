package runtime

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/patchbay-cni/patchbay/spec"
)

// NetworkFile is one configuration file found in a directory: the network it
// defines, or why it could not be loaded.
type NetworkFile struct {
	Path string
	// List is the loaded network (with plugins aggregated from the sibling
	// directory, see LoadNetwork); nil when Err is set.
	List *spec.ConfList
	Err  error
	// Shadowed is true when an earlier file defines the same network name:
	// LoadNetwork would never return this one.
	Shadowed bool
}

// NotFoundError is returned by LoadNetwork when no file defines the network.
// Broken lists the files that could not be read or parsed: one of them may
// have been meant to define it.
type NotFoundError struct {
	Dir, Name string
	Broken    []NetworkFile
}

func (e *NotFoundError) Error() string {
	msg := fmt.Sprintf("no network %q in %s", e.Name, e.Dir)
	if len(e.Broken) > 0 {
		var parts []string
		for _, b := range e.Broken {
			parts = append(parts, fmt.Sprintf("%s: %v", filepath.Base(b.Path), b.Err))
		}
		msg += fmt.Sprintf(" (%d file(s) could not be loaded: %s)", len(e.Broken), strings.Join(parts, "; "))
	}
	return msg
}

// Unwrap gives the error a CNI code (7, invalid network configuration), so
// spec.AsError reports it like any other configuration problem.
func (e *NotFoundError) Unwrap() error {
	return &spec.Error{Code: spec.ErrInvalidNetworkConfig, Msg: e.Error()}
}

// configFiles returns the configuration files of dir in load order:
// .conflist files sorted by name, then .conf and .json files sorted by name.
func configFiles(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var lists, confs []string
	for _, e := range entries {
		if isDir(dir, e) {
			continue
		}
		switch filepath.Ext(e.Name()) {
		case ".conflist":
			lists = append(lists, filepath.Join(dir, e.Name()))
		case ".conf", ".json":
			confs = append(confs, filepath.Join(dir, e.Name()))
		}
	}
	sort.Strings(lists)
	sort.Strings(confs)
	return append(lists, confs...), nil
}

// isDir reports whether a directory entry is a directory or a symlink to
// one (a mounted ConfigMap, say): neither is a configuration file. A
// dangling symlink is not a directory; reading it reports the problem.
func isDir(dir string, e os.DirEntry) bool {
	if e.IsDir() {
		return true
	}
	if e.Type()&os.ModeSymlink == 0 {
		return false
	}
	st, err := os.Stat(filepath.Join(dir, e.Name()))
	return err == nil && st.IsDir()
}

// loadFile reads and parses one configuration file. Plugins of a .conflist
// are completed from <dir>/<name>/*.conf unless loadOnlyInlinedPlugins is
// set (spec §1). Legacy single-plugin files are not aggregated, as in libcni.
func loadFile(path string) (*spec.ConfList, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, spec.Errorf(spec.ErrIOFailure, "%v", err) // names the file
	}
	if filepath.Ext(path) != ".conflist" {
		return spec.ConfListFromConf(data)
	}
	list, err := spec.ParseConfList(data)
	if err != nil {
		return nil, err
	}
	if !list.LoadOnlyInlinedPlugins {
		extra, err := loadPluginDir(filepath.Join(filepath.Dir(path), list.Name))
		if err != nil {
			return nil, err
		}
		list.Plugins = append(list.Plugins, extra...)
	}
	if len(list.Plugins) == 0 {
		return nil, spec.Errorf(spec.ErrInvalidNetworkConfig, "network %q: no plugins (neither inlined nor in %s)",
			list.Name, filepath.Join(filepath.Dir(path), list.Name))
	}
	return list, nil
}

// loadPluginDir reads the plugin objects in dir/*.conf, sorted by name. A
// missing dir means none; an invalid file fails the whole network, since
// silently dropping one plugin (a firewall, say) would be worse.
func loadPluginDir(dir string) ([]*spec.PluginConf, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, spec.Errorf(spec.ErrIOFailure, "read plugin directory %s: %v", dir, err)
	}
	var out []*spec.PluginConf
	for _, e := range entries { // ReadDir sorts by name
		if filepath.Ext(e.Name()) != ".conf" || isDir(dir, e) {
			continue
		}
		p := filepath.Join(dir, e.Name())
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, spec.Errorf(spec.ErrIOFailure, "%v", err) // names the file
		}
		pc, err := spec.ParsePluginConf(data)
		if err != nil {
			ce := spec.AsError(err, spec.ErrInvalidNetworkConfig)
			return nil, &spec.Error{Code: ce.Code, Msg: fmt.Sprintf("plugin file %s: %s", p, ce.Msg), Details: ce.Details}
		}
		out = append(out, pc)
	}
	return out, nil
}

// ListNetworks loads every configuration file in dir, in LoadNetwork's order.
// The error is only for an unreadable directory; per-file problems are in
// each NetworkFile.
func ListNetworks(dir string) ([]NetworkFile, error) {
	files, err := configFiles(dir)
	if err != nil {
		return nil, spec.Errorf(spec.ErrIOFailure, "read network configuration directory: %v", err)
	}
	seen := map[string]bool{}
	out := make([]NetworkFile, 0, len(files))
	for _, f := range files {
		l, err := loadFile(f)
		nf := NetworkFile{Path: f, List: l, Err: err}
		if l != nil {
			nf.Shadowed = seen[l.Name]
			seen[l.Name] = true
		}
		out = append(out, nf)
	}
	return out, nil
}

// LoadNetwork finds the network called name in dir: .conflist files first,
// then legacy .conf/.json files, each group sorted by file name; the first
// file defining name wins. A broken file is skipped (it cannot hide a valid
// one) and mentioned in the NotFoundError if nothing matches.
func LoadNetwork(dir, name string) (*spec.ConfList, error) {
	files, err := configFiles(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, &NotFoundError{Dir: dir, Name: name}
	}
	if err != nil {
		return nil, spec.Errorf(spec.ErrIOFailure, "read network configuration directory: %v", err)
	}
	nf := &NotFoundError{Dir: dir, Name: name}
	var brokenMatch error
	for _, f := range files {
		l, err := loadFile(f)
		if err != nil {
			// A broken file that still names this network gets a precise
			// error, but only if no later valid file defines the network.
			if brokenMatch == nil && peekName(f) == name {
				ce := spec.AsError(err, spec.ErrInvalidNetworkConfig)
				brokenMatch = &spec.Error{Code: ce.Code, Msg: fmt.Sprintf("%s: %s", f, ce.Msg), Details: ce.Details}
			}
			nf.Broken = append(nf.Broken, NetworkFile{Path: f, Err: err})
			continue
		}
		if l.Name == name {
			return l, nil
		}
	}
	if brokenMatch != nil {
		return nil, brokenMatch
	}
	return nil, nf
}

// peekName returns the "name" of a file that is at least a JSON object.
func peekName(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	var probe struct {
		Name string `json:"name"`
	}
	if json.Unmarshal(data, &probe) != nil {
		return ""
	}
	return probe.Name
}
