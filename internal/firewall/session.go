package firewall

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/nftables"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/patchbay-cni/patchbay/internal/lockfile"
	"github.com/patchbay-cni/patchbay/internal/rundir"
	"github.com/patchbay-cni/patchbay/spec"
)

// Session is one plugin invocation's access to the firewall. It opens at
// most one nftables netlink connection, on first use, in the network
// namespace of the calling thread (a plugin's host namespace; tests call it
// on a thread locked into their test namespace), and every backend and
// feature of the invocation shares it. Close it when the verb ends: closing
// a socket that committed a deletion waits an RCU grace period, which is
// paid once per invocation instead of once per transaction.
type Session struct {
	ctx context.Context // bounds waits for our locks
	c   *nftables.Conn
	nl  *netlink.Conn // the socket under c, to size its buffers per batch
}

// NewSession returns a session; nothing is opened until a backend needs it.
// Its waits for the layer's locks are bounded only by the process's life
// (a runtime kills a plugin past its timeout); NewSessionContext bounds
// them by ctx.
func NewSession() *Session { return NewSessionContext(context.Background()) }

// NewSessionContext is NewSession whose lock waits end with ctx.
func NewSessionContext(ctx context.Context) *Session { return &Session{ctx: ctx} }

// Backend returns the backend of that kind.
func (s *Session) Backend(k Kind) Backend {
	if k == IPTables {
		return &iptBackend{s: s}
	}
	return &nftBackend{s: s}
}

// Close closes the connection, if one was opened.
func (s *Session) Close() error {
	if s.c == nil {
		return nil
	}
	c := s.c
	s.c, s.nl = nil, nil
	return c.CloseLasting()
}

// conn opens the nftables connection on first use.
func (s *Session) conn() (*nftables.Conn, error) {
	if s.c != nil {
		return s.c, nil
	}
	c, err := nftables.New(nftables.AsLasting(), nftables.WithSockOptions(func(nl *netlink.Conn) error {
		s.nl = nl
		return nil
	}))
	if err != nil {
		return nil, fmt.Errorf("open nftables netlink connection: %w", err)
	}
	s.c = c
	return c, nil
}

// retryable errors are those of a lost race or of lost replies: planning
// again from a fresh read converges (a commit whose acks were lost is seen
// as done, and nothing is written twice).
func retryable(err error) bool {
	var se *spec.Error
	if errors.As(err, &se) {
		return false
	}
	for _, e := range []error{unix.ENOENT, unix.EEXIST, unix.EBUSY, unix.ENOBUFS, unix.EAGAIN, unix.EINTR} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// Lock names, in the run directory (internal/rundir). nftLock
// serialises our nftables read-plan-commit cycles across processes: two
// first ADDs must not both add a shared chain's entry rule (nft guards this
// with the batch's generation ID, which the library cannot send). iptLock
// serialises our iptables-save/iptables-restore cycles.
const (
	nftLock = "nftables.lock"
	iptLock = "iptables.lock"
)

// WithLock runs f holding the exclusive lock name (a file in the run
// directory, internal/rundir): how our plugins serialise read-decide-write
// cycles across processes (the backends use one lock each; a plugin may
// hold one of its own around them, never the other way round). Waiting
// ends with ctx. The lock file stays for the next holder.
func WithLock(ctx context.Context, name string, f func() error) error {
	if ctx == nil {
		ctx = context.Background()
	}
	l, err := lockfile.Acquire(ctx, rundir.Path(name))
	if err != nil {
		return err
	}
	defer l.Unlock(false)
	return f()
}

// nftRetry runs plan-and-commit with the retry policy, under the lock.
// After a failed commit the connection may hold replies nobody read: it is
// replaced.
func (s *Session) nftRetry(f func(tx *nftTx) error) error {
	var err error
	for i := 0; i < attempts; i++ {
		var c *nftables.Conn
		if c, err = s.conn(); err != nil {
			return err
		}
		err = WithLock(s.ctx, nftLock, func() error { return f(newTx(s, c)) })
		if err == nil {
			return nil
		}
		s.Close()
		if !retryable(err) {
			return err
		}
	}
	return err
}

// Reply sizes. Every message of a batch asks for an ack, and the library
// asks the kernel to echo every new rule (NLM_F_ECHO); the kernel queues all
// of it on the socket before sendmsg returns, so the receive buffer must
// hold it at once. Measured here (kernel 6.18, bisecting the receive
// buffer for batches of 100, 1000 and 3000 DNAT rules of ~576 bytes): the
// smallest value that works is 1014-1019 bytes per message (the kernel
// doubles it: ~2 KiB of skb truesize per ack plus its share of the packed
// echoes). We give 1 KiB per message plus 3 KiB per new rule, which also
// covers kernels that send each echo in its own ~4.5 KiB skb; a buffer
// size is a limit, not an allocation.
const (
	ackBuf      = 1 << 10
	echoBufRule = 3 << 10
	sockSlack   = 64 << 10
	// defaultBuf is below the usual rmem_default/wmem_default (212992):
	// smaller batches leave the socket as it is.
	defaultBuf = 160 << 10
)

// sizeFor makes the socket's buffers big enough for a batch: sendmsg
// refuses a batch larger than the send buffer (EMSGSIZE: nothing is
// committed), and replies that overflow the receive buffer are dropped
// after the commit (ENOBUFS: the rules are there but the caller cannot
// tell). The kernel doubles the values it is given; as root the
// SO_*BUFFORCE options are used, so rmem_max/wmem_max do not cap them.
func (s *Session) sizeFor(batchBytes, msgs, newRules int) error {
	if s.nl == nil {
		return nil
	}
	if need := batchBytes + sockSlack; need > defaultBuf {
		if err := s.nl.SetWriteBuffer(need); err != nil {
			return fmt.Errorf("size the netlink send buffer for a %d-byte batch: %w", batchBytes, err)
		}
	}
	if need := msgs*ackBuf + newRules*echoBufRule + sockSlack; need > defaultBuf {
		if err := s.nl.SetReadBuffer(need); err != nil {
			return fmt.Errorf("size the netlink receive buffer for %d replies: %w", msgs, err)
		}
	}
	return nil
}
