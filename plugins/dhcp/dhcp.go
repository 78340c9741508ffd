// Package dhcp is the dhcp IPAM plugin and its daemon. The plugin is a thin
// client: the daemon (`dhcp daemon`) acquires each attachment's lease
// inside the container's network namespace, keeps it renewed (T1, unicast),
// rebinds it (T2, broadcast), sets the interface down when it expires, and
// releases it on DEL. Leases are persisted, so a restarted daemon resumes
// renewing them. Keys, defaults, socket path, protocol and result shape
// follow the reference dhcp plugin v1.9.1; see README.md for differences.
package dhcp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/patchbay-cni/patchbay/skel"
	"github.com/patchbay-cni/patchbay/spec"
)

// Plugin returns the dhcp IPAM plugin.
func Plugin() skel.Plugin {
	return skel.Plugin{
		Type:   "dhcp",
		Add:    add,
		Del:    del,
		Check:  check,
		GC:     gc,
		Status: status,
		// The daemon serialises each attachment's requests itself, and a
		// DEL must reach it while an ADD still waits for a server (DEL
		// cancels that ADD): the per-attachment lock would make the DEL
		// wait out the ADD's whole resend timeout.
		SkipAttachmentLock: true,
		About:              "patchbay dhcp IPAM plugin: leases from a DHCP server through `dhcp daemon`",
	}
}

func add(a *skel.CmdArgs) (*spec.Result, error) {
	// Validate here too, so a bad config gets code 7 without a daemon.
	_, sock, err := parseConf(a.StdinData, a.ContainerID, a.IfName, a.Args)
	if err != nil {
		return nil, err
	}
	args, err := wireArgsOf(a)
	if err != nil {
		return nil, err
	}
	var w WireResult
	if err := call(a.Ctx, sock, "DHCP.Allocate", args, &w); err != nil {
		return nil, err
	}
	return fromRPC(&w)
}

// del releases the attachment's lease. DEL needs no netns. A daemon that
// is not there (its socket absent, or left by a killed daemon and refusing
// connections) is not waited for: DEL succeeds, so that the chain's DEL
// goes on (bridge and ptp run IPAM's DEL first and stop at its error: the
// veth and rules would stay until the daemon is back). The lease is
// persisted; a daemon starting drops the leases whose namespace or
// interface is gone (the interface plugin deletes it right after this DEL),
// without a DHCPRELEASE, which needs the interface: the server keeps the
// address until the lease expires. A daemon that accepted the call but
// does not answer within answerTimeout is code 11: the runtime retries.
func del(a *skel.CmdArgs) error {
	sock := socketPath(a.StdinData)
	args, err := wireArgsOf(a)
	if err != nil {
		return err
	}
	ctx, cancel := answerContext(a.Ctx)
	defer cancel()
	err = call(ctx, sock, "DHCP.Release", args, &struct{}{})
	if errors.Is(err, errNoSocket) || errors.Is(err, errUnreachable) {
		a.Log.Warn("the dhcp daemon is not running: DEL does not wait for it; it drops this lease when it starts", "socket", sock, "error", err)
		return nil
	}
	return err
}

// answerTimeout bounds the calls the daemon answers at once (DEL, CHECK,
// GC, STATUS; ADD is bounded by the daemon's own -resendtimeout). A
// variable for the tests.
var answerTimeout = 30 * time.Second

func answerContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if ctx == nil {
		ctx = context.Background()
	}
	return context.WithTimeoutCause(ctx, answerTimeout,
		fmt.Errorf("the daemon accepted the call but did not answer within %v", answerTimeout))
}

// check verifies that the daemon holds a live lease whose address is on the
// interface, and that prevResult carries that address.
func check(a *skel.CmdArgs) error {
	_, sock, err := parseConf(a.StdinData, a.ContainerID, a.IfName, a.Args)
	if err != nil {
		return err
	}
	args, err := wireArgsOf(a)
	if err != nil {
		return err
	}
	var w WireResult
	ctx, cancel := answerContext(a.Ctx)
	defer cancel()
	if err := call(ctx, sock, "DHCP.Check", args, &w); err != nil {
		return err
	}
	res, err := fromRPC(&w)
	if err != nil {
		return err
	}
	if prev := a.Conf.PrevResult; prev != nil {
		for _, want := range res.IPs {
			found := false
			for _, got := range prev.IPs {
				if got.Address == want.Address {
					found = true
				}
			}
			if !found {
				return spec.Errorf(spec.ErrInternal, "leased address %s is missing from prevResult", want.Address)
			}
		}
	}
	return nil
}

