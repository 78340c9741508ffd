package dhcp

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"

	"github.com/patchbay-cni/patchbay/internal/atomicfile"
	"github.com/patchbay-cni/patchbay/internal/netns"
	"github.com/patchbay-cni/patchbay/spec"
)

// Options configure the daemon; the flags of `dhcp daemon` set them.
type Options struct {
	// SocketPath is the unix socket the plugin dials (default
	// /run/cni/dhcp.sock).
	SocketPath string
	// HostPrefix is prepended to namespace paths, the socket and the state
	// directory, for a daemon running in a container with the host's root
	// mounted there (the reference's -hostprefix).
	HostPrefix string
	// StateDir holds one file per lease (default /var/lib/cni/dhcp).
	StateDir string
	// PidFile, when set, receives the daemon's PID.
	PidFile string
	// Broadcast sets the BROADCAST flag in DISCOVER and REQUEST, asking the
	// server to broadcast its replies.
	Broadcast bool
	// Timeout is the wait for a reply to a first transmission; each
	// retransmission doubles it up to ResendMax.
	Timeout   time.Duration
	ResendMax time.Duration
	// ResendTimeout bounds acquiring a lease (ADD): past it ADD fails with
	// code 11 (try again later).
	ResendTimeout time.Duration
	Log           *slog.Logger
}

// Defaults for the daemon's flags.
const (
	DefaultStateDir      = "/var/lib/cni/dhcp"
	DefaultTimeout       = 4 * time.Second // RFC 2131 4.1's first retransmission delay
	DefaultResendMax     = 62 * time.Second
	DefaultResendTimeout = 208 * time.Second // the reference's
)

func (o *Options) setDefaults() {
	if o.SocketPath == "" {
		o.SocketPath = DefaultSocketPath
	}
	if o.StateDir == "" {
		o.StateDir = DefaultStateDir
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.ResendMax <= 0 {
		o.ResendMax = DefaultResendMax
	}
	if o.ResendTimeout <= 0 {
		o.ResendTimeout = DefaultResendTimeout
	}
	if o.Log == nil {
		o.Log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
}

// daemon holds the leases it maintains.
type daemon struct {
	o      Options
	t      timing
	log    *slog.Logger
	ctx    context.Context // ends when the daemon stops
	dir    string
	mu     sync.Mutex
	leases map[string]*lease
	locks  map[string]*keyLock
	// pending holds the cancel of each ADD still exchanging.
	pending map[string]context.CancelFunc
	wg      sync.WaitGroup
}

// lease is one maintained lease; its goroutine renews and rebinds it.
type lease struct {
	mu   sync.Mutex // guards rec and ack
	rec  record
	ack  *dhcpv4.DHCPv4
	stop context.CancelFunc
	done chan struct{}
}

func (l *lease) snapshot() (record, *dhcpv4.DHCPv4) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rec, l.ack
}

// keyLock serializes operations on one attachment (ADD and DEL of the same
// attachment must not interleave; different attachments run in parallel).
type keyLock struct {
	mu   sync.Mutex
	refs int
}

func (d *daemon) lock(key string) func() {
	d.mu.Lock()
	kl := d.locks[key]
	if kl == nil {
		kl = &keyLock{}
		d.locks[key] = kl
	}
	kl.refs++
	d.mu.Unlock()
	kl.mu.Lock()
	return func() {
		kl.mu.Unlock()
		d.mu.Lock()
		if kl.refs--; kl.refs == 0 {
			delete(d.locks, key)
		}
		d.mu.Unlock()
	}
}

func (d *daemon) get(key string) *lease {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.leases[key]
}

func (d *daemon) nsPath(p string) string { return d.o.HostPrefix + p }

func (d *daemon) file(key string) string {
	sum := sha256.Sum256([]byte(key))
	return filepath.Join(d.dir, hex.EncodeToString(sum[:16])+".json")
}

// save persists a lease record atomically (a reader sees the old or the new
// file). No fsync: a record describes an interface in a namespace, which a
// power loss does not keep either.
func (d *daemon) save(r *record) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return atomicfile.Write(d.file(r.key()), b, 0o600, false)
}

