package firewall

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/godbus/dbus/v5"
)

// firewalld does not take rules: an attachment's addresses become sources
// of a zone ("trusted" by default), through its D-Bus API on the system
// bus (DBUS_SYSTEM_BUS_ADDRESS, else /run/dbus/system_bus_socket). The
// calls and source strings are the reference's (addSource, removeSource,
// querySource; "IP/32", "IP/128"), so either plugin removes what the other
// added. Every call is bounded by callTimeout.

const (
	fwdName     = "org.fedoraproject.FirewallD1"
	fwdPath     = "/org/fedoraproject/FirewallD1"
	fwdZone     = "org.fedoraproject.FirewallD1.zone"
	callTimeout = 10 * time.Second
)

type firewalld struct{ conn *dbus.Conn }

// connectFirewalld opens a private connection to the system bus.
func connectFirewalld(ctx context.Context) (*firewalld, error) {
	conn, err := dbus.ConnectSystemBus(dbus.WithContext(ctx))
	if err != nil {
		return nil, fmt.Errorf("connect to the D-Bus system bus: %w", err)
	}
	return &firewalld{conn: conn}, nil
}

func (f *firewalld) Close() { f.conn.Close() }

// firewalldRunning reports whether firewalld owns its name on the system
// bus: the reference's test for choosing it when "backend" is absent. With
// no system bus (no socket) this costs one failed connect.
func firewalldRunning(ctx context.Context) bool {
	f, err := connectFirewalld(ctx)
	if err != nil {
		return false
	}
	defer f.Close()
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	var owner string
	return f.conn.BusObject().CallWithContext(ctx, "org.freedesktop.DBus.GetNameOwner", 0, fwdName).Store(&owner) == nil
}

func (f *firewalld) call(ctx context.Context, method string, out any, args ...any) error {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	c := f.conn.Object(fwdName, fwdPath).CallWithContext(ctx, fwdZone+"."+method, 0, args...)
	if c.Err != nil {
		return c.Err
	}
	return c.Store(out)
}

// firewalldCode is firewalld's error code ("ZONE_ALREADY_SET", ...), which
// starts the message of the exceptions it raises.
func firewalldCode(err error) string {
	var body []any
	var de dbus.Error
	var dp *dbus.Error
	switch {
	case errors.As(err, &de):
		body = de.Body
	case errors.As(err, &dp):
		body = dp.Body
	}
	if len(body) > 0 {
		if s, ok := body[0].(string); ok {
			code, _, _ := strings.Cut(s, ":")
			return code
		}
	}
	return ""
}

// addSource binds src to zone; already bound to it is fine (a repeated
// ADD), bound to another zone is an error.
func (f *firewalld) addSource(ctx context.Context, zone, src string) error {
	var z string
	err := f.call(ctx, "addSource", &z, zone, src)
	if err != nil && firewalldCode(err) != "ZONE_ALREADY_SET" {
		return fmt.Errorf("firewalld: add %s to zone %s: %w", src, zone, err)
	}
	return nil
}

// removeSource unbinds src from zone; not bound is fine (DEL is
// idempotent).
func (f *firewalld) removeSource(ctx context.Context, zone, src string) error {
	var z string
	err := f.call(ctx, "removeSource", &z, zone, src)
	if err != nil && firewalldCode(err) != "UNKNOWN_SOURCE" {
		return fmt.Errorf("firewalld: remove %s from zone %s: %w", src, zone, err)
	}
	return nil
}

// querySource reports whether src is bound to zone.
func (f *firewalld) querySource(ctx context.Context, zone, src string) (bool, error) {
	var ok bool
	if err := f.call(ctx, "querySource", &ok, zone, src); err != nil {
		return false, fmt.Errorf("firewalld: query %s in zone %s: %w", src, zone, err)
	}
	return ok, nil
}
