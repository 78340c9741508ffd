// Package runtime is the library a container runtime embeds to run CNI
// network configurations: it loads networks from a directory, executes the
// plugin chain for ADD, CHECK, DEL, GC and STATUS (spec §3), derives each
// plugin's request configuration, and keeps libcni's on-disk result cache so
// CHECK, DEL and GC know what ADD did.
//
// Plugins run in the network namespace of the calling OS thread: to run them
// in another "host" namespace, call the methods inside netns.Do (the methods
// start no goroutines of their own that exec plugins).
package runtime

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/patchbay-cni/patchbay/internal/invoke"
	"github.com/patchbay-cni/patchbay/spec"
)

// CNI runs network configurations. The zero value works once Path is set;
// a CNI is safe for concurrent use (it holds no mutable state).
type CNI struct {
	// Path lists the directories searched for plugin executables (CNI_PATH).
	Path []string
	// CacheDir holds the result cache; DefaultCacheDir when empty.
	CacheDir string
	// Timeout bounds each plugin execution; zero means no limit beyond ctx.
	Timeout time.Duration
	// Stderr receives the plugins' stderr as it is written; nil keeps it
	// only for error messages.
	Stderr io.Writer
	// Log receives warnings (a corrupt cache file ignored by DEL, ...);
	// slog.Default() when nil.
	Log *slog.Logger
	// Exec runs one plugin (path, environment, stdin); invoke.Exec when
	// nil. A delegating plugin wraps it to hold a plugin it started before
	// deciding whether it may run (multinet, with invoke.ExecHeld).
	Exec func(ctx context.Context, path string, env []string, stdin []byte, stderr io.Writer) ([]byte, error)
}

// RuntimeConf holds the attachment parameters (spec §3 "Attachment Parameters").
type RuntimeConf struct {
	ContainerID string
	NetNS       string
	IfName      string
	// Args become CNI_ARGS ("K1=V1;K2=V2").
	Args [][2]string
	// CapabilityArgs are offered to every plugin; each gets in runtimeConfig
	// only the keys its "capabilities" declares true.
	CapabilityArgs map[string]any
}

func (c *CNI) log() *slog.Logger {
	if c.Log != nil {
		return c.Log
	}
	return slog.Default()
}

// PluginError is a plugin's failure in a chain. It names the network, the
// plugin and the verb, and unwraps to the plugin's *spec.Error so the CNI
// code survives (spec.AsError finds it).
type PluginError struct {
	Network string
	Plugin  string // the plugin's type
	Verb    string
	Err     error
}

func (e *PluginError) Error() string {
	return fmt.Sprintf("network %q: plugin %s (%s): %v", e.Network, e.Plugin, e.Verb, e.Err)
}

func (e *PluginError) Unwrap() error { return e.Err }

// delNothing reports whether a DEL that validate refused is one for an
// interface name ADD would have refused: a valid container ID, an invalid
// name. Such a DEL has nothing to remove and succeeds.
func delNothing(rt *RuntimeConf) bool {
	return rt != nil && rt.IfName != "" && spec.ValidateContainerID(rt.ContainerID) == nil && spec.ValidateInterfaceName(rt.IfName) != nil
}

func validate(rt *RuntimeConf, verb string) error {
	if rt == nil {
		return spec.Errorf(spec.ErrInvalidEnvironment, "%s: missing runtime configuration", verb)
	}
	if err := spec.ValidateContainerID(rt.ContainerID); err != nil {
		return err
	}
	if err := spec.ValidateInterfaceName(rt.IfName); err != nil {
		return err
	}
	if rt.NetNS == "" && verb != spec.CmdDel {
		return spec.Errorf(spec.ErrInvalidEnvironment, "%s: CNI_NETNS (the container's network namespace path) is required", verb)
	}
	for _, kv := range rt.Args {
		if kv[0] == "" || strings.ContainsAny(kv[0], "=;") || strings.Contains(kv[1], ";") {
			return spec.Errorf(spec.ErrInvalidEnvironment, "CNI_ARGS: invalid pair %q=%q: keys must be non-empty without '=' or ';', values without ';'", kv[0], kv[1])
		}
	}
	return nil
}