func (d *daemon) remove(key string) {
	if err := os.Remove(d.file(key)); err != nil && !errors.Is(err, os.ErrNotExist) {
		d.log.Warn("remove lease record", "lease", key, "error", err)
	}
}

// allocate is ADD: return the attachment's lease, acquiring one if it has
// none (a repeated ADD gets the lease it already holds).
func (d *daemon) allocate(a *WireArgs) (*spec.Result, error) {
	c, _, err := parseConf(a.StdinData, a.ContainerID, a.IfName, a.Args)
	if err != nil {
		return nil, err
	}
	if a.ContainerID == "" || a.IfName == "" || a.Netns == "" {
		return nil, spec.Errorf(spec.ErrInvalidEnvironment, "ADD needs CNI_CONTAINERID, CNI_IFNAME and CNI_NETNS")
	}
	key := leaseKey(c.Network, c.ContainerID, c.IfName)
	unlock := d.lock(key)
	defer unlock()
	// A DEL of this attachment arriving meanwhile (the runtime gave up on
	// this ADD) cancels the exchange instead of waiting it out.
	ctx, cancelTimeout := context.WithTimeoutCause(d.ctx, d.o.ResendTimeout,
		fmt.Errorf("no DHCP server answered within %v", d.o.ResendTimeout))
	defer cancelTimeout()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	d.mu.Lock()
	d.pending[key] = func() { cancel(errors.New("cancelled by a DEL of the same attachment")) }
	d.mu.Unlock()
	defer func() {
		d.mu.Lock()
		delete(d.pending, key)
		d.mu.Unlock()
	}()

	if l := d.get(key); l != nil {
		rec, ack := l.snapshot()
		if rec.Netns == a.Netns && rec.Lost == "" && slices.Equal(rec.ClientID, c.ClientID) && time.Now().Before(rec.Expire) {
			return leaseResult(ack, c.Priority)
		}
		// A stale lease of an earlier attachment with the same name:
		// give it back before taking a new one.
		d.drop(l, "replaced by a new ADD")
	}

	r := &record{Version: recordVersion, Network: c.Network, ContainerID: c.ContainerID, IfName: c.IfName, Netns: a.Netns,
		ClientID: c.ClientID, Provide: c.Provide, Request: c.Request, Priority: c.Priority}
	att, err := openAttachment(d.nsPath(a.Netns), a.IfName)
	if err != nil {
		var g *errGone
		if errors.As(err, &g) {
			return nil, spec.Errorf(spec.ErrUnknownContainer, "%v", err)
		}
		return nil, err
	}
	defer att.Close()
	began := time.Now()
	d.log.Info("acquiring lease", "lease", key, "netns", a.Netns)
	ack, mac, sent, err := acquire(ctx, d.log.With("lease", key), att, r, d.t, d.o.Broadcast)
	if err != nil {
		if errors.Is(err, errTimeout) {
			return nil, spec.Errorf(spec.ErrTryAgainLater, "no lease for %s on %s: %v", a.IfName, a.Netns, err)
		}
		return nil, fmt.Errorf("no lease for %s on %s: %w", a.IfName, a.Netns, err)
	}
	r.commit(ack, mac, sent)
	res, err := leaseResult(ack, c.Priority)
	if err != nil {
		return nil, err
	}
	if err := d.save(r); err != nil {
		// Without its record the lease would be lost on restart: give it back.
		if rerr := release(att, r, ack); rerr != nil {
			d.log.Warn("release after failed save", "lease", key, "error", rerr)
		}
		return nil, fmt.Errorf("persist lease: %w", err)
	}
	d.start(r, ack)
	d.log.Info("lease acquired", "lease", key, "address", res.IPs[0].Address, "renew", r.Renew, "expire", r.Expire,
		"took", time.Since(began).Round(time.Microsecond))
	return res, nil
}

