package skel

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/patchbay-cni/patchbay/spec"
)

type outcome struct {
	code           int
	stdout, stderr string
}

func runPlugin(t *testing.T, p Plugin, env Env, stdin string) outcome {
	t.Helper()
	var out, errb bytes.Buffer
	code := Run(context.Background(), p, env, strings.NewReader(stdin), &out, &errb)
	return outcome{code, out.String(), errb.String()}
}

// env is a complete environment for cmd; drop or override keys per test.
func env(cmd string, kv ...string) Env {
	e := Env{"CNI_COMMAND": cmd, "CNI_CONTAINERID": "c1", "CNI_NETNS": "/var/run/netns/blue",
		"CNI_IFNAME": "eth0", "CNI_PATH": "/opt/cni/bin"}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] == "<unset>" {
			delete(e, kv[i])
		} else {
			e[kv[i]] = kv[i+1]
		}
	}
	return e
}

// wantError checks a failed invocation: exit 1, one error JSON object on
// stdout with the code, cniVersion, and message fragments.
func wantError(t *testing.T, o outcome, code uint, version string, frags ...string) {
	t.Helper()
	if o.code != 1 {
		t.Errorf("exit code = %d, want 1 (stdout %s)", o.code, o.stdout)
	}
	if !strings.HasSuffix(o.stdout, "}\n") || strings.Count(o.stdout, "\n") != 1 {
		t.Errorf("stdout is not one JSON line: %q", o.stdout)
	}
	var e spec.Error
	if err := json.Unmarshal([]byte(o.stdout), &e); err != nil {
		t.Fatalf("stdout is not an error object: %v: %q", err, o.stdout)
	}
	if e.Code != code || e.CNIVersion != version {
		t.Errorf("error = %+v, want code %d cniVersion %q", e, code, version)
	}
	for _, f := range frags {
		if !strings.Contains(e.Msg+e.Details, f) {
			t.Errorf("error %q does not mention %q", e.Msg, f)
		}
	}
}

var testResult = &spec.Result{
	Interfaces: []*spec.Interface{{Name: "eth0", Mac: "02:00:00:00:00:01", Sandbox: "/var/run/netns/blue", MTU: 1400}},
	IPs:        []*spec.IPConfig{{Interface: spec.IntPtr(0), Address: netip.MustParsePrefix("10.1.0.5/16"), Gateway: netip.MustParseAddr("10.1.0.1")}},
	Routes:     []*spec.Route{{Dst: netip.MustParsePrefix("0.0.0.0/0")}},
}

// okPlugin succeeds on every verb and records the last CmdArgs it saw.
func okPlugin(last **CmdArgs) Plugin {
	rec := func(a *CmdArgs) error { *last = a; return nil }
	return Plugin{
		Type:  "ok",
		Add:   func(a *CmdArgs) (*spec.Result, error) { *last = a; return testResult, nil },
		Del:   rec,
		Check: rec, GC: rec, Status: rec,
	}
}

const conf100 = `{"cniVersion":"1.0.0","name":"net","type":"ok"}`

