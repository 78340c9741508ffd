package runtime

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/patchbay-cni/patchbay/spec"
)

func types(l *spec.ConfList) string {
	var s []string
	for _, p := range l.Plugins {
		s = append(s, p.Network.Type)
	}
	return strings.Join(s, ",")
}

func TestLoadOrder(t *testing.T) {
	dir := t.TempDir()
	// Same network in four files: the first .conflist by name wins, even
	// over a .conf that sorts earlier.
	writeFile(t, filepath.Join(dir, "20-b.conflist"), `{"cniVersion":"1.0.0","name":"net","plugins":[{"type":"second"}]}`)
	writeFile(t, filepath.Join(dir, "10-a.conflist"), `{"cniVersion":"1.0.0","name":"net","plugins":[{"type":"first"}]}`)
	writeFile(t, filepath.Join(dir, "00-x.conf"), `{"cniVersion":"1.0.0","name":"net","type":"legacy"}`)
	writeFile(t, filepath.Join(dir, "05-y.json"), `{"cniVersion":"0.3.1","name":"single","type":"solo"}`)
	writeFile(t, filepath.Join(dir, "01-z.conf"), `{"cniVersion":"0.4.0","name":"single","type":"earlier"}`)
	writeFile(t, filepath.Join(dir, "ignored.txt"), `{"name":"txt","type":"x"}`)

	l, err := LoadNetwork(dir, "net")
	if err != nil {
		t.Fatal(err)
	}
	if got := types(l); got != "first" {
		t.Errorf("net: plugins %q, want the one of 10-a.conflist", got)
	}
	l, err = LoadNetwork(dir, "single")
	if err != nil {
		t.Fatal(err)
	}
	if !l.Legacy || types(l) != "earlier" || l.Version() != "0.4.0" {
		t.Errorf("single: legacy=%v plugins=%q version=%s; want the legacy 01-z.conf", l.Legacy, types(l), l.Version())
	}
	if _, err := LoadNetwork(dir, "txt"); err == nil {
		t.Error("a .txt file was loaded")
	}

	files, err := ListNetworks(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range files {
		s := filepath.Base(f.Path)
		if f.Shadowed {
			s += "(shadowed)"
		}
		got = append(got, s)
	}
	want := "10-a.conflist 20-b.conflist(shadowed) 00-x.conf(shadowed) 01-z.conf 05-y.json(shadowed)"
	if strings.Join(got, " ") != want {
		t.Errorf("ListNetworks order:\n got %s\nwant %s", strings.Join(got, " "), want)
	}
}

func TestLoadBrokenFileDoesNotHideValid(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "00-garbage.conflist"), `{not json`)
	writeFile(t, filepath.Join(dir, "01-bad.conflist"), `{"cniVersion":"1.0.0","name":"net","plugins":[{"notype":true}]}`)
	writeFile(t, filepath.Join(dir, "02-good.conflist"), `{"cniVersion":"1.0.0","name":"net","plugins":[{"type":"ok"}]}`)
	writeFile(t, filepath.Join(dir, "03-onlybad.conflist"), `{"cniVersion":"1.0.0","name":"lonely","plugins":[{"type":"a/b"}]}`)

	l, err := LoadNetwork(dir, "net")
	if err != nil {
		t.Fatalf("broken files hid the valid one: %v", err)
	}
	if types(l) != "ok" {
		t.Errorf("plugins %q", types(l))
	}

	// The only file naming the network is broken: its own error, with its file.
	_, err = LoadNetwork(dir, "lonely")
	ce := spec.AsError(err, 0)
	if ce == nil || ce.Code != spec.ErrInvalidNetworkConfig || !strings.Contains(ce.Msg, "03-onlybad.conflist") || !strings.Contains(ce.Msg, `"a/b"`) {
		t.Errorf("lonely: got %v (code %v), want code 7 naming the file and the bad type", err, ce)
	}

	// Not found: the broken files are listed, code 7.
	_, err = LoadNetwork(dir, "missing")
	var nf *NotFoundError
	if !errors.As(err, &nf) || len(nf.Broken) != 3 {
		t.Fatalf("missing: got %v, want NotFoundError with 3 broken files", err)
	}
	if ce := spec.AsError(err, 0); ce.Code != spec.ErrInvalidNetworkConfig || !strings.Contains(ce.Msg, "00-garbage.conflist") {
		t.Errorf("missing: spec error %+v", ce)
	}

	files, err := ListNetworks(dir)
	if err != nil {
		t.Fatal(err)
	}
	var broken int
	for _, f := range files {
		if f.Err != nil {
			broken++
		}
	}
	if len(files) != 4 || broken != 3 {
		t.Errorf("ListNetworks: %d files, %d broken; want 4, 3", len(files), broken)
	}

	if _, err := LoadNetwork(filepath.Join(dir, "nope"), "net"); !errors.As(err, &nf) {
		t.Errorf("missing dir: %v, want NotFoundError", err)
	}
}

