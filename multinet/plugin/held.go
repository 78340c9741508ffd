package plugin

import (
	"context"
	"io"
	"sync/atomic"
	"time"

	"github.com/patchbay-cni/patchbay/spec"
)

// heldAdd is the cluster network's ADD, started while the pod and its
// NetworkAttachmentDefinitions are still being read: the runtime library
// runs it as usual, but its first plugin, once started, is held before it
// reads its configuration (invoke.ExecHeld). release lets it go on; refuse
// kills it before it received anything. So the plugin's start (fork, exec,
// its runtime's initialisation: about 3 ms of a Go plugin here) overlaps
// the API reads, and nothing is attached before they are checked.
type heldAdd struct {
	verdict chan error // one value: nil lets the plugin run
	done    chan heldResult
	inv     *invocation
}

type heldResult struct {
	res *spec.Result
	err error
}

// errRefused kills a held plugin; callers never see it (refuse waits the
// ADD out and discards its outcome).
var errRefused = spec.Errorf(spec.ErrInternal, "not run: the pod's ADD was refused before attaching")

// startHeldAdd starts att's ADD (the cluster network's) with its first
// plugin held. Exactly one of release or refuse must follow.
func (inv *invocation) startHeldAdd(ctx context.Context, att *Attachment) (*heldAdd, error) {
	list, err := att.List()
	if err != nil {
		return nil, err
	}
	h := &heldAdd{verdict: make(chan error, 1), done: make(chan heldResult, 1), inv: inv}
	cni := *inv.cni
	var first atomic.Bool
	cni.Exec = func(ctx context.Context, path string, env []string, stdin []byte, stderr io.Writer) ([]byte, error) {
		if !first.CompareAndSwap(false, true) { // the chain's later plugins run after the first
			return inv.exec.Exec(ctx, path, env, stdin, stderr)
		}
		return inv.exec.ExecHeld(ctx, path, env, func(ctx context.Context) ([]byte, error) {
			select {
			case err := <-h.verdict:
				if err != nil {
					return nil, err
				}
				return stdin, nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}, stderr)
	}
	rt := inv.rt(att)
	inv.log.Debug("ADD (held until the pod is checked)", "pod", inv.pod.ref(), "network", att.Name, "ifname", att.IfName)
	go func() {
		res, err := cni.AddNetworkList(ctx, list, rt)
		h.done <- heldResult{res, err}
	}()
	return h, nil
}

// release lets the held plugin read its configuration and returns the
// ADD's outcome.
func (h *heldAdd) release() (*spec.Result, error) {
	start := time.Now()
	h.verdict <- nil
	r := <-h.done
	h.inv.delegateTime += time.Since(start)
	return r.res, r.err
}

// refuse kills the held plugin, which has received nothing, and waits for
// the ADD to end: nothing was attached.
func (h *heldAdd) refuse() {
	h.verdict <- errRefused
	<-h.done
}