func TestRunEnvironmentErrors(t *testing.T) {
	var last *CmdArgs
	p := okPlugin(&last)
	cases := []struct {
		name  string
		env   Env
		stdin string
		code  uint
		ver   string
		frags []string
	}{
		{"no CNI_COMMAND", env("", "CNI_COMMAND", "<unset>"), conf100, 4, "1.1.0", []string{"CNI_COMMAND"}},
		{"unknown CNI_COMMAND", env("FROB"), conf100, 4, "1.1.0", []string{"CNI_COMMAND", `"FROB"`}},
		{"lower-case verb", env("add"), conf100, 4, "1.1.0", []string{"CNI_COMMAND", `"add"`}},
		{"ADD without CNI_CONTAINERID", env("ADD", "CNI_CONTAINERID", "<unset>"), conf100, 4, "1.0.0", []string{"CNI_CONTAINERID"}},
		{"ADD without CNI_NETNS", env("ADD", "CNI_NETNS", ""), conf100, 4, "1.0.0", []string{"CNI_NETNS"}},
		{"ADD without CNI_IFNAME", env("ADD", "CNI_IFNAME", "<unset>"), conf100, 4, "1.0.0", []string{"CNI_IFNAME"}},
		{"ADD without all three", env("ADD", "CNI_IFNAME", "<unset>", "CNI_NETNS", "<unset>", "CNI_CONTAINERID", "<unset>"), conf100, 4, "1.0.0",
			[]string{"CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME"}},
		{"CHECK without CNI_NETNS", env("CHECK", "CNI_NETNS", "<unset>"), conf100, 4, "1.0.0", []string{"CNI_NETNS"}},
		{"DEL without CNI_CONTAINERID", env("DEL", "CNI_CONTAINERID", "<unset>"), conf100, 4, "1.0.0", []string{"CNI_CONTAINERID"}},
		{"DEL without CNI_IFNAME", env("DEL", "CNI_IFNAME", "<unset>"), conf100, 4, "1.0.0", []string{"CNI_IFNAME"}},
		{"GC without CNI_PATH", env("GC", "CNI_PATH", "<unset>"), `{"cniVersion":"1.1.0","name":"net","type":"ok"}`, 4, "1.1.0", []string{"CNI_PATH"}},
		{"interface name too long", env("ADD", "CNI_IFNAME", "0123456789abcdef"), conf100, 4, "1.0.0", []string{"CNI_IFNAME", "0123456789abcdef"}},
		{"interface name with /", env("ADD", "CNI_IFNAME", "a/b"), conf100, 4, "1.0.0", []string{"CNI_IFNAME", "a/b"}},
		{"CHECK interface name too long", env("CHECK", "CNI_IFNAME", "0123456789abcdef"), conf100, 4, "1.0.0", []string{"CNI_IFNAME", "0123456789abcdef"}},
		{"interface name ..", env("CHECK", "CNI_IFNAME", ".."), conf100, 4, "1.0.0", []string{"CNI_IFNAME"}},
		{"invalid container id", env("ADD", "CNI_CONTAINERID", "-c1"), conf100, 4, "1.0.0", []string{"CNI_CONTAINERID", "-c1"}},
		{"container id with space", env("DEL", "CNI_CONTAINERID", "c 1"), conf100, 4, "1.0.0", []string{"CNI_CONTAINERID"}},
		{"malformed CNI_ARGS", env("ADD", "CNI_ARGS", "FOO"), conf100, 4, "1.0.0", []string{"CNI_ARGS", "FOO"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			last = nil
			o := runPlugin(t, p, c.env, c.stdin)
			wantError(t, o, c.code, c.ver, c.frags...)
			if last != nil {
				t.Error("the verb ran despite the error")
			}
		})
	}
}

func TestRunConfigErrors(t *testing.T) {
	var last *CmdArgs
	p := okPlugin(&last)
	cases := []struct {
		name  string
		env   Env
		stdin string
		code  uint
		ver   string
		frags []string
	}{
		{"malformed JSON", env("ADD"), `{"cniVersion":`, 6, "1.1.0", []string{"decode"}},
		{"empty stdin", env("DEL"), ``, 6, "1.1.0", []string{"decode"}},
		{"wrong type", env("ADD"), `{"cniVersion":"1.0.0","name":7}`, 6, "1.1.0", nil},
		{"null config", env("ADD"), `null`, 6, "1.1.0", []string{"not a JSON object"}},
		{"null config on DEL", env("DEL"), " null\n", 6, "1.1.0", []string{"not a JSON object"}},
		{"missing name", env("ADD"), `{"cniVersion":"1.0.0","type":"ok"}`, 7, "1.0.0", []string{`"name"`}},
		{"bad name", env("ADD"), `{"cniVersion":"1.0.0","name":"a/b","type":"ok"}`, 7, "1.0.0", []string{`"a/b"`}},
		{"unsupported version", env("ADD"), `{"cniVersion":"9.9.9","name":"net"}`, 1, "1.1.0", []string{`"9.9.9"`}},
		{"CHECK on 0.3.1", env("CHECK"), `{"cniVersion":"0.3.1","name":"net","prevResult":{"ips":[]}}`, 1, "0.3.1", []string{"0.3.1", "CHECK"}},
		{"CHECK without cniVersion", env("CHECK"), `{"name":"net"}`, 1, "0.2.0", []string{"CHECK"}},
		{"GC on 1.0.0", env("GC"), conf100, 1, "1.0.0", []string{"1.0.0", "GC"}},
		{"STATUS on 1.0.0", env("STATUS"), conf100, 1, "1.0.0", []string{"1.0.0", "STATUS"}},
		{"CHECK without prevResult", env("CHECK"), conf100, 7, "1.0.0", []string{"prevResult"}},
		{"bad prevResult", env("ADD"), `{"cniVersion":"1.0.0","name":"net","prevResult":{"ips":[{"address":"x"}]}}`, 6, "1.0.0", []string{"prevResult"}},
		{"prevResult of unknown version", env("CHECK"), `{"cniVersion":"1.0.0","name":"net","prevResult":{"cniVersion":"5.0.0"}}`, 1, "1.0.0", []string{"prevResult", "5.0.0"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			last = nil
			wantError(t, runPlugin(t, p, c.env, c.stdin), c.code, c.ver, c.frags...)
			if last != nil {
				t.Error("the verb ran despite the error")
			}
		})
	}
	// A plugin that supports fewer versions refuses the others with code 1.
	restricted := p
	restricted.Versions = []string{spec.V100, spec.V110}
	wantError(t, runPlugin(t, restricted, env("ADD"), `{"cniVersion":"0.4.0","name":"net"}`), 1, "1.1.0", "0.4.0", "1.0.0, 1.1.0")
}

