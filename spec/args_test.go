package spec

import (
	"net/netip"
	"reflect"
	"testing"
)

func TestParseCNIArgs(t *testing.T) {
	for _, c := range []struct {
		in   string
		want [][2]string
	}{
		{"", nil},
		{"FOO=BAR;ABC=123", [][2]string{{"FOO", "BAR"}, {"ABC", "123"}}},
		{"A=;B=x;", [][2]string{{"A", ""}, {"B", "x"}}},
		{";;A=1;;", [][2]string{{"A", "1"}}},
		{"K=a=b", [][2]string{{"K", "a=b"}}},
		{"K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0", [][2]string{{"K8S_POD_NAMESPACE", "default"}, {"K8S_POD_NAME", "web-0"}}},
	} {
		got, err := ParseCNIArgs(c.in)
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("ParseCNIArgs(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
		if c.in == "FOO=BAR;ABC=123" && FormatCNIArgs(got) != c.in {
			t.Errorf("FormatCNIArgs = %q", FormatCNIArgs(got))
		}
	}
	for _, bad := range []string{"FOO", "=x", "A=1;B", "A=1;=2"} {
		_, err := ParseCNIArgs(bad)
		assertCode(t, err, ErrInvalidEnvironment, "CNI_ARGS")
	}
	if FormatCNIArgs(nil) != "" {
		t.Error("FormatCNIArgs(nil)")
	}
}

type commonArgs struct {
	IgnoreUnknown bool
}

type testArgs struct {
	commonArgs
	IP      netip.Addr
	Gateway *netip.Addr
	Prefix  netip.Prefix `cni:"PREFIX"`
	Name    string       `cni:"K8S_POD_NAME"`
	Debug   bool
	Count   int8
	Size    uint16
	Ptr     *int
	//lint:ignore U1000 an unexported field LoadCNIArgs must leave alone (its presence is the test)
	hidden string
}

func TestLoadCNIArgs(t *testing.T) {
	var a testArgs
	err := LoadCNIArgs("IP=10.0.0.2;Gateway=fd00::1;PREFIX=10.0.0.0/24;K8S_POD_NAME=web-0;Debug=true;Count=-5;Size=65535;Ptr=7", &a)
	if err != nil {
		t.Fatal(err)
	}
	gw := netip.MustParseAddr("fd00::1")
	want := testArgs{IP: netip.MustParseAddr("10.0.0.2"), Gateway: &gw, Prefix: netip.MustParsePrefix("10.0.0.0/24"),
		Name: "web-0", Debug: true, Count: -5, Size: 65535, Ptr: IntPtr(7)}
	if !reflect.DeepEqual(a, want) {
		t.Errorf("got %+v\nwant %+v", a, want)
	}
	// Empty args leave the struct untouched.
	b := testArgs{Name: "keep"}
	if err := LoadCNIArgs("", &b); err != nil || b.Name != "keep" {
		t.Errorf("%v %+v", err, b)
	}
}

func TestLoadCNIArgsUnknownKeys(t *testing.T) {
	type onlyIP struct{ IP netip.Addr }
	var a onlyIP
	err := LoadCNIArgs("IP=10.0.0.2;FOO=bar", &a)
	assertCode(t, err, ErrUnsupportedField, `"FOO"`, `"bar"`)
	// IgnoreUnknown=1/true/True ignores unknown keys, wherever it appears.
	for _, args := range []string{"IgnoreUnknown=1;IP=10.0.0.2;FOO=bar", "FOO=bar;IP=10.0.0.2;IgnoreUnknown=true", "IgnoreUnknown=True;FOO=bar;IP=10.0.0.2"} {
		a = onlyIP{}
		if err := LoadCNIArgs(args, &a); err != nil || a.IP != netip.MustParseAddr("10.0.0.2") {
			t.Errorf("%s: %v %+v", args, err, a)
		}
	}
	// IgnoreUnknown=0 keeps the check.
	assertCode(t, LoadCNIArgs("IgnoreUnknown=0;FOO=bar", &a), ErrUnsupportedField, "FOO")
	assertCode(t, LoadCNIArgs("IgnoreUnknown=maybe", &a), ErrInvalidEnvironment, "IgnoreUnknown", "maybe")
	// A struct with its own IgnoreUnknown field (here promoted from an
	// embedded struct) gets it set too.
	var b testArgs
	if err := LoadCNIArgs("IgnoreUnknown=1;X=y", &b); err != nil || !b.IgnoreUnknown {
		t.Errorf("%v %+v", err, b)
	}
	// Unexported fields are not keys.
	assertCode(t, LoadCNIArgs("hidden=x", &b), ErrUnsupportedField, "hidden")
}

func TestLoadCNIArgsBadValues(t *testing.T) {
	for _, c := range []struct{ args, frag string }{
		{"IP=10.0.0.300", "IP"},
		{"Gateway=x", "Gateway"},
		{"PREFIX=10.0.0.0", "PREFIX"},
		{"Debug=yes", "Debug"},
		{"Count=128", "Count"},
		{"Size=-1", "Size"},
		{"Ptr=1.5", "Ptr"},
		{"IP=10.0.0.2;K8S_POD_NAME=a;Count=x", "Count"},
	} {
		var a testArgs
		assertCode(t, LoadCNIArgs(c.args, &a), ErrInvalidEnvironment, c.frag)
	}
	// Malformed CNI_ARGS.
	var a testArgs
	assertCode(t, LoadCNIArgs("IP", &a), ErrInvalidEnvironment, "CNI_ARGS")
	// Unsupported field types are reported, not panicked on.
	var s struct{ L []string }
	assertCode(t, LoadCNIArgs("L=a", &s), ErrInvalidEnvironment, "L")
	// into must be a pointer to a struct.
	for _, bad := range []any{nil, a, (*testArgs)(nil), new(int)} {
		if err := LoadCNIArgs("IP=10.0.0.2", bad); err == nil {
			t.Errorf("LoadCNIArgs(%T) accepted", bad)
		}
	}
}

// An outer field shadows a promoted one of the same key.
func TestLoadCNIArgsShadowing(t *testing.T) {
	type inner struct{ Name, Other string }
	type outer struct {
		inner
		Name string
	}
	var o outer
	if err := LoadCNIArgs("Name=x;Other=y", &o); err != nil {
		t.Fatal(err)
	}
	if o.Name != "x" || o.inner.Name != "" || o.Other != "y" {
		t.Errorf("%+v", o)
	}
}
