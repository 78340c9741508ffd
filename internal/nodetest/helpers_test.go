package nodetest

import (
	"slices"
	"testing"
)

func TestSetFlags(t *testing.T) {
	got := setFlags([]string{"--a=1", "--ab=2", "--c=3"}, "--a=x", "--d=4")
	want := []string{"--a=x", "--ab=2", "--c=3", "--d=4"}
	if !slices.Equal(got, want) {
		t.Errorf("setFlags: %q, want %q", got, want)
	}
}

func TestUnescapeMountinfo(t *testing.T) {
	for in, want := range map[string]string{
		`/plain`:         "/plain",
		`/with\040space`: "/with space",
		`/tab\011x\134y`: "/tab\tx\\y",
		`/trailing\04`:   `/trailing\04`,
	} {
		if got := unescapeMountinfo(in); got != want {
			t.Errorf("unescapeMountinfo(%q) = %q, want %q", in, got, want)
		}
	}
}

// The machine's cgroup hierarchies are found, each with the key
// /proc/self/cgroup uses for it.
func TestHierarchies(t *testing.T) {
	hs, err := hierarchies()
	if err != nil {
		t.Fatal(err)
	}
	own, err := ownCgroups()
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range hs {
		if _, ok := own[h.key]; !ok {
			t.Errorf("hierarchy %s: key %q not in /proc/self/cgroup %v", h.mount, h.key, own)
		}
	}
}
