package atomicfile

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// both runs a test with O_TMPFILE and with the named-temporary fallback.
func both(t *testing.T, f func(t *testing.T)) {
	t.Run("tmpfile", f)
	t.Run("named", func(t *testing.T) {
		tmpfile = false
		defer func() { tmpfile = true }()
		f(t)
	})
}

func names(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

func TestWriteReplacesAndLeavesNoTemp(t *testing.T) {
	both(t, func(t *testing.T) {
		dir := t.TempDir()
		p := filepath.Join(dir, "f.json")
		for _, sync := range []bool{false, true} {
			for _, content := range []string{"one", "two, longer"} {
				if err := Write(p, []byte(content), 0o600, sync); err != nil {
					t.Fatal(err)
				}
				got, err := os.ReadFile(p)
				if err != nil || string(got) != content {
					t.Fatalf("read back %q, %v; want %q", got, err, content)
				}
				st, _ := os.Stat(p)
				if st.Mode().Perm() != 0o600 {
					t.Errorf("mode %v, want 0600", st.Mode().Perm())
				}
			}
		}
		if n := names(t, dir); len(n) != 1 {
			t.Errorf("temporary files left: %v", n)
		}
	})
}

func TestWriteIntoMissingDirFails(t *testing.T) {
	both(t, func(t *testing.T) {
		if err := Write(filepath.Join(t.TempDir(), "no", "f"), []byte("x"), 0o600, false); err == nil {
			t.Fatal("write into a missing directory succeeded")
		}
	})
}

// A killed writer's temporary (between link and rename) is replaced by the
// next Write and removed by Remove.
func TestLeftoverTemporaryIsCleaned(t *testing.T) {
	both(t, func(t *testing.T) {
		dir := t.TempDir()
		p := filepath.Join(dir, "entry")
		if err := os.WriteFile(TempPath(p), []byte("half"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := Write(p, []byte("full"), 0o600, false); err != nil {
			t.Fatal(err)
		}
		if n := names(t, dir); !slices.Equal(n, []string{"entry"}) {
			t.Errorf("after Write over a leftover: %v, want [entry]", n)
		}
		os.WriteFile(TempPath(p), []byte("half"), 0o600)
		if err := Remove(p); err != nil {
			t.Fatal(err)
		}
		if n := names(t, dir); len(n) != 0 {
			t.Errorf("after Remove: %v, want nothing", n)
		}
		if err := Remove(p); err != nil {
			t.Errorf("Remove of a missing file: %v", err)
		}
	})
}

func TestCreateExclusive(t *testing.T) {
	both(t, func(t *testing.T) {
		dir := t.TempDir()
		p := filepath.Join(dir, "10.1.0.5")
		ok, err := CreateExclusive(p, []byte("id\r\neth0"), 0o600)
		if err != nil || !ok {
			t.Fatalf("first create: %v, %v", ok, err)
		}
		ok, err = CreateExclusive(p, []byte("other\r\neth0"), 0o600)
		if err != nil || ok {
			t.Fatalf("second create: %v, %v; want false, nil", ok, err)
		}
		if b, _ := os.ReadFile(p); string(b) != "id\r\neth0" {
			t.Errorf("content %q: the loser overwrote it", b)
		}
		if st, _ := os.Stat(p); st.Mode().Perm() != 0o600 {
			t.Errorf("mode %v", st.Mode().Perm())
		}
		if n := names(t, dir); !slices.Equal(n, []string{"10.1.0.5"}) {
			t.Errorf("files: %v", n)
		}
	})
}

// Many writers of one target: every read sees a complete content, and no
// temporary is left.
func TestConcurrentWriters(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				if err := Write(p, []byte(fmt.Sprintf("writer %d write %d", w, i)), 0o600, false); err != nil {
					t.Error(err)
					return
				}
				if b, err := os.ReadFile(p); err != nil || !strings.HasPrefix(string(b), "writer ") {
					t.Errorf("read %q, %v", b, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if n := names(t, dir); !slices.Equal(n, []string{"f"}) {
		t.Errorf("files left: %v", n)
	}
}

func TestBoundedName(t *testing.T) {
	if got := BoundedName("net-abc-eth0", "", "net", "abc", "eth0"); got != "net-abc-eth0" {
		t.Errorf("short name changed: %q", got)
	}
	long := strings.Repeat("a", 300)
	a := BoundedName("net-"+long+"-eth0", "", "net", long, "eth0")
	b := BoundedName("net-"+long+"-eth1", "", "net", long, "eth1")
	c := BoundedName("net-"+long+"-eth0", ".json", "net", long, "eth0")
	if len(a) > NameMax || a == b || !strings.HasPrefix(a, "_") || c != a+".json" {
		t.Errorf("long names: %q %q %q", a, b, c)
	}
	// The key parts are separated: moving a '-' between parts changes it.
	if BoundedName(long, "", "a-b", "c") == BoundedName(long, "", "a", "b-c") {
		t.Error("keys (a-b, c) and (a, b-c) collide")
	}
	if exactly := strings.Repeat("x", NameMax); BoundedName(exactly, "", "k") != exactly {
		t.Error("a name of exactly NameMax characters was hashed")
	}
	if tp := TempPath("/d/" + strings.Repeat("y", NameMax)); len(filepath.Base(tp)) > NameMax || !IsTemp(filepath.Base(tp)) {
		t.Errorf("temp name of a long file: %q", tp)
	}
}

func TestIsTemp(t *testing.T) {
	for name, want := range map[string]bool{
		".n1-id-eth0.tmp": true, ".n1-id-eth0.tmp-123456": true, "._abc.tmp": true,
		"n1-id-eth0": false, ".patchbay-index": false, ".x.tmp-abc": false, "x.tmp": false,
	} {
		if IsTemp(name) != want {
			t.Errorf("IsTemp(%q) = %v", name, !want)
		}
	}
}

func TestRemoveTemps(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{".a.tmp", ".b.tmp-42", "keep", ".keep"} {
		os.WriteFile(filepath.Join(dir, n), nil, 0o600)
	}
	if err := RemoveTemps(dir); err != nil {
		t.Fatal(err)
	}
	if n := names(t, dir); !slices.Equal(n, []string{".keep", "keep"}) {
		t.Errorf("left: %v", n)
	}
	if err := RemoveTemps(filepath.Join(dir, "missing")); err != nil {
		t.Errorf("missing dir: %v", err)
	}
}
