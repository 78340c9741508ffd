package spec

import (
	"encoding/json"
	"slices"
	"testing"
)

func TestParseVersion(t *testing.T) {
	for in, want := range map[string]Semver{"1.1.0": {1, 1, 0}, "0.3.1": {0, 3, 1}, "1": {1, 0, 0}, "1.2": {1, 2, 0}, "10.20.30": {10, 20, 30}} {
		got, err := ParseVersion(in)
		if err != nil || got != want {
			t.Errorf("ParseVersion(%q) = %v, %v", in, got, err)
		}
	}
	for _, bad := range []string{"", ".", "1.", "1..0", "1.0.0.0", "a.b.c", "-1.0.0", "1.0.0-rc1", "v1.0.0", "+1.0.0", " 1.0.0"} {
		if _, err := ParseVersion(bad); err == nil {
			t.Errorf("ParseVersion(%q) accepted", bad)
		}
	}
	if s := (Semver{1, 2, 3}).String(); s != "1.2.3" {
		t.Error(s)
	}
}

func TestCompare(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want int
	}{
		{"1.0.0", "0.4.0", 1}, {"0.3.0", "0.3.1", -1}, {"1.1.0", "1.1.0", 0}, {"0.10.0", "0.9.0", 1},
		{"1", "1.0.0", 0}, {"x", "0.1.0", -1}, {"0.1.0", "x", 1}, {"x", "y", 0},
	} {
		if got := Compare(c.a, c.b); got != c.want {
			t.Errorf("Compare(%q, %q) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
	if !GreaterOrEqual("1.0.0", "1.0.0") || GreaterOrEqual("0.4.0", "1.0.0") {
		t.Error("GreaterOrEqual")
	}
}

func TestVersionsAndVerbs(t *testing.T) {
	if !slices.Equal(AllVersions, []string{"0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"}) || Current != "1.1.0" {
		t.Fatalf("AllVersions = %v, Current = %s", AllVersions, Current)
	}
	if ConfigVersion("") != V020 || ConfigVersion(V100) != V100 {
		t.Error("ConfigVersion")
	}
	for _, v := range AllVersions {
		if !IsSupported(v) {
			t.Errorf("IsSupported(%s)", v)
		}
		ge := func(min string) bool { return Compare(v, min) >= 0 }
		for verb, want := range map[string]bool{
			CmdAdd: true, CmdDel: true, CmdVersion: true, CmdCheck: ge(V040), CmdGC: ge(V110), CmdStatus: ge(V110), "FOO": false,
		} {
			if got := VerbSupported(v, verb); got != want {
				t.Errorf("VerbSupported(%s, %s) = %v", v, verb, got)
			}
		}
	}
	for _, v := range []string{"", "1.2.0", "0.5.0", "1.0"} {
		if IsSupported(v) {
			t.Errorf("IsSupported(%q)", v)
		}
	}
}

func TestHighestCommon(t *testing.T) {
	for _, c := range []struct {
		v       string
		vs, sup []string
		want    string
	}{
		{"1.0.0", nil, nil, "1.0.0"},
		{"0.3.1", []string{"1.1.0", "0.4.0"}, nil, "1.1.0"},
		{"1.1.0", []string{"1.0.0"}, []string{"0.4.0", "1.0.0"}, "1.0.0"},
		{"2.0.0", []string{"1.5.0"}, nil, ""},
		{"", nil, nil, ""},
		{"", []string{"0.1.0", "x"}, nil, "0.1.0"},
	} {
		if got := HighestCommon(c.v, c.vs, c.sup); got != c.want {
			t.Errorf("HighestCommon(%q, %v, %v) = %q, want %q", c.v, c.vs, c.sup, got, c.want)
		}
	}
}

func TestVersionResultJSON(t *testing.T) {
	b, _ := json.Marshal(VersionResult{CNIVersion: V100, SupportedVersions: AllVersions})
	assertJSON(t, b, `{"cniVersion":"1.0.0","supportedVersions":["0.1.0","0.2.0","0.3.0","0.3.1","0.4.0","1.0.0","1.1.0"]}`)
}
