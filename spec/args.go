package spec

import (
	"encoding"
	"fmt"
	"reflect"
	"strconv"
	"strings"
)

// ParseCNIArgs splits CNI_ARGS ("K1=V1;K2=V2") into pairs. Empty segments
// (a trailing ';') are ignored; a segment without '=' or with an empty key is
// an error naming the segment.
func ParseCNIArgs(s string) ([][2]string, error) {
	var out [][2]string
	for _, seg := range strings.Split(s, ";") {
		if seg == "" {
			continue
		}
		k, v, ok := strings.Cut(seg, "=")
		if !ok || k == "" {
			return nil, Errorf(ErrInvalidEnvironment, "CNI_ARGS: invalid pair %q: expected KEY=VALUE", seg)
		}
		out = append(out, [2]string{k, v})
	}
	return out, nil
}

// FormatCNIArgs joins pairs back into CNI_ARGS form.
func FormatCNIArgs(pairs [][2]string) string {
	parts := make([]string, 0, len(pairs))
	for _, p := range pairs {
		parts = append(parts, p[0]+"="+p[1])
	}
	return strings.Join(parts, ";")
}

// LoadCNIArgs fills the exported fields of the struct pointed to by into from
// CNI_ARGS. A field's key is its `cni:"KEY"` tag or else its name; fields of
// embedded structs count as the outer struct's. Fields may
// be strings, bools, integers, or implement encoding.TextUnmarshaler (also
// through a pointer). A key with no field is an error (code 2) unless the args
// contain IgnoreUnknown=true/1, as the reference convention has it.
func LoadCNIArgs(s string, into any) error {
	pairs, err := ParseCNIArgs(s)
	if err != nil {
		return err
	}
	rv := reflect.ValueOf(into)
	if rv.Kind() != reflect.Pointer || rv.Elem().Kind() != reflect.Struct {
		return fmt.Errorf("LoadCNIArgs: need a pointer to a struct, got %T", into)
	}
	fields := map[string]reflect.Value{}
	collectArgFields(rv.Elem(), fields)
	ignoreUnknown := false
	for _, p := range pairs {
		if p[0] == "IgnoreUnknown" {
			b, err := strconv.ParseBool(p[1])
			if err != nil {
				return Errorf(ErrInvalidEnvironment, "CNI_ARGS: IgnoreUnknown=%q is not a boolean", p[1])
			}
			ignoreUnknown = b
		}
	}
	for _, p := range pairs {
		f, ok := fields[p[0]]
		if !ok {
			if p[0] == "IgnoreUnknown" || ignoreUnknown {
				continue
			}
			return Errorf(ErrUnsupportedField, "CNI_ARGS: unknown key %q (value %q); set IgnoreUnknown=1 to ignore unknown keys", p[0], p[1])
		}
		if err := setField(f, p[1]); err != nil {
			return Errorf(ErrInvalidEnvironment, "CNI_ARGS: invalid value %q for %s: %v", p[1], p[0], err)
		}
	}
	return nil
}

var textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()

// collectArgFields maps CNI_ARGS keys to the settable fields of struct sv.
// Fields of embedded structs are promoted (so a plugin can embed a shared
// args struct, as with the reference's CommonArgs); as in Go, a shallower
// field wins over a promoted one of the same name.
func collectArgFields(sv reflect.Value, fields map[string]reflect.Value) {
	var embedded []reflect.Value
	for i := 0; i < sv.NumField(); i++ {
		f := sv.Type().Field(i)
		fv := sv.Field(i)
		if f.Anonymous && f.Type.Kind() == reflect.Struct && !reflect.PointerTo(f.Type).Implements(textUnmarshaler) {
			embedded = append(embedded, fv)
			continue
		}
		if !f.IsExported() || !fv.CanSet() {
			continue
		}
		key := f.Name
		if tag := f.Tag.Get("cni"); tag != "" {
			key = tag
		}
		if _, dup := fields[key]; !dup {
			fields[key] = fv
		}
	}
	for _, e := range embedded {
		inner := map[string]reflect.Value{}
		collectArgFields(e, inner)
		for k, v := range inner {
			if _, dup := fields[k]; !dup {
				fields[k] = v
			}
		}
	}
}

func setField(f reflect.Value, v string) error {
	if f.Kind() == reflect.Pointer {
		if f.IsNil() {
			f.Set(reflect.New(f.Type().Elem()))
		}
		return setField(f.Elem(), v)
	}
	if f.CanAddr() && f.Addr().Type().Implements(textUnmarshaler) {
		return f.Addr().Interface().(encoding.TextUnmarshaler).UnmarshalText([]byte(v))
	}
	switch f.Kind() {
	case reflect.String:
		f.SetString(v)
	case reflect.Bool:
		b, err := strconv.ParseBool(v)
		if err != nil {
			return err
		}
		f.SetBool(b)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n, err := strconv.ParseInt(v, 10, f.Type().Bits())
		if err != nil {
			return err
		}
		f.SetInt(n)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		n, err := strconv.ParseUint(v, 10, f.Type().Bits())
		if err != nil {
			return err
		}
		f.SetUint(n)
	default:
		return fmt.Errorf("unsupported field type %s", f.Type())
	}
	return nil
}