func TestLoadAggregatesPluginDir(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "agg.conflist"), `{"cniVersion":"1.1.0","name":"agg","plugins":[{"type":"inline"}]}`)
	writeFile(t, filepath.Join(dir, "agg", "20-b.conf"), `{"type":"b","keep":1}`)
	writeFile(t, filepath.Join(dir, "agg", "10-a.conf"), `{"type":"a"}`)
	writeFile(t, filepath.Join(dir, "agg", "30-c.json"), `{"type":"not-a-conf"}`)
	writeFile(t, filepath.Join(dir, "only.conflist"), `{"cniVersion":"1.1.0","name":"only","loadOnlyInlinedPlugins":true,"plugins":[{"type":"inline"}]}`)
	writeFile(t, filepath.Join(dir, "only", "10-a.conf"), `{"type":"a"}`)
	writeFile(t, filepath.Join(dir, "dironly.conflist"), `{"cniVersion":"1.1.0","name":"dironly"}`)
	writeFile(t, filepath.Join(dir, "dironly", "1.conf"), `{"type":"x"}`)
	writeFile(t, filepath.Join(dir, "empty.conflist"), `{"cniVersion":"1.1.0","name":"empty"}`)
	writeFile(t, filepath.Join(dir, "badagg.conflist"), `{"cniVersion":"1.1.0","name":"badagg","plugins":[{"type":"inline"}]}`)
	writeFile(t, filepath.Join(dir, "badagg", "1.conf"), `{"type":"../evil"}`)
	// A legacy .conf does not aggregate (as libcni).
	writeFile(t, filepath.Join(dir, "leg.conf"), `{"cniVersion":"1.0.0","name":"leg","type":"solo"}`)
	writeFile(t, filepath.Join(dir, "leg", "1.conf"), `{"type":"x"}`)

	for _, tc := range []struct{ name, want, errSub string }{
		{"agg", "inline,a,b", ""},
		{"only", "inline", ""},
		{"dironly", "x", ""},
		{"empty", "", "no plugins"},
		{"badagg", "", "1.conf"},
		{"leg", "solo", ""},
	} {
		l, err := LoadNetwork(dir, tc.name)
		if tc.errSub != "" {
			if err == nil || !strings.Contains(err.Error(), tc.errSub) {
				t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.errSub)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if got := types(l); got != tc.want {
			t.Errorf("%s: plugins %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestSelfContainedConfig(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "agg.conflist"), `{"cniVersion":"1.1.0","name":"agg","disableCheck":true,"plugins":[{"type":"inline"}]}`)
	writeFile(t, filepath.Join(dir, "agg", "1.conf"), `{"type":"a"}`)
	writeFile(t, filepath.Join(dir, "plain.conflist"), `{"cniVersion":"1.1.0","name":"plain","plugins":[{"type":"p"}]}`)
	writeFile(t, filepath.Join(dir, "leg.conf"), `{"cniVersion":"0.3.1","name":"leg","type":"solo","k":"v"}`)
	writeFile(t, filepath.Join(dir, "inl.conflist"), `{"cniVersion":"1.1.0","name":"inl","loadOnlyInlinedPlugins":true,"plugins":[{"type":"p"}]}`)
	for _, n := range []string{"agg", "plain", "leg", "inl"} {
		l, err := LoadNetwork(dir, n)
		if err != nil {
			t.Fatal(err)
		}
		b, err := selfContained(l)
		if err != nil {
			t.Fatal(err)
		}
		back, err := spec.ParseConfList(b)
		if err != nil {
			t.Fatalf("%s: cached config does not parse: %v: %s", n, err, b)
		}
		// Marked complete, so GC's stale DEL can trust it (see cachedList).
		if types(back) != types(l) || back.Name != n || back.Version() != l.Version() || back.DisableCheck != l.DisableCheck || !back.LoadOnlyInlinedPlugins {
			t.Errorf("%s: round trip %s", n, b)
		}
		if n == "inl" && string(b) != string(l.Bytes) {
			t.Errorf("inl: cached config %s, want the file bytes", b)
		}
	}
}

// Directories are not configuration files, also when reached through a
// symlink (e.g. a ConfigMap mount's "..data"-style links); symlinks to
// files load; a dangling symlink is a broken file.
func TestLoadSymlinksAndDirectories(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(t.TempDir(), "real")
	writeFile(t, filepath.Join(real, "net.conflist"), `{"cniVersion":"1.0.0","name":"net","plugins":[{"type":"ok"}]}`)
	writeFile(t, filepath.Join(real, "x.conf"), `{"type":"fromdir"}`)
	writeFile(t, filepath.Join(dir, "plain.conf", "inner"), `not a config`)
	for name, target := range map[string]string{
		"10-net.conflist": filepath.Join(real, "net.conflist"),
		"20-dir.conflist": real,
		"30-dir.conf":     real,
		"40-gone.conf":    filepath.Join(real, "nowhere"),
	} {
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	// The network's plugin directory: a symlinked directory named like a
	// plugin file is skipped as well.
	if err := os.MkdirAll(filepath.Join(dir, "net"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(real, filepath.Join(dir, "net", "05-sub.conf")); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "net", "10-a.conf"), `{"type":"a"}`)

	files, err := ListNetworks(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range files {
		s := filepath.Base(f.Path)
		if f.Err != nil {
			s += "(broken)"
		}
		got = append(got, s)
	}
	if want := "10-net.conflist 40-gone.conf(broken)"; strings.Join(got, " ") != want {
		t.Errorf("ListNetworks: got %s, want %s", strings.Join(got, " "), want)
	}
	l, err := LoadNetwork(dir, "net")
	if err != nil || types(l) != "ok,a" {
		t.Fatalf("net via symlink: %v %v", l, err)
	}
}