// The exact error line, byte for byte.
func TestRunErrorExactJSON(t *testing.T) {
	o := runPlugin(t, Plugin{Type: "x"}, env("ADD", "CNI_IFNAME", "<unset>"), conf100)
	want := `{"cniVersion":"1.0.0","code":4,"msg":"required environment variables missing for ADD: CNI_IFNAME"}` + "\n"
	if o.stdout != want || o.code != 1 {
		t.Errorf("got %d %q\nwant %q", o.code, o.stdout, want)
	}
}

func TestRunVersion(t *testing.T) {
	all := `"supportedVersions":["0.1.0","0.2.0","0.3.0","0.3.1","0.4.0","1.0.0","1.1.0"]}` + "\n"
	for _, c := range []struct{ stdin, want string }{
		{`{"cniVersion":"0.4.0"}`, `{"cniVersion":"0.4.0",` + all},
		{`{"cniVersion":"1.0.0","name":"ignored"}`, `{"cniVersion":"1.0.0",` + all},
		{``, `{"cniVersion":"1.1.0",` + all},
		{"  \n", `{"cniVersion":"1.1.0",` + all},
		{`{}`, `{"cniVersion":"1.1.0",` + all},
	} {
		// VERSION needs nothing but CNI_COMMAND.
		o := runPlugin(t, Plugin{Type: "x"}, Env{"CNI_COMMAND": "VERSION"}, c.stdin)
		if o.code != 0 || o.stdout != c.want {
			t.Errorf("VERSION with %q: %d %q, want %q", c.stdin, o.code, o.stdout, c.want)
		}
	}
	o := runPlugin(t, Plugin{Type: "x", Versions: []string{"1.0.0"}}, Env{"CNI_COMMAND": "VERSION"}, `{"cniVersion":"1.0.0"}`)
	if o.stdout != `{"cniVersion":"1.0.0","supportedVersions":["1.0.0"]}`+"\n" {
		t.Errorf("restricted VERSION: %q", o.stdout)
	}
	// Malformed VERSION input is ignored: the probe still gets the list.
	if o := runPlugin(t, Plugin{Type: "x"}, Env{"CNI_COMMAND": "VERSION"}, `{`); o.code != 0 || !strings.Contains(o.stdout, `"supportedVersions"`) {
		t.Errorf("VERSION with malformed input: %d %q", o.code, o.stdout)
	}
}

