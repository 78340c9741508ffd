package skel

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/patchbay-cni/patchbay/spec"
)

// selfPlugin is registered for in-process delegation. The test binary also
// acts as it when run with SKEL_TEST_SELF_PLUGIN=1, so an exec of the test
// binary (the fallback path) behaves like the plugin.
func selfPlugin() Plugin {
	rec := func(a *CmdArgs) error {
		fmt.Fprintln(a.Stderr, "selfipam running")
		selfMu.Lock()
		selfCalls = append(selfCalls, received{Env: a.Env, Stdin: string(a.StdinData)})
		selfMu.Unlock()
		var c struct {
			FailCode uint `json:"failCode"`
		}
		if err := a.DecodeConf(&c); err != nil {
			return err
		}
		if c.FailCode != 0 {
			return spec.NewError(c.FailCode, "self asked to fail", "")
		}
		return nil
	}
	return Plugin{
		Type: "selfipam",
		Add: func(a *CmdArgs) (*spec.Result, error) {
			if err := rec(a); err != nil {
				return nil, err
			}
			return &spec.Result{IPs: []*spec.IPConfig{{Address: netip.MustParsePrefix("10.8.0.2/24")}}}, nil
		},
		Del: rec,
	}
}

type received struct {
	Env   Env
	Stdin string
}

var (
	selfMu    sync.Mutex
	selfCalls []received
)

func TestMain(m *testing.M) {
	if os.Getenv("SKEL_TEST_SELF_PLUGIN") == "1" {
		Main(selfPlugin())
	}
	Register(selfPlugin())
	// Registered but never this executable: delegation must exec it.
	Register(Plugin{Type: "recorder", Add: func(*CmdArgs) (*spec.Result, error) {
		panic("recorder ran in-process although CNI_PATH holds a different binary")
	}})
	os.Exit(m.Run())
}

// buildRecorder builds testdata/recorder into dir.
func buildRecorder(t *testing.T, dir string) {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the delegation test builds a plugin and needs the go tool: %v", err)
	}
	cmd := exec.Command(goBin, "build", "-o", filepath.Join(dir, "recorder"), "./testdata/recorder")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
}

// outer is a plugin that delegates ADD to its ipam type, and on a config
// with "cleanup" also runs DEL on it (as a plugin does after a failure).
func outer() Plugin {
	return Plugin{Type: "outer", Add: func(a *CmdArgs) (*spec.Result, error) {
		var c struct {
			Cleanup bool `json:"cleanup"`
		}
		if err := a.DecodeConf(&c); err != nil {
			return nil, err
		}
		if c.Cleanup {
			if err := DelegateVerb(a, spec.CmdDel, a.Conf.IPAM.Type); err != nil {
				return nil, err
			}
			return &spec.Result{}, nil
		}
		return DelegateAdd(a, a.Conf.IPAM.Type)
	}}
}

func envOf(list []string) Env { return EnvFromList(list) }

// sameEnv compares a delegate's environment with the caller's, plus the
// attachment lock the caller holds for it.
func sameEnv(t *testing.T, got, want Env) {
	t.Helper()
	want = want.With(lockEnv, lockPath("net", want["CNI_CONTAINERID"], want["CNI_IFNAME"]))
	gk, wk := slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want))
	if !slices.Equal(gk, wk) {
		t.Errorf("delegate env keys %v, want %v", gk, wk)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("delegate env %s=%q, want %q", k, got[k], v)
		}
	}
}

func TestDelegateExec(t *testing.T) {
	dir := t.TempDir()
	buildRecorder(t, dir)
	recFile := filepath.Join(t.TempDir(), "rec.json")
	readRec := func() received {
		t.Helper()
		b, err := os.ReadFile(recFile)
		if err != nil {
			t.Fatalf("delegate did not record: %v", err)
		}
		os.Remove(recFile)
		var r struct {
			Env   []string `json:"env"`
			Stdin string   `json:"stdin"`
		}
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatal(err)
		}
		return received{envOf(r.Env), r.Stdin}
	}
	e := env("ADD", "CNI_PATH", t.TempDir()+":"+dir, "RECORDER_OUT", recFile, "CNI_ARGS", "K8S_POD_NAME=web-0", "EXTRA", "kept")

	t.Run("ADD", func(t *testing.T) {
		conf := `{"cniVersion":"1.0.0","name":"net","type":"outer","ipam":{"type":"recorder","subnet":"10.9.0.0/24"}}`
		o := runPlugin(t, outer(), e, conf)
		want := `{"cniVersion":"1.0.0","ips":[{"address":"10.9.0.2/24","gateway":"10.9.0.1"}]}` + "\n"
		if o.code != 0 || o.stdout != want {
			t.Fatalf("got %d %q, want %q (stderr %s)", o.code, o.stdout, want, o.stderr)
		}
		r := readRec()
		sameEnv(t, r.Env, e)
		if r.Stdin != conf {
			t.Errorf("delegate stdin %q, want %q", r.Stdin, conf)
		}
	})
	t.Run("CNI_COMMAND replaced", func(t *testing.T) {
		conf := `{"cniVersion":"0.4.0","name":"net","ipam":{"type":"recorder"},"cleanup":true}`
		if o := runPlugin(t, outer(), e, conf); o.code != 0 {
			t.Fatalf("%+v", o)
		}
		r := readRec()
		sameEnv(t, r.Env, e.With("CNI_COMMAND", "DEL"))
		if r.Stdin != conf {
			t.Errorf("delegate stdin %q", r.Stdin)
		}
	})
	t.Run("delegate error keeps its code", func(t *testing.T) {
		conf := `{"cniVersion":"1.0.0","name":"net","ipam":{"type":"recorder"},"failCode":117}`
		o := runPlugin(t, outer(), e, conf)
		wantError(t, o, 117, "1.0.0", "recorder asked to fail", "failCode in config")
		readRec()
	})
	t.Run("delegate config error", func(t *testing.T) {
		// The delegate's own validation (CHECK is not a 0.3.1 verb) comes back as is.
		conf := `{"cniVersion":"0.3.1","name":"net","ipam":{"type":"recorder"}}`
		o := runPlugin(t, Plugin{Type: "x", Add: func(a *CmdArgs) (*spec.Result, error) {
			return nil, DelegateVerb(a, spec.CmdCheck, "recorder")
		}}, e, conf)
		wantError(t, o, 1, "0.3.1", "CHECK")
	})
	t.Run("not found", func(t *testing.T) {
		for _, typ := range []string{"missing", "../recorder", "a/b"} {
			_, err := Delegate(&CmdArgs{Env: e, Path: e["CNI_PATH"]}, spec.CmdAdd, typ, nil)
			var ce *spec.Error
			if !asError(err, &ce) || ce.Code != spec.ErrInvalidNetworkConfig {
				t.Errorf("%s: %v", typ, err)
			}
		}
		_, err := Delegate(&CmdArgs{Env: e}, spec.CmdAdd, "recorder", nil)
		var ce *spec.Error
		if !asError(err, &ce) || ce.Code != spec.ErrInvalidEnvironment {
			t.Errorf("empty CNI_PATH: %v", err)
		}
	})
}