func checkList(list *spec.ConfList) error {
	if list == nil {
		return spec.Errorf(spec.ErrInvalidNetworkConfig, "missing network configuration")
	}
	if err := spec.ValidateNetworkName(list.Name); err != nil {
		return err
	}
	if len(list.Plugins) == 0 {
		return spec.Errorf(spec.ErrInvalidNetworkConfig, "network %q has no plugins", list.Name)
	}
	if list.Version() == "" {
		return spec.Errorf(spec.ErrIncompatibleVersion, "network %q: no supported cniVersion (supported: %v)", list.Name, spec.AllVersions)
	}
	return nil
}

// RuntimeConfigFor keeps the capability args the plugin declares true: the
// runtimeConfig a runtime must pass it (spec §3 "Deriving runtimeConfig").
func RuntimeConfigFor(p *spec.PluginConf, capArgs map[string]any) map[string]any {
	rc := map[string]any{}
	for name, on := range p.Network.Capabilities {
		if v, ok := capArgs[name]; ok && on {
			rc[name] = v
		}
	}
	return rc
}

// cniEnv lists the variables the runtime owns; inherited values are dropped
// so a runtime started with, say, CNI_CONTAINERID set cannot leak it into GC.
var cniEnv = []string{"CNI_COMMAND", "CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME", "CNI_ARGS", "CNI_PATH"}

func (c *CNI) env(verb string, rt *RuntimeConf) []string {
	base := os.Environ()
	env := make([]string, 0, len(base)+len(cniEnv))
	for _, kv := range base {
		if k, _, _ := strings.Cut(kv, "="); !slices.Contains(cniEnv, k) {
			env = append(env, kv)
		}
	}
	env = append(env, "CNI_COMMAND="+verb, "CNI_PATH="+strings.Join(c.Path, string(os.PathListSeparator)))
	if rt != nil { // attachment verbs; GC and STATUS have no attachment
		env = append(env, "CNI_CONTAINERID="+rt.ContainerID, "CNI_NETNS="+rt.NetNS,
			"CNI_IFNAME="+rt.IfName, "CNI_ARGS="+spec.FormatCNIArgs(rt.Args))
	}
	return env
}

// run builds the request for one plugin and executes it; errors are
// *PluginError.
func (c *CNI) run(ctx context.Context, list *spec.ConfList, p *spec.PluginConf, verb string, rt *RuntimeConf, prev *spec.Result, extra map[string]any) ([]byte, error) {
	wrap := func(err error) error {
		return &PluginError{Network: list.Name, Plugin: p.Network.Type, Verb: verb, Err: err}
	}
	path, err := invoke.Find(p.Network.Type, c.Path)
	if err != nil {
		return nil, wrap(err)
	}
	var rc map[string]any
	if rt != nil {
		rc = RuntimeConfigFor(p, rt.CapabilityArgs)
	}
	req, err := spec.BuildRequest(p, list.Name, list.Version(), prev, rc, extra)
	if err != nil {
		return nil, wrap(err)
	}
	if c.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.Timeout)
		defer cancel()
	}
	exec := c.Exec
	if exec == nil {
		exec = invoke.Exec
	}
	out, err := exec(ctx, path, c.env(verb, rt), req, c.Stderr)
	if err != nil {
		return nil, wrap(err)
	}
	return out, nil
}