// ADD results come out in the config's version.
func TestRunAddResultVersion(t *testing.T) {
	var last *CmdArgs
	p := okPlugin(&last)
	v020 := `{"cniVersion":"0.2.0","ip4":{"ip":"10.1.0.5/16","gateway":"10.1.0.1","routes":[{"dst":"0.0.0.0/0"}]}}` + "\n"
	v040 := `{"cniVersion":"0.4.0","interfaces":[{"name":"eth0","mac":"02:00:00:00:00:01","sandbox":"/var/run/netns/blue"}],` +
		`"ips":[{"version":"4","interface":0,"address":"10.1.0.5/16","gateway":"10.1.0.1"}],"routes":[{"dst":"0.0.0.0/0"}]}` + "\n"
	v110 := `{"cniVersion":"1.1.0","interfaces":[{"name":"eth0","mac":"02:00:00:00:00:01","mtu":1400,"sandbox":"/var/run/netns/blue"}],` +
		`"ips":[{"interface":0,"address":"10.1.0.5/16","gateway":"10.1.0.1"}],"routes":[{"dst":"0.0.0.0/0"}]}` + "\n"
	for _, c := range []struct{ conf, want string }{
		{`{"cniVersion":"0.2.0","name":"net"}`, v020},
		{`{"name":"net"}`, v020}, // no cniVersion: 0.2.0
		{`{"cniVersion":"0.4.0","name":"net"}`, v040},
		{`{"cniVersion":"1.1.0","name":"net"}`, v110},
	} {
		o := runPlugin(t, p, env("ADD"), c.conf)
		if o.code != 0 || o.stdout != c.want {
			t.Errorf("%s:\n got %d %s\nwant %s", c.conf, o.code, o.stdout, c.want)
		}
	}
	if last.Version != spec.V110 {
		t.Errorf("CmdArgs.Version = %q", last.Version)
	}
}

func TestRunCmdArgs(t *testing.T) {
	var last *CmdArgs
	p := okPlugin(&last)
	conf := `{"cniVersion":"1.0.0","name":"net","type":"ok","custom":1,"prevResult":{"ips":[{"address":"10.1.0.5/16"}]}}`
	e := env("ADD", "CNI_ARGS", "A=1", "OTHER", "x")
	if o := runPlugin(t, p, e, conf); o.code != 0 {
		t.Fatalf("%+v", o)
	}
	a := last
	if a.Command != "ADD" || a.ContainerID != "c1" || a.Netns != "/var/run/netns/blue" || a.IfName != "eth0" ||
		a.Args != "A=1" || a.Path != "/opt/cni/bin" || string(a.StdinData) != conf || a.Version != "1.0.0" ||
		a.Env["OTHER"] != "x" || a.Conf.Name != "net" || a.Ctx == nil || a.Log == nil || a.Stderr == nil {
		t.Errorf("CmdArgs = %+v", a)
	}
	// prevResult without cniVersion is read in the config's version.
	pr := a.Conf.PrevResult
	if pr == nil || pr.CNIVersion != "1.0.0" || len(pr.IPs) != 1 || pr.IPs[0].Address.String() != "10.1.0.5/16" {
		t.Fatalf("PrevResult = %v", pr)
	}
	// One with its own version keeps it; a null one is no prevResult.
	runPlugin(t, p, env("DEL"), `{"cniVersion":"1.0.0","name":"net","prevResult":{"cniVersion":"0.4.0","ips":[{"version":"4","address":"10.1.0.5/16"}]}}`)
	if last.Conf.PrevResult == nil || last.Conf.PrevResult.CNIVersion != "0.4.0" {
		t.Errorf("PrevResult = %v", last.Conf.PrevResult)
	}
	runPlugin(t, p, env("DEL"), `{"cniVersion":"1.0.0","name":"net","prevResult":null}`)
	if last.Conf.PrevResult != nil {
		t.Errorf("PrevResult = %v", last.Conf.PrevResult)
	}
	// CHECK gets the prevResult; DEL works without CNI_NETNS; STATUS needs no
	// attachment parameters; GC reads the valid attachments.
	if o := runPlugin(t, p, env("CHECK"), conf); o.code != 0 || o.stdout != "" || last.Conf.PrevResult == nil {
		t.Errorf("CHECK: %+v", o)
	}
	if o := runPlugin(t, p, env("DEL", "CNI_NETNS", "<unset>"), conf100); o.code != 0 || o.stdout != "" {
		t.Errorf("DEL: %+v", o)
	}
	if o := runPlugin(t, p, Env{"CNI_COMMAND": "STATUS"}, `{"cniVersion":"1.1.0","name":"net"}`); o.code != 0 || o.stdout != "" {
		t.Errorf("STATUS: %+v", o)
	}
	gc := `{"cniVersion":"1.1.0","name":"net","cni.dev/valid-attachments":[{"containerID":"c1","ifname":"eth0"}]}`
	if o := runPlugin(t, p, Env{"CNI_COMMAND": "GC", "CNI_PATH": "/opt/cni/bin"}, gc); o.code != 0 {
		t.Errorf("GC: %+v", o)
	}
	if at := last.Conf.Attachments(); len(at) != 1 || at[0] != (spec.Attachment{ContainerID: "c1", IfName: "eth0"}) {
		t.Errorf("GC attachments = %v", at)
	}
}

