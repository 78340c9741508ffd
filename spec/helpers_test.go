package spec

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// canon re-encodes JSON with sorted keys so two documents compare equal
// exactly when they hold the same keys and values.
func canon(t testing.TB, data []byte) string {
	t.Helper()
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, data)
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// assertJSON fails unless got and want are the same JSON document.
func assertJSON(t testing.TB, got []byte, want string) {
	t.Helper()
	if g, w := canon(t, got), canon(t, []byte(want)); g != w {
		t.Errorf("JSON differs\n got: %s\nwant: %s", g, w)
	}
}

// assertCode fails unless err is a *Error with the code and every fragment
// in its message.
func assertCode(t testing.TB, err error, code uint, fragments ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("want error with code %d, got nil", code)
	}
	var ce *Error
	if !errors.As(err, &ce) {
		t.Fatalf("want *Error with code %d, got %T: %v", code, err, err)
	}
	if ce.Code != code {
		t.Errorf("code = %d, want %d (%v)", ce.Code, code, err)
	}
	for _, f := range fragments {
		if !strings.Contains(err.Error(), f) {
			t.Errorf("error %q does not mention %q", err.Error(), f)
		}
	}
}

func jsonMarshal(v any) ([]byte, error)   { return json.Marshal(v) }
func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }
