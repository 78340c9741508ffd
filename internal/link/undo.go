package link

import (
	"fmt"
	"strings"
)

// Undo is the stack of what an ADD has changed so far, for taking it back
// when the ADD fails. Push each step right after the change it reverses;
// a deferred Unwind(&err) runs the steps newest first when err is set.
// The zero value is an empty stack.
type Undo struct {
	steps []undoStep
}

type undoStep struct {
	what string // names the step in the error, e.g. `delete "eth0"`
	f    func() error
}

// Push records a step that reverses the change just made.
func (u *Undo) Push(what string, f func() error) {
	u.steps = append(u.steps, undoStep{what, f})
}

// Unwind runs every step, newest first, when *errp is not nil, and then
// leaves *errp as it was if they all worked. A failed step does not stop
// the others; its failure is added to the message of *errp, whose CNI
// code (and errors.Is/As) stay those of the original error.
func (u *Undo) Unwind(errp *error) {
	if *errp == nil {
		return
	}
	var failed []string
	for i := len(u.steps) - 1; i >= 0; i-- {
		if err := u.steps[i].f(); err != nil {
			failed = append(failed, fmt.Sprintf("%s: %v", u.steps[i].what, err))
		}
	}
	u.steps = nil
	if len(failed) > 0 {
		*errp = &undoError{err: *errp, failed: failed}
	}
}

// undoError is the original error plus what could not be undone.
type undoError struct {
	err    error
	failed []string
}

func (e *undoError) Error() string {
	return fmt.Sprintf("%v (undoing the change also failed: %s)", e.err, strings.Join(e.failed, "; "))
}

func (e *undoError) Unwrap() error { return e.err }