func TestRunLoadArgs(t *testing.T) {
	type args struct {
		IP      netip.Addr
		PodName string `cni:"K8S_POD_NAME"`
	}
	var got args
	p := Plugin{Type: "a", Add: func(a *CmdArgs) (*spec.Result, error) {
		if err := a.LoadArgs(&got); err != nil {
			return nil, err
		}
		return &spec.Result{}, nil
	}}
	o := runPlugin(t, p, env("ADD", "CNI_ARGS", "IP=10.0.0.9;K8S_POD_NAME=web-0"), conf100)
	if o.code != 0 || got.IP != netip.MustParseAddr("10.0.0.9") || got.PodName != "web-0" {
		t.Errorf("%+v %+v", o, got)
	}
	wantError(t, runPlugin(t, p, env("ADD", "CNI_ARGS", "IP=10.0.0.9;FOO=bar"), conf100), 2, "1.0.0", "FOO", "bar")
	wantError(t, runPlugin(t, p, env("ADD", "CNI_ARGS", "IP=nope"), conf100), 4, "1.0.0", "IP", "nope")
	if o := runPlugin(t, p, env("ADD", "CNI_ARGS", "IgnoreUnknown=1;FOO=bar"), conf100); o.code != 0 {
		t.Errorf("IgnoreUnknown: %+v", o)
	}
}

func TestRunVerbErrors(t *testing.T) {
	base := spec.NewError(spec.ErrTryAgainLater, "busy", "lock held")
	cases := []struct {
		name string
		p    Plugin
		cmd  string
		code uint
		msg  string
	}{
		{"error code kept", Plugin{Del: func(*CmdArgs) error { return base }}, "DEL", 11, "busy"},
		{"wrapped error keeps code", Plugin{Add: func(*CmdArgs) (*spec.Result, error) { return nil, fmt.Errorf("setting up: %w", base) }}, "ADD", 11, "setting up: busy"},
		{"plain error", Plugin{Check: func(*CmdArgs) error { return errors.New("plain") }}, "CHECK", 999, "plain"},
		{"plugin-specific code", Plugin{Del: func(*CmdArgs) error { return spec.Errorf(142, "mine") }}, "DEL", 142, "mine"},
		{"code 0 is not a success", Plugin{Del: func(*CmdArgs) error { return &spec.Error{Msg: "forgot code"} }}, "DEL", 999, "forgot code"},
		{"no ADD", Plugin{Type: "noadd"}, "ADD", 999, "ADD"},
		{"nil result", Plugin{Add: func(*CmdArgs) (*spec.Result, error) { return nil, nil }}, "ADD", 999, "no result"},
		{"result not encodable", Plugin{Add: func(*CmdArgs) (*spec.Result, error) { return &spec.Result{}, nil }}, "ADD", 0, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			conf := `{"cniVersion":"1.0.0","name":"net","prevResult":{"ips":[]}}`
			o := runPlugin(t, c.p, env(c.cmd), conf)
			if c.code == 0 {
				if o.code != 0 {
					t.Errorf("%+v", o)
				}
				return
			}
			wantError(t, o, c.code, "1.0.0", c.msg)
		})
	}
	// Nil verbs other than ADD succeed silently.
	for _, cmd := range []string{"DEL", "CHECK"} {
		if o := runPlugin(t, Plugin{}, env(cmd), `{"cniVersion":"1.0.0","name":"net","prevResult":{}}`); o.code != 0 || o.stdout != "" {
			t.Errorf("%s: %+v", cmd, o)
		}
	}
}

