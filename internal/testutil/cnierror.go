package testutil

import (
	"strings"
	"testing"

	"github.com/patchbay-cni/patchbay/spec"
)

// ExpectCNIError wants a plugin run (stdout, exit code) to have failed with
// a CNI error of the given code whose message mentions every string.
func ExpectCNIError(t testing.TB, out string, rc, code int, mentions ...string) {
	t.Helper()
	if rc == 0 {
		t.Fatalf("succeeded, want error code %d: %s", code, out)
	}
	e, ok := spec.ParseError([]byte(out))
	if !ok {
		t.Fatalf("not an error result: %s", out)
	}
	if int(e.Code) != code {
		t.Errorf("code %d, want %d: %s", e.Code, code, e.Msg)
	}
	for _, m := range mentions {
		if !strings.Contains(e.Error(), m) {
			t.Errorf("message %q does not mention %q", e.Error(), m)
		}
	}
}
