package dhcp

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// methods are the daemon's RPC methods: the reference's Allocate (ADD) and
// Release (DEL) with its types, and ours: Check, GC, Status.
func (d *daemon) methods() map[string]rpcHandler {
	return map[string]rpcHandler{
		"DHCP.Allocate": func(dec func(any) error) (any, error) {
			a, err := decodeInto[WireArgs](dec)
			if err != nil {
				return nil, err
			}
			res, err := d.allocate(a)
			if err != nil {
				return nil, rpcError(err)
			}
			return toRPC(res), nil
		},
		"DHCP.Release": func(dec func(any) error) (any, error) {
			a, err := decodeInto[WireArgs](dec)
			if err != nil {
				return nil, err
			}
			return &struct{}{}, rpcError(d.releaseAttachment(a))
		},
		"DHCP.Check": func(dec func(any) error) (any, error) {
			a, err := decodeInto[WireArgs](dec)
			if err != nil {
				return nil, err
			}
			res, err := d.check(a)
			if err != nil {
				return nil, rpcError(err)
			}
			return toRPC(res), nil
		},
		"DHCP.GC": func(dec func(any) error) (any, error) {
			a, err := decodeInto[GCArgs](dec)
			if err != nil {
				return nil, err
			}
			released, err := d.gc(a)
			return &GCReply{Released: released}, rpcError(err)
		},
		"DHCP.Status": func(dec func(any) error) (any, error) {
			if _, err := decodeInto[struct{}](dec); err != nil {
				return nil, err
			}
			d.mu.Lock()
			defer d.mu.Unlock()
			return &StatusReply{Leases: len(d.leases)}, nil
		},
	}
}

// Run serves until ctx ends or SIGTERM/SIGINT arrives. Leases stay in the
// state directory when it stops (they are resumed on the next start);
// only DEL and GC release them.
func Run(ctx context.Context, o Options) error {
	o.setDefaults()
	ctx, stopSignals := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stopSignals()
	if o.PidFile != "" {
		if !filepath.IsAbs(o.PidFile) {
			return fmt.Errorf("-pidfile %q is not an absolute path", o.PidFile)
		}
		if err := os.WriteFile(o.PidFile, []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
			return fmt.Errorf("write pidfile: %w", err)
		}
		defer os.Remove(o.PidFile)
	}

	dctx, stopLeases := context.WithCancel(context.Background())
	d := &daemon{o: o, t: timing{first: o.Timeout, max: o.ResendMax}, log: o.Log, ctx: dctx,
		dir: o.HostPrefix + o.StateDir, leases: map[string]*lease{}, locks: map[string]*keyLock{}, pending: map[string]context.CancelFunc{}}
	defer func() {
		stopLeases()
		d.wg.Wait()
	}()
	if err := d.restore(); err != nil {
		return err
	}

	ln, activated, err := listen(o.HostPrefix + o.SocketPath)
	if err != nil {
		return err
	}
	if !activated {
		defer os.Remove(o.HostPrefix + o.SocketPath)
	}
	methods := d.methods()
	go func() {
		<-ctx.Done()
		ln.Close()
	}()
	o.Log.Info("dhcp daemon serving", "socket", o.HostPrefix+o.SocketPath, "state", d.dir, "leases", len(d.leases))
	for {
		conn, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return fmt.Errorf("accept: %w", err)
		}
		go func() {
			if err := serveRPC(conn, methods); err != nil {
				o.Log.Debug("rpc connection", "error", err)
			}
		}()
	}
}

// listen takes the socket systemd passed (socket activation, as the
// reference supports) or creates it. A stale socket file left by a killed
// daemon is replaced; a live one (another daemon answers) is an error.
func listen(path string) (ln net.Listener, activated bool, err error) {
	if os.Getenv("LISTEN_PID") == strconv.Itoa(os.Getpid()) {
		switch n := os.Getenv("LISTEN_FDS"); n {
		case "1":
			ln, err := net.FileListener(os.NewFile(3, "systemd socket"))
			if err != nil {
				return nil, false, fmt.Errorf("socket activation: %w", err)
			}
			return ln, true, nil
		default:
			return nil, false, fmt.Errorf("socket activation: LISTEN_FDS=%q, expected exactly one socket", n)
		}
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, false, err
	}
	ln, err = net.Listen("unix", path)
	if err == nil {
		return ln, false, nil
	}
	if c, derr := net.DialTimeout("unix", path, time.Second); derr == nil {
		c.Close()
		return nil, false, fmt.Errorf("another daemon is serving %s", path)
	}
	if rerr := os.Remove(path); rerr != nil {
		return nil, false, fmt.Errorf("listen on %s: %w", path, err)
	}
	ln, err = net.Listen("unix", path)
	return ln, false, err
}

// Daemon is `dhcp daemon [flags]`: it parses the reference's flags (and
// ours) and runs the daemon, returning the exit status.
func Daemon(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("dhcp daemon", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o Options
	var level slog.Level
	fs.StringVar(&o.PidFile, "pidfile", "", "write the daemon's PID to this absolute path")
	fs.StringVar(&o.HostPrefix, "hostprefix", "", "prefix of the host's root (daemon in a container): prepended to netns paths, the socket and -statedir")
	fs.StringVar(&o.SocketPath, "socketpath", DefaultSocketPath, "unix socket the plugin dials")
	fs.StringVar(&o.StateDir, "statedir", DefaultStateDir, "directory holding the leases, so a restarted daemon keeps renewing them")
	fs.BoolVar(&o.Broadcast, "broadcast", false, "set the BROADCAST flag: ask servers to broadcast their replies")
	fs.DurationVar(&o.Timeout, "timeout", DefaultTimeout, "wait for a reply to a first transmission (doubling per retransmission)")
	fs.DurationVar(&o.ResendMax, "resendmax", DefaultResendMax, "longest wait between retransmissions")
	fs.DurationVar(&o.ResendTimeout, "resendtimeout", DefaultResendTimeout, "give up acquiring a lease (ADD fails with code 11) after this")
	fs.TextVar(&level, "loglevel", slog.LevelInfo, "log level: debug, info, warn, error")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "dhcp daemon: unexpected arguments %q\n", fs.Args())
		return 2
	}
	o.Log = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	if err := Run(context.Background(), o); err != nil {
		o.Log.Error("dhcp daemon failed", "error", err)
		return 1
	}
	return 0
}