// With CNI_COMMAND unset, About goes to stderr (a person ran the binary).
func TestRunAbout(t *testing.T) {
	o := runPlugin(t, Plugin{About: "patchbay test plugin"}, Env{}, "")
	if o.stderr != "patchbay test plugin\n" {
		t.Errorf("stderr = %q", o.stderr)
	}
	wantError(t, o, 4, "1.1.0", "CNI_COMMAND")
}

// Log output honours CNI_LOG_LEVEL and goes to stderr, never stdout.
func TestRunLogging(t *testing.T) {
	p := Plugin{Type: "log", Del: func(a *CmdArgs) error { a.Log.Debug("dbg"); a.Log.Warn("wrn"); return nil }}
	o := runPlugin(t, p, env("DEL"), conf100)
	if strings.Contains(o.stderr, "dbg") || !strings.Contains(o.stderr, "wrn") || o.stdout != "" {
		t.Errorf("default level: %+v", o)
	}
	o = runPlugin(t, p, env("DEL", "CNI_LOG_LEVEL", "debug"), conf100)
	if !strings.Contains(o.stderr, "dbg") {
		t.Errorf("debug level: %+v", o)
	}
}

type failReader struct{}

func (failReader) Read([]byte) (int, error) { return 0, errors.New("read boom") }

func TestRunStdinReadError(t *testing.T) {
	var out bytes.Buffer
	code := Run(context.Background(), Plugin{}, env("ADD"), failReader{}, &out, io.Discard)
	wantError(t, outcome{code, out.String(), ""}, 5, "1.1.0", "stdin")
}

func TestEnv(t *testing.T) {
	e := EnvFromList([]string{"A=1", "B=x=y", "C=", "junk"})
	if len(e) != 3 || e["A"] != "1" || e["B"] != "x=y" || e["C"] != "" {
		t.Errorf("EnvFromList = %v", e)
	}
	w := e.With("A", "2")
	if e["A"] != "1" || w["A"] != "2" || len(w) != 3 {
		t.Errorf("With: %v %v", e, w)
	}
	l := w.List()
	slices.Sort(l)
	if !slices.Equal(l, []string{"A=2", "B=x=y", "C="}) {
		t.Errorf("List = %v", l)
	}
}

func TestDecodeConf(t *testing.T) {
	a := &CmdArgs{StdinData: []byte(`{"mtu":"x"}`)}
	var c struct{ MTU int }
	err := a.DecodeConf(&c)
	var ce *spec.Error
	if !errors.As(err, &ce) || ce.Code != spec.ErrDecodingFailure {
		t.Errorf("DecodeConf error = %v", err)
	}
}

// The spec appendix's CHECK request for bridge, verbatim: its prevResult has
// no cniVersion and is read as the request's 1.1.0.
const appendixCheckBridge = `{
  "cniVersion": "1.1.0",
  "name": "dbnet",
  "type": "bridge",
  "bridge": "cni0",
  "keyA": ["some more", "plugin specific", "configuration"],
  "ipam": {"type": "host-local", "subnet": "10.1.0.0/16", "gateway": "10.1.0.1"},
  "dns": {"nameservers": [ "10.1.0.1" ]},
  "prevResult": {
    "ips": [{"address": "10.1.0.5/16", "gateway": "10.1.0.1", "interface": 2}],
    "routes": [{"dst": "0.0.0.0/0"}],
    "interfaces": [
        {"name": "cni0", "mac": "00:11:22:33:44:55"},
        {"name": "veth3243", "mac": "55:44:33:22:11:11"},
        {"name": "eth0", "mac": "00:11:22:33:44:66", "sandbox": "/var/run/netns/blue"}
    ],
    "dns": {"nameservers": [ "10.1.0.1" ]}
  }
}`

func TestRunSpecAppendixCheck(t *testing.T) {
	var last *CmdArgs
	p := okPlugin(&last)
	for _, cmd := range []string{"CHECK", "DEL"} {
		o := runPlugin(t, p, env(cmd), appendixCheckBridge)
		if o.code != 0 || o.stdout != "" {
			t.Fatalf("%s: %+v", cmd, o)
		}
		pr := last.Conf.PrevResult
		if pr == nil || pr.CNIVersion != "1.1.0" || len(pr.Interfaces) != 3 || pr.Interfaces[2].Mac != "00:11:22:33:44:66" ||
			*pr.IPs[0].Interface != 2 || pr.DNS.Nameservers[0] != "10.1.0.1" || last.Conf.IPAM.Type != "host-local" {
			t.Errorf("%s: prevResult = %v, conf = %+v", cmd, pr, last.Conf)
		}
	}
}

