package skel

import (
	"bytes"
	"context"
	"io"
	"os"
	"strings"
	"sync"

	"github.com/patchbay-cni/patchbay/internal/invoke"
	"github.com/patchbay-cni/patchbay/spec"
)

// registry holds plugins linked into this executable. When a delegated type
// resolves in CNI_PATH to this very executable (a multi-call binary reached
// through a link), it runs in-process instead of being exec'd: same input,
// same environment, same result, without a process start.
var (
	regMu    sync.RWMutex
	registry = map[string]Plugin{}
)

// Register makes p available for in-process delegation.
func Register(p Plugin) {
	regMu.Lock()
	defer regMu.Unlock()
	registry[p.Type] = p
}

var selfInfo = sync.OnceValue(func() os.FileInfo {
	exe, err := os.Executable()
	if err != nil {
		return nil
	}
	st, err := os.Stat(exe)
	if err != nil {
		return nil
	}
	return st
})

func inProcess(typ, path string) (Plugin, bool) {
	regMu.RLock()
	p, ok := registry[typ]
	regMu.RUnlock()
	if !ok {
		return Plugin{}, false
	}
	self := selfInfo()
	st, err := os.Stat(path)
	if self == nil || err != nil || !os.SameFile(self, st) {
		return Plugin{}, false
	}
	return p, true
}

// Delegate runs the plugin of type typ (looked up in CNI_PATH) with verb cmd,
// the caller's environment and the given config (normally a.StdinData, the
// complete config, as spec §4 requires). It returns the delegate's stdout.
func Delegate(a *CmdArgs, cmd, typ string, conf []byte) ([]byte, error) {
	path, err := invoke.Find(typ, invoke.SplitPath(a.Path))
	if err != nil {
		return nil, err
	}
	env := a.Env.With("CNI_COMMAND", cmd)
	// CmdArgs built by hand (tests, other callers) may lack these.
	ctx, stderr := a.Ctx, a.Stderr
	if ctx == nil {
		ctx = context.Background()
	}
	if stderr == nil {
		stderr = io.Discard
	}
	if p, ok := inProcess(typ, path); ok {
		var out bytes.Buffer
		if Run(ctx, p, env, bytes.NewReader(conf), &out, stderr) != 0 {
			if e, ok := spec.ParseError(out.Bytes()); ok {
				return nil, named(typ, e)
			}
			return nil, spec.Errorf(spec.ErrInternal, "delegated plugin %s failed: %s", typ, out.String())
		}
		return out.Bytes(), nil
	}
	out, err := invoke.Exec(ctx, path, env.List(), conf, stderr)
	if err != nil {
		return nil, named(typ, err)
	}
	return out, nil
}

// named prefixes a delegate's error message with its type, keeping the
// code: plugins do not name themselves (see the package doc), so whoever
// runs one does, unless the message already does.
func named(typ string, err error) error {
	ce := spec.AsError(err, spec.ErrInternal)
	if strings.Contains(ce.Msg, typ) {
		return ce
	}
	out := *ce
	out.Msg = typ + ": " + ce.Msg
	return &out
}

// DelegateAdd runs ADD on an IPAM (or other delegated) plugin and decodes its result.
func DelegateAdd(a *CmdArgs, typ string) (*spec.Result, error) {
	out, err := Delegate(a, spec.CmdAdd, typ, a.StdinData)
	if err != nil {
		return nil, err
	}
	return spec.ParseResult(out, a.Version)
}

// DelegateVerb runs DEL, CHECK, GC or STATUS on a delegated plugin.
func DelegateVerb(a *CmdArgs, cmd, typ string) error {
	_, err := Delegate(a, cmd, typ, a.StdinData)
	return err
}

// DelegateIPAM is DelegateVerb for the IPAM plugin ipamType of a plugin
// whose "ipam" is optional: none configured ("") is nothing to do.
func DelegateIPAM(a *CmdArgs, cmd, ipamType string) error {
	if ipamType == "" {
		return nil
	}
	return DelegateVerb(a, cmd, ipamType)
}
