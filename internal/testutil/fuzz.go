package testutil

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/patchbay-cni/patchbay/skel"
	"github.com/patchbay-cni/patchbay/spec"
)

// FuzzConfig is a plugin's configuration fuzzer: seeds are (config,
// CNI_ARGS) pairs; each input goes through skel's parsing (FuzzArgs), then
// load, the plugin's own validation; a refusal must pass ConfigError, and
// what load accepts goes to check (nil: nothing more to check).
func FuzzConfig[T any](f *testing.F, p skel.Plugin, seeds [][2]string, load func(*skel.CmdArgs) (T, error), check func(*testing.T, T)) {
	for _, s := range seeds {
		f.Add(uint8(0), []byte(s[0]), s[1])
	}
	f.Fuzz(func(t *testing.T, verb uint8, conf []byte, cniArgs string) {
		a := FuzzArgs(t, p, verb, conf, cniArgs)
		if a == nil || load == nil {
			return
		}
		c, err := load(a)
		ConfigError(t, p.Type, err)
		if err == nil && check != nil {
			check(t, c)
		}
	})
}

// FuzzArgs builds what a plugin's verb receives for a fuzzed config and
// CNI_ARGS (verb picks ADD, CHECK or DEL), through skel exactly as a real
// invocation: nil when skel itself refuses the input, after checking that
// refusal with ConfigError.
func FuzzArgs(t *testing.T, p skel.Plugin, verb uint8, conf []byte, cniArgs string) *skel.CmdArgs {
	t.Helper()
	cmd := []string{spec.CmdAdd, spec.CmdCheck, spec.CmdDel}[int(verb)%3]
	env := skel.Env{"CNI_COMMAND": cmd, "CNI_CONTAINERID": "fuzz1", "CNI_NETNS": "/run/netns/fuzz-none",
		"CNI_IFNAME": "eth0", "CNI_PATH": "/nonexistent", "CNI_ARGS": cniArgs}
	a, err := skel.NewCmdArgs(p, env, conf)
	if err != nil {
		ConfigError(t, p.Type, err)
		return nil
	}
	return a
}

// configCodes are the codes a refused configuration may get.
var configCodes = []uint{spec.ErrIncompatibleVersion, spec.ErrUnsupportedField, spec.ErrInvalidEnvironment,
	spec.ErrDecodingFailure, spec.ErrInvalidNetworkConfig}

// ConfigError fails unless err is what a refused configuration must be: a
// CNI error with a configuration code (1, 2, 4, 6 or 7) and a message that
// does not start with the plugin's own name (skel's message rule).
func ConfigError(t *testing.T, plugin string, err error) {
	t.Helper()
	if err == nil {
		return
	}
	var ce *spec.Error
	if !errors.As(err, &ce) {
		t.Fatalf("error without a CNI code: %T %v", err, err)
	}
	if !slices.Contains(configCodes, ce.Code) {
		t.Fatalf("a configuration was refused with code %d (want 1, 2, 4, 6 or 7): %v", ce.Code, err)
	}
	if ce.Msg == "" {
		t.Fatalf("empty message for code %d", ce.Code)
	}
	if strings.HasPrefix(ce.Msg, plugin+":") || strings.HasPrefix(ce.Msg, plugin+" ") {
		t.Fatalf("message repeats the plugin's name: %q", ce.Msg)
	}
}