// DEL is best effort: malformed CNI_ARGS or an undecodable prevResult are
// logged and DEL still reaches the plugin, which must be able to clean up.
func TestDelToleratesMalformedArgsAndPrevResult(t *testing.T) {
	called := 0
	p := Plugin{Type: "x", Del: func(a *CmdArgs) error {
		called++
		if a.Conf.PrevResult != nil {
			t.Errorf("undecodable prevResult should reach DEL as nil, got %v", a.Conf.PrevResult)
		}
		return nil
	}}
	o := runPlugin(t, p, env("DEL", "CNI_ARGS", "FOO"), `{"cniVersion":"1.0.0","name":"net","type":"x","prevResult":{"ips":[{"address":"nope"}]}}`)
	if o.code != 0 || called != 1 {
		t.Fatalf("DEL with malformed CNI_ARGS and prevResult: exit %d, called %d, stdout %q", o.code, called, o.stdout)
	}
	// ADD still refuses the same CNI_ARGS.
	wantError(t, runPlugin(t, Plugin{Type: "x", Add: func(*CmdArgs) (*spec.Result, error) { return &spec.Result{}, nil }}, env("ADD", "CNI_ARGS", "FOO"), conf100), 4, "1.0.0", "CNI_ARGS")
}

// DEL of an interface name ADD and CHECK refuse (too long, "/", ":",
// whitespace, "." or "..") succeeds without running the plugin: nothing
// can exist under that name. A runtime or a delegating plugin that sends
// one (Multus rolling back an ADD our plugin refused) must not be left
// with a DEL that fails for ever.
func TestDelOfAnInterfaceNameADDRefuses(t *testing.T) {
	for _, name := range []string{"0123456789abcdef", "a-very-long-interface-name", "a/b", "a:b", "a b", ".", ".."} {
		var last *CmdArgs
		p := okPlugin(&last)
		o := runPlugin(t, p, env("DEL", "CNI_IFNAME", name), conf100)
		if o.code != 0 || o.stdout != "" {
			t.Errorf("DEL with CNI_IFNAME %q: exit %d, stdout %q; want success", name, o.code, o.stdout)
		}
		if last != nil {
			t.Errorf("DEL with CNI_IFNAME %q ran the plugin's DEL; there is nothing to delete", name)
		}
		for _, cmd := range []string{"ADD", "CHECK"} {
			wantError(t, runPlugin(t, p, env(cmd, "CNI_IFNAME", name), `{"cniVersion":"1.0.0","name":"net","type":"ok","prevResult":{"cniVersion":"1.0.0"}}`), 4, "1.0.0", "CNI_IFNAME")
		}
	}
	// An empty CNI_IFNAME is still a missing variable for DEL (spec §2).
	var last *CmdArgs
	wantError(t, runPlugin(t, okPlugin(&last), env("DEL", "CNI_IFNAME", ""), conf100), 4, "1.0.0", "CNI_IFNAME")
}

// A panicking verb becomes a code-999 error JSON (exit 1) naming the plugin
// and the panic value; the stack goes to stderr, not stdout.
func TestRunPanicIsAnError(t *testing.T) {
	var nilMap map[string]int
	for _, cmd := range []string{"ADD", "DEL", "GC", "STATUS"} {
		p := Plugin{
			Type:   "boom",
			Add:    func(*CmdArgs) (*spec.Result, error) { panic("kaboom") },
			Del:    func(*CmdArgs) error { nilMap["x"] = 1; return nil },
			GC:     func(*CmdArgs) error { panic(errors.New("gc exploded")) },
			Status: func(*CmdArgs) error { var a []int; _ = a[3]; return nil },
		}
		o := runPlugin(t, p, env(cmd), `{"cniVersion":"1.1.0","name":"net","type":"boom"}`)
		wantError(t, o, spec.ErrInternal, "1.1.0", "plugin boom panicked", cmd)
		if !strings.Contains(o.stderr, "goroutine") {
			t.Errorf("%s: no stack trace on stderr: %q", cmd, o.stderr)
		}
	}
}