// start begins maintaining a lease.
func (d *daemon) start(r *record, ack *dhcpv4.DHCPv4) {
	ctx, cancel := context.WithCancel(d.ctx)
	l := &lease{rec: *r, ack: ack, stop: cancel, done: make(chan struct{})}
	d.mu.Lock()
	d.leases[r.key()] = l
	d.mu.Unlock()
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		defer close(l.done)
		d.maintain(ctx, l)
	}()
}

// maintain keeps a lease bound: RENEWING from T1 (unicast to the server),
// REBINDING from T2 (broadcast, any server), and at expiry or on a DHCPNAK
// the interface is set down (the reference's behaviour: the address may
// now be given to someone else). It ends when the lease is released, the
// interface disappears, or the daemon stops.
func (d *daemon) maintain(ctx context.Context, l *lease) {
	for {
		rec, ack := l.snapshot()
		if rec.Lost != "" {
			return
		}
		key := rec.key()
		now := time.Now()
		if now.Before(rec.Renew) {
			select {
			case <-ctx.Done():
				return
			case <-time.After(rec.Renew.Sub(now)):
			}
			continue
		}
		if !now.Before(rec.Expire) {
			d.lose(l, fmt.Sprintf("lease expired at %s", rec.Expire.UTC().Format(time.RFC3339)))
			return
		}
		rebinding := !now.Before(rec.Rebind)
		deadline := rec.Rebind
		if rebinding {
			deadline = rec.Expire
		}
		att, err := openAttachment(d.nsPath(rec.Netns), rec.IfName)
		if err != nil {
			var g *errGone
			if errors.As(err, &g) {
				d.log.Info("interface gone: no longer maintaining lease", "lease", key, "reason", err)
				d.forget(l)
				return
			}
			d.log.Warn("renew: cannot reach interface", "lease", key, "error", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(min(d.o.Timeout, time.Until(deadline))):
			}
			continue
		}
		state := "renewing"
		if rebinding {
			state = "rebinding"
		}
		d.log.Info(state, "lease", key, "until", deadline)
		nack, mac, sent, err := extend(ctx, att, &rec, ack, rebinding, deadline, d.t, d.o.Broadcast)
		att.Close()
		if ctx.Err() != nil {
			return
		}
		var nak *errNak
		switch {
		case err == nil:
			l.mu.Lock()
			l.rec.commit(nack, mac, sent)
			l.ack = nack
			saved := l.rec
			l.mu.Unlock()
			if err := d.save(&saved); err != nil {
				d.log.Error("persist renewed lease", "lease", key, "error", err)
			}
			d.log.Info("lease extended", "lease", key, "state", state, "renew", saved.Renew, "expire", saved.Expire)
		case errors.As(err, &nak):
			d.lose(l, err.Error())
			return
		case errors.Is(err, errTimeout):
			d.log.Warn(state+": no answer", "lease", key, "until", deadline)
		default:
			d.log.Warn(state+" failed", "lease", key, "error", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(min(d.o.Timeout, max(time.Until(deadline), 0))):
			}
		}
	}
}

// lose marks a lease lost and sets its interface down, so the container
// stops using an address the server may hand to someone else.
func (d *daemon) lose(l *lease, why string) {
	l.mu.Lock()
	l.rec.Lost = why + " (at " + time.Now().UTC().Format(time.RFC3339) + ")"
	rec := l.rec
	l.mu.Unlock()
	d.log.Warn("lease lost: setting the interface down", "lease", rec.key(), "reason", why)
	if att, err := openAttachment(d.nsPath(rec.Netns), rec.IfName); err == nil {
		if err := att.ns.H.LinkSetDown(att.l); err != nil {
			d.log.Warn("set interface down", "lease", rec.key(), "error", err)
		}
		att.Close()
	}
	if err := d.save(&rec); err != nil {
		d.log.Error("persist lost lease", "lease", rec.key(), "error", err)
	}
}