func gc(a *skel.CmdArgs) error {
	_, sock, err := parseConf(a.StdinData, "", "", "")
	if err != nil {
		return err
	}
	var reply GCReply
	ctx, cancel := answerContext(a.Ctx)
	defer cancel()
	err = call(ctx, sock, "DHCP.GC", &GCArgs{Network: a.Conf.Name, Valid: a.Conf.Attachments()}, &reply)
	if len(reply.Released) > 0 {
		a.Log.Info("released stale leases", "leases", reply.Released)
	}
	if noMethod(err) {
		a.Log.Warn("the dhcp daemon has no GC (the reference daemon?): nothing collected", "socket", sock)
		return nil
	}
	return err
}

// noMethod reports a daemon without the method called: the reference
// daemon has only Allocate and Release.
func noMethod(err error) bool {
	var ce *spec.Error
	return errors.As(err, &ce) && strings.Contains(ce.Msg, "rpc: can't find method")
}

// status succeeds while the daemon answers; code 50 otherwise. A reference
// daemon (no Status method) answering counts as ready.
func status(a *skel.CmdArgs) error {
	_, sock, err := parseConf(a.StdinData, "", "", "")
	if err != nil {
		return err
	}
	ctx, cancel := answerContext(a.Ctx)
	defer cancel()
	err = call(ctx, sock, "DHCP.Status", &struct{}{}, &StatusReply{})
	switch {
	case err == nil:
		return nil
	case noMethod(err):
		return nil
	case errors.Is(err, errNoSocket) || errors.Is(err, errUnreachable):
		return spec.Errorf(spec.ErrPluginNotAvailable, "%v", err)
	}
	return err
}

func wireArgsOf(a *skel.CmdArgs) (*WireArgs, error) {
	ns := a.Netns
	if ns != "" {
		// The daemon runs elsewhere: it needs an absolute path.
		abs, err := filepath.Abs(ns)
		if err != nil {
			return nil, spec.Errorf(spec.ErrInvalidEnvironment, "CNI_NETNS %q: %v", ns, err)
		}
		ns = abs
	}
	return &WireArgs{ContainerID: a.ContainerID, Netns: ns, IfName: a.IfName, Args: a.Args, Path: a.Path, StdinData: a.StdinData}, nil
}

var (
	errNoSocket    = errors.New("socket absent")
	errUnreachable = errors.New("refusing connections")
)

// call runs one RPC on the daemon at sock; the runtime's context bounds it.
func call(ctx context.Context, sock, method string, args, reply any) error {
	if ctx == nil {
		ctx = context.Background()
	}
	err := rpcCall(ctx, sock, method, args, reply)
	var se rpcServerError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &se):
		return fromRPCError(method, err)
	case ctx.Err() != nil:
		return spec.Errorf(spec.ErrTryAgainLater, "daemon %s: %v", method, context.Cause(ctx))
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		why := errUnreachable
		if _, serr := os.Stat(sock); errors.Is(serr, os.ErrNotExist) {
			why = errNoSocket
		}
		return &unreachableError{sock: sock, why: why, err: err}
	}
	return fromRPCError(method, err)
}

// unreachableError is no daemon at its socket (absent, or refusing
// connections): code 11 for ADD, the runtime may retry once the daemon
// runs.
type unreachableError struct {
	sock string
	why  error
	err  error
}

func (e *unreachableError) Error() string {
	return fmt.Sprintf("daemon at %s is %v (is `dhcp daemon` running?): %v", e.sock, e.why, e.err)
}

func (e *unreachableError) Unwrap() []error {
	return []error{e.why, spec.Errorf(spec.ErrTryAgainLater, "%s", e.err)}
}
