package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// object is a JSON object with its members in order, duplicates kept: a
// plugin decoding with encoding/json takes the last of duplicate names and
// matches names case-insensitively ("DataDir" sets dataDir), another parser
// may take the first, so a check must see every member a plugin could
// read, not one chosen by a map.
type object []member

type member struct {
	name  string
	value any
}

// maxDepth bounds nesting: no plugin configuration nests this deep, and a
// check must not recurse without end on hostile input.
const maxDepth = 64

// decodeTree decodes JSON into nil, bool, string, json.Number, []any and
// object.
func decodeTree(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := decodeValue(dec, 0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("data after the JSON value")
	}
	return v, nil
}

func decodeValue(dec *json.Decoder, depth int) (any, error) {
	if depth > maxDepth {
		return nil, fmt.Errorf("nested deeper than %d levels", maxDepth)
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			obj := object{}
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					return nil, err
				}
				name, _ := k.(string)
				v, err := decodeValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				obj = append(obj, member{name, v})
			}
			if _, err := dec.Token(); err != nil {
				return nil, err
			}
			return obj, nil
		case '[':
			arr := []any{}
			for dec.More() {
				v, err := decodeValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				arr = append(arr, v)
			}
			if _, err := dec.Token(); err != nil {
				return nil, err
			}
			return arr, nil
		}
		return nil, fmt.Errorf("unexpected %v", t)
	default:
		return tok, nil
	}
}

// lookup returns the values of every member whose name matches name the
// way encoding/json matches a struct field (Unicode case folding).
func (o object) lookup(name string) []any {
	var out []any
	for _, m := range o {
		if strings.EqualFold(m.name, name) {
			out = append(out, m.value)
		}
	}
	return out
}

// jsonEqual compares two decoded scalars; numbers by value.
func jsonEqual(a, b any) bool {
	switch x := a.(type) {
	case json.Number:
		y, ok := b.(json.Number)
		if !ok {
			return false
		}
		if x == y {
			return true
		}
		fx, err1 := strconv.ParseFloat(string(x), 64)
		fy, err2 := strconv.ParseFloat(string(y), 64)
		return err1 == nil && err2 == nil && fx == fy
	case string, bool, nil:
		return a == b
	}
	return false
}

// render is a short printable form of a value for messages: JSON,
// at most maxShown bytes, control characters escaped.
func render(v any) string {
	var s string
	switch x := v.(type) {
	case string:
		s = strconv.Quote(x)
	case json.Number:
		s = string(x)
	case bool:
		s = strconv.FormatBool(x)
	case nil:
		s = "null"
	case object:
		s = "{…}"
		if len(x) == 0 {
			s = "{}"
		}
	case []any:
		s = "[…]"
		if len(x) == 0 {
			s = "[]"
		}
	}
	const maxShown = 120
	if len(s) > maxShown {
		s = s[:maxShown] + "…"
	}
	return s
}