// forget drops a lease without releasing it (its interface is gone).
func (d *daemon) forget(l *lease) {
	rec, _ := l.snapshot()
	d.mu.Lock()
	if d.leases[rec.key()] == l {
		delete(d.leases, rec.key())
	}
	d.mu.Unlock()
	d.remove(rec.key())
}

// drop stops maintaining a lease and releases it at the server while its
// interface still exists. The caller holds the attachment's lock.
func (d *daemon) drop(l *lease, why string) {
	l.stop()
	<-l.done
	rec, ack := l.snapshot()
	key := rec.key()
	switch {
	case rec.Lost != "" || !time.Now().Before(rec.Expire):
		d.log.Info("dropping lost lease", "lease", key, "why", why)
	default:
		att, err := openAttachment(d.nsPath(rec.Netns), rec.IfName)
		if err != nil {
			d.log.Warn("lease not released: the interface is gone; the server keeps it until it expires",
				"lease", key, "address", net.IP(ack.YourIPAddr), "expire", rec.Expire, "reason", err)
			break
		}
		if err := release(att, &rec, ack); err != nil {
			d.log.Warn("DHCPRELEASE failed", "lease", key, "error", err)
		} else {
			d.log.Info("lease released", "lease", key, "address", net.IP(ack.YourIPAddr), "why", why)
		}
		att.Close()
	}
	d.forget(l)
}

// releaseAttachment is DEL: release the attachment's lease if it holds
// one. It needs nothing but the network name from the config, so DEL works
// even with a config that no longer validates.
func (d *daemon) releaseAttachment(a *WireArgs) error {
	var n struct {
		Name string `json:"name"`
	}
	if err := json.Unmarshal(a.StdinData, &n); err != nil {
		return spec.NewError(spec.ErrDecodingFailure, "failed to decode network configuration", err.Error())
	}
	key := leaseKey(n.Name, a.ContainerID, a.IfName)
	d.mu.Lock()
	if cancel := d.pending[key]; cancel != nil {
		d.log.Info("DEL cancels the ADD in progress", "lease", key)
		cancel()
	}
	d.mu.Unlock()
	unlock := d.lock(key)
	defer unlock()
	if l := d.get(key); l != nil {
		d.drop(l, "DEL")
	}
	return nil
}

// check is CHECK: the attachment holds a live lease and its address is
// configured on the interface. It returns the lease's result.
func (d *daemon) check(a *WireArgs) (*spec.Result, error) {
	c, _, err := parseConf(a.StdinData, a.ContainerID, a.IfName, a.Args)
	if err != nil {
		return nil, err
	}
	key := leaseKey(c.Network, c.ContainerID, c.IfName)
	unlock := d.lock(key)
	defer unlock()
	l := d.get(key)
	if l == nil {
		return nil, spec.Errorf(spec.ErrInternal, "the daemon holds no lease for %s", key)
	}
	rec, ack := l.snapshot()
	if rec.Lost != "" {
		return nil, spec.Errorf(spec.ErrInternal, "lease for %s lost: %s", key, rec.Lost)
	}
	if !time.Now().Before(rec.Expire) {
		return nil, spec.Errorf(spec.ErrInternal, "lease for %s expired at %s", key, rec.Expire.UTC().Format(time.RFC3339))
	}
	if a.Netns != "" && a.Netns != rec.Netns {
		return nil, spec.Errorf(spec.ErrInternal, "lease for %s is held for namespace %q, not %q", key, rec.Netns, a.Netns)
	}
	res, err := leaseResult(ack, c.Priority)
	if err != nil {
		return nil, err
	}
	att, err := openAttachment(d.nsPath(rec.Netns), rec.IfName)
	if err != nil {
		return nil, spec.Errorf(spec.ErrInternal, "lease for %s: %v", key, err)
	}
	defer att.Close()
	want := res.IPs[0].Address
	addrs, err := att.ns.AddrList(att.l, 2 /* AF_INET */)
	if err != nil {
		return nil, fmt.Errorf("list addresses of %s: %w", rec.IfName, err)
	}
	for _, ad := range addrs {
		if p, ok := prefixOf(*ad.IPNet); ok && p == want {
			return res, nil
		}
	}
	return nil, spec.Errorf(spec.ErrInternal, "leased address %s is not configured on %s in %s", want, rec.IfName, rec.Netns)
}