func linkSelf(t *testing.T, dir, name string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(exe, filepath.Join(dir, name)); err != nil {
		t.Fatal(err)
	}
}

func takeSelfCalls() []received {
	selfMu.Lock()
	defer selfMu.Unlock()
	c := selfCalls
	selfCalls = nil
	return c
}

// A delegate type that CNI_PATH resolves to this very executable runs
// in-process: the registered plugin's Add runs in this process (its record
// lands in selfCalls), with the same environment (CNI_COMMAND replaced) and
// the same stdin.
func TestDelegateInProcess(t *testing.T) {
	dir := t.TempDir()
	linkSelf(t, dir, "selfipam")
	linkSelf(t, dir, "unregistered")
	e := env("ADD", "CNI_PATH", dir, "SKEL_TEST_SELF_PLUGIN", "1")
	takeSelfCalls()

	conf := `{"cniVersion":"1.1.0","name":"net","ipam":{"type":"selfipam"}}`
	o := runPlugin(t, outer(), e, conf)
	if want := `{"cniVersion":"1.1.0","ips":[{"address":"10.8.0.2/24"}]}` + "\n"; o.code != 0 || o.stdout != want {
		t.Fatalf("got %+v, want %q", o, want)
	}
	calls := takeSelfCalls()
	if len(calls) != 1 {
		t.Fatalf("in-process calls = %d, want 1", len(calls))
	}
	sameEnv(t, calls[0].Env, e)
	if calls[0].Stdin != conf {
		t.Errorf("stdin %q", calls[0].Stdin)
	}

	// CNI_COMMAND replaced.
	clean := `{"cniVersion":"1.1.0","name":"net","ipam":{"type":"selfipam"},"cleanup":true}`
	if o := runPlugin(t, outer(), e, clean); o.code != 0 {
		t.Fatalf("%+v", o)
	}
	calls = takeSelfCalls()
	if len(calls) != 1 {
		t.Fatalf("in-process calls = %d", len(calls))
	}
	sameEnv(t, calls[0].Env, e.With("CNI_COMMAND", "DEL"))

	// An error keeps its code and version.
	o = runPlugin(t, outer(), e, `{"cniVersion":"1.0.0","name":"net","ipam":{"type":"selfipam"},"failCode":123}`)
	wantError(t, o, 123, "1.0.0", "self asked to fail")
	takeSelfCalls()

	// A link to this executable under a type nobody registered is exec'd
	// (the child acts as selfPlugin, see TestMain): same answer, but the
	// call does not happen in this process.
	o = runPlugin(t, outer(), e, `{"cniVersion":"1.1.0","name":"net","ipam":{"type":"unregistered"}}`)
	if want := `{"cniVersion":"1.1.0","ips":[{"address":"10.8.0.2/24"}]}` + "\n"; o.code != 0 || o.stdout != want {
		t.Fatalf("exec fallback: got %+v", o)
	}
	if n := len(takeSelfCalls()); n != 0 {
		t.Errorf("unregistered type ran in-process (%d calls)", n)
	}
}

// Delegate works with CmdArgs built by hand (no Ctx, no Stderr), both
// in-process and by exec.
func TestDelegateBareCmdArgs(t *testing.T) {
	dir := t.TempDir()
	linkSelf(t, dir, "selfipam")
	linkSelf(t, dir, "unregistered")
	e := Env{"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "c1", "CNI_NETNS": "/x", "CNI_IFNAME": "eth0", "CNI_PATH": dir, "SKEL_TEST_SELF_PLUGIN": "1"}
	for _, typ := range []string{"selfipam", "unregistered"} {
		a := &CmdArgs{Env: e, Path: dir, Version: spec.V100, StdinData: []byte(`{"cniVersion":"1.0.0","name":"n"}`)}
		r, err := DelegateAdd(a, typ)
		if err != nil || len(r.IPs) != 1 || r.CNIVersion != spec.V100 {
			t.Errorf("%s: %v %v", typ, r, err)
		}
	}
	takeSelfCalls()
}

func asError(err error, target **spec.Error) bool {
	ce, ok := err.(*spec.Error)
	if ok {
		*target = ce
	}
	return ok
}
