package link

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/patchbay-cni/patchbay/spec"
)

func TestUndoUnwindsNewestFirstAndKeepsTheError(t *testing.T) {
	var ran []string
	step := func(name string, fail error) func() error {
		return func() error { ran = append(ran, name); return fail }
	}

	// Success: nothing runs.
	func() {
		var err error
		var u Undo
		defer u.Unwind(&err)
		u.Push("a", step("a", nil))
	}()
	if len(ran) != 0 {
		t.Fatalf("steps ran after a success: %v", ran)
	}

	// Failure, every step works: all run, newest first; the error is the
	// original one, unchanged.
	orig := spec.Errorf(spec.ErrInvalidNetworkConfig, "bad key")
	err := func() (err error) {
		var u Undo
		defer u.Unwind(&err)
		u.Push("a", step("a", nil))
		u.Push("b", step("b", nil))
		return orig
	}()
	if strings.Join(ran, ",") != "b,a" || err != orig {
		t.Fatalf("ran %v, err %v; want b,a and the original error", ran, err)
	}

	// Failure, some steps fail: the rest still run; the message names what
	// could not be undone; code and errors.Is stay the original's.
	ran = nil
	err = func() (err error) {
		var u Undo
		defer u.Unwind(&err)
		u.Push(`delete "eth0"`, step("a", errors.New("device busy")))
		u.Push("b", step("b", nil))
		u.Push("release the IPAM allocation", step("c", fmt.Errorf("no such file")))
		return orig
	}()
	if strings.Join(ran, ",") != "c,b,a" {
		t.Errorf("ran %v, want c,b,a", ran)
	}
	if !errors.Is(err, orig) {
		t.Errorf("errors.Is(err, orig) = false for %v", err)
	}
	ce := spec.AsError(err, spec.ErrInternal)
	want := `bad key (undoing the change also failed: release the IPAM allocation: no such file; delete "eth0": device busy)`
	if ce.Code != spec.ErrInvalidNetworkConfig || ce.Msg != want {
		t.Errorf("CNI error = %d %q, want 7 %q", ce.Code, ce.Msg, want)
	}
}