// gc is GC: release the leases of network whose attachments are not in
// valid.
func (d *daemon) gc(a *GCArgs) ([]string, error) {
	keep := map[string]bool{}
	for _, v := range a.Valid {
		keep[leaseKey(a.Network, v.ContainerID, v.IfName)] = true
	}
	d.mu.Lock()
	var stale []string
	for key, l := range d.leases {
		if l.rec.Network == a.Network && !keep[key] {
			stale = append(stale, key)
		}
	}
	d.mu.Unlock()
	slices.Sort(stale)
	var released []string
	for _, key := range stale {
		unlock := d.lock(key)
		if l := d.get(key); l != nil {
			d.drop(l, "GC")
			released = append(released, key)
		}
		unlock()
	}
	return released, nil
}

// restore loads the persisted leases, drops those whose namespace or
// interface is gone, and resumes maintaining the others (renewing at once
// when T1 passed while the daemon was down, rebinding past T2, giving up
// past expiry).
func (d *daemon) restore() error {
	if err := os.MkdirAll(d.dir, 0o700); err != nil {
		return fmt.Errorf("state directory: %w", err)
	}
	// A write a kill interrupted (the state directory is the daemon's own:
	// every temporary in it is).
	if err := atomicfile.RemoveTemps(d.dir); err != nil {
		d.log.Warn("remove temporary files", "dir", d.dir, "error", err)
	}
	ents, err := os.ReadDir(d.dir)
	if err != nil {
		return fmt.Errorf("state directory: %w", err)
	}
	for _, e := range ents {
		name := e.Name()
		if !strings.HasSuffix(name, ".json") {
			continue
		}
		path := filepath.Join(d.dir, name)
		b, err := os.ReadFile(path)
		if err != nil {
			d.log.Warn("skip lease record", "file", path, "error", err)
			continue
		}
		var r record
		if err := json.Unmarshal(b, &r); err != nil || r.Version != recordVersion || d.file(r.key()) != path {
			d.log.Warn("removing unreadable lease record", "file", path, "error", err)
			os.Remove(path)
			continue
		}
		ack, err := dhcpv4.FromBytes(r.ACK)
		if err != nil {
			d.log.Warn("removing lease record with an undecodable ACK", "file", path, "error", err)
			os.Remove(path)
			continue
		}
		if netns.Gone(d.nsPath(r.Netns)) {
			d.log.Info("dropping lease of a namespace that is gone", "lease", r.key(), "netns", r.Netns)
			os.Remove(path)
			continue
		}
		// The interface gone too: the attachment was deleted while the
		// daemon was down (its DEL succeeded without it). No DHCPRELEASE
		// can be sent without the interface: the server keeps the address
		// until the lease expires.
		if att, err := openAttachment(d.nsPath(r.Netns), r.IfName); err == nil {
			att.Close()
		} else if g := (*errGone)(nil); errors.As(err, &g) {
			d.log.Info("dropping lease of an interface that is gone", "lease", r.key(), "reason", err, "address", net.IP(ack.YourIPAddr), "expire", r.Expire)
			os.Remove(path)
			continue
		}
		d.log.Info("resuming lease", "lease", r.key(), "address", net.IP(ack.YourIPAddr), "renew", r.Renew, "expire", r.Expire, "lost", r.Lost)
		d.start(&r, ack)
	}
	return nil
}