// AddNetworkList runs ADD through the chain, each plugin getting the previous
// one's result as prevResult, caches the final result and returns it (in the
// list's version). On failure nothing is cached; the caller should still
// run DelNetworkList to undo what the earlier plugins did (spec §3).
func (c *CNI) AddNetworkList(ctx context.Context, list *spec.ConfList, rt *RuntimeConf) (*spec.Result, error) {
	if err := checkList(list); err != nil {
		return nil, err
	}
	if err := validate(rt, spec.CmdAdd); err != nil {
		return nil, err
	}
	version := list.Version()
	var prev *spec.Result
	for _, p := range list.Plugins {
		out, err := c.run(ctx, list, p, spec.CmdAdd, rt, prev, nil)
		if err != nil {
			return nil, err
		}
		res, err := spec.ParseResult(out, version)
		if err != nil {
			return nil, &PluginError{Network: list.Name, Plugin: p.Network.Type, Verb: spec.CmdAdd,
				Err: fmt.Errorf("invalid result: %w", err)}
		}
		prev = res
	}
	prev.CNIVersion = version
	if err := c.writeEntry(list, rt, prev); err != nil {
		return nil, spec.Errorf(spec.ErrIOFailure, "network %q: failed to cache the ADD result: %v", list.Name, err)
	}
	return prev, nil
}

// CheckNetworkList runs CHECK through the chain with the cached ADD result as
// prevResult. With disableCheck it succeeds without running anything; before
// 0.4.0 CHECK does not exist (code 1); without a cached result the
// attachment is unknown (code 3).
func (c *CNI) CheckNetworkList(ctx context.Context, list *spec.ConfList, rt *RuntimeConf) error {
	if err := checkList(list); err != nil {
		return err
	}
	if list.DisableCheck {
		return nil
	}
	version := list.Version()
	if !spec.VerbSupported(version, spec.CmdCheck) {
		return spec.Errorf(spec.ErrIncompatibleVersion, "network %q: CHECK needs cniVersion 0.4.0 or later, the configuration uses %s", list.Name, version)
	}
	if err := validate(rt, spec.CmdCheck); err != nil {
		return err
	}
	cached, err := c.GetCachedResult(list, rt)
	if err != nil {
		return spec.Errorf(spec.ErrIOFailure, "network %q: cannot CHECK: %v", list.Name, err)
	}
	if cached == nil {
		return spec.Errorf(spec.ErrUnknownContainer, "network %q: cannot CHECK container %q interface %q: no cached ADD result (never added, or already deleted)",
			list.Name, rt.ContainerID, rt.IfName)
	}
	for _, p := range list.Plugins {
		if _, err := c.run(ctx, list, p, spec.CmdCheck, rt, cached, nil); err != nil {
			return err
		}
	}
	return nil
}

// DelNetworkList runs DEL through the chain in reverse order with the cached
// ADD result as prevResult, then removes the cache entry. Without a cache
// entry (never added, already deleted, or a corrupt file, which is logged)
// the plugins still run, without prevResult. Configurations older than
// 0.4.0 never get a prevResult on DEL: plugins of that era do not expect it
// (libcni behaves the same).
func (c *CNI) DelNetworkList(ctx context.Context, list *spec.ConfList, rt *RuntimeConf) error {
	if err := checkList(list); err != nil {
		return err
	}
	if err := validate(rt, spec.CmdDel); err != nil {
		if delNothing(rt) {
			// ADD refuses this interface name, so nothing exists under it
			// (in the kernel or the cache): refusing the DEL would only
			// leave the caller retrying forever.
			c.log().Info("DEL: nothing to delete: ADD never accepts this interface name", "network", list.Name, "container", rt.ContainerID, "ifname", rt.IfName)
			return nil
		}
		return err
	}
	var prev *spec.Result
	if spec.GreaterOrEqual(list.Version(), spec.V040) {
		r, err := c.GetCachedResult(list, rt)
		if err != nil {
			c.log().Warn("DEL continues without prevResult", "network", list.Name, "container", rt.ContainerID, "ifname", rt.IfName, "error", err)
		}
		prev = r
	}
	for i := len(list.Plugins) - 1; i >= 0; i-- {
		if _, err := c.run(ctx, list, list.Plugins[i], spec.CmdDel, rt, prev, nil); err != nil {
			return err
		}
	}
	if err := c.removeEntry(list.Name, rt.ContainerID, rt.IfName); err != nil {
		return spec.Errorf(spec.ErrIOFailure, "network %q: DEL succeeded but the cache entry could not be removed: %v", list.Name, err)
	}
	return nil
}
