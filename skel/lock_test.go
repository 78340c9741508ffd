package skel

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/patchbay-cni/patchbay/internal/lockfile"
	"github.com/patchbay-cni/patchbay/spec"
)

// useLockDir points LockDir at a fresh directory for one test.
func useLockDir(t *testing.T) string {
	t.Helper()
	old := LockDir
	LockDir = filepath.Join(t.TempDir(), "locks")
	t.Cleanup(func() { LockDir = old })
	return LockDir
}

// hold takes an attachment's lock as another process's verb would.
func hold(t *testing.T, verb, id, ifName string) *lockfile.Lock {
	t.Helper()
	if err := os.MkdirAll(LockDir, 0o700); err != nil {
		t.Fatal(err)
	}
	l, err := lockfile.TryLock(lockPath("net", id, ifName))
	if err != nil || l == nil {
		t.Fatalf("lock: %v", err)
	}
	if err := l.SetInfo(verb + " " + strconv.Itoa(os.Getpid())); err != nil {
		t.Fatal(err)
	}
	return l
}

// A verb of an attachment waits while another verb of it runs; other
// attachments do not wait; the lock file goes with the verb.
func TestAttachmentLockSerialises(t *testing.T) {
	dir := useLockDir(t)
	var last *CmdArgs
	p := okPlugin(&last)
	l := hold(t, spec.CmdDel, "c1", "eth0")

	if o := runPlugin(t, p, env("ADD", "CNI_IFNAME", "eth1"), conf100); o.code != 0 {
		t.Fatalf("another interface of the container waited or failed: %+v", o)
	}
	done := make(chan outcome, 2)
	go func() { done <- runPlugin(t, p, env("ADD"), conf100) }()
	go func() { done <- runPlugin(t, p, env("DEL"), conf100) }()
	select {
	case o := <-done:
		t.Fatalf("a verb ran while the attachment was locked: %+v", o)
	case <-time.After(100 * time.Millisecond):
	}
	l.Unlock(true)
	for range 2 {
		select {
		case o := <-done:
			if o.code != 0 {
				t.Errorf("after the lock was released: %+v", o)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the waiting verbs did not run after the lock was released")
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("lock files left: %v", ents)
	}
}

// The loser of an ADD race gets a clear code-11 error at once; a lock
// file a killed ADD left does not count.
func TestConcurrentADDFailsClearly(t *testing.T) {
	useLockDir(t)
	var last *CmdArgs
	l := hold(t, spec.CmdAdd, "c1", "eth0")
	defer l.Unlock(true)
	start := time.Now()
	o := runPlugin(t, okPlugin(&last), env("ADD"), conf100)
	wantError(t, o, spec.ErrTryAgainLater, "1.0.0", "another ADD", `container "c1" interface "eth0"`, strconv.Itoa(os.Getpid()))
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("the losing ADD waited %v", d)
	}
	// A DEL holds the lock but its file still names a dead ADD (the instant
	// between locking and recording itself): the ADD waits for it.
	l.SetInfo("ADD 999999999")
	ctx0, cancel0 := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel0()
	var out0 strings.Builder
	if Run(ctx0, okPlugin(&last), env("ADD"), strings.NewReader(conf100), &out0, &out0) == 0 || strings.Contains(out0.String(), "another ADD") {
		t.Errorf("ADD behind a dead holder's record: %s", out0.String())
	}
	// CHECK and DEL wait instead; a delegating plugin does not lock at all.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	var out strings.Builder
	if Run(ctx, okPlugin(&last), env("DEL"), strings.NewReader(conf100), &out, &out) == 0 {
		t.Errorf("DEL ran while an ADD held the attachment: %s", out.String())
	}
	skip := okPlugin(&last)
	skip.SkipAttachmentLock = true
	if o := runPlugin(t, skip, env("ADD"), conf100); o.code != 0 {
		t.Errorf("SkipAttachmentLock: %+v", o)
	}
}

// A long container ID gets a bounded lock name; a DEL goes on without the
// lock when LockDir cannot be created, an ADD fails.
func TestAttachmentLockEdges(t *testing.T) {
	useLockDir(t)
	var last *CmdArgs
	long := "c" + strings.Repeat("1", 400)
	if o := runPlugin(t, okPlugin(&last), env("ADD", "CNI_CONTAINERID", long), conf100); o.code != 0 {
		t.Errorf("long ID: %+v", o)
	}
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, nil, 0o600)
	LockDir = filepath.Join(file, "locks") // cannot be a directory
	if o := runPlugin(t, okPlugin(&last), env("DEL"), conf100); o.code != 0 {
		t.Errorf("DEL without a usable LockDir: %+v", o)
	}
	o := runPlugin(t, okPlugin(&last), env("ADD"), conf100)
	wantError(t, o, spec.ErrIOFailure, "1.0.0", "cannot lock", "c1")
}

// BenchmarkRun measures the attachment lock's cost per verb, in LockDir's
// file system (PATCHBAY_BENCH_LOCKDIR to try another: /run is a tmpfs on
// most hosts, ext4 on this machine).
func BenchmarkRun(b *testing.B) {
	old := LockDir
	if d := os.Getenv("PATCHBAY_BENCH_LOCKDIR"); d != "" {
		LockDir = d
	}
	defer func() { LockDir = old }()
	var last *CmdArgs
	for _, skip := range []bool{true, false} {
		name := "with lock"
		if skip {
			name = "without lock"
		}
		p := okPlugin(&last)
		p.SkipAttachmentLock = skip
		b.Run(name, func(b *testing.B) {
			var out strings.Builder
			for b.Loop() {
				out.Reset()
				if Run(context.Background(), p, env("ADD"), strings.NewReader(conf100), &out, &out) != 0 {
					b.Fatal(out.String())
				}
			}
		})
	}
}

// A bad ipam.type is named as such; a delegate's error is prefixed with the
// delegate's type (plugins do not name themselves), keeping its code.
func TestMessagesNameKeysAndDelegates(t *testing.T) {
	useLockDir(t)
	var last *CmdArgs
	for _, typ := range []string{"../x", "a/b", "."} {
		o := runPlugin(t, okPlugin(&last), env("ADD"), `{"cniVersion":"1.0.0","name":"net","type":"ok","ipam":{"type":"`+typ+`"}}`)
		wantError(t, o, 7, "1.0.0", `"ipam.type"`, typ)
	}
	if o := runPlugin(t, okPlugin(&last), env("DEL"), `{"cniVersion":"1.0.0","name":"net","type":"ok","ipam":{"type":"../x"}}`); o.code != 0 {
		t.Errorf("DEL with a bad ipam.type: %+v", o)
	}
	dir := t.TempDir()
	linkSelf(t, dir, "selfipam")
	o := runPlugin(t, outer(), env("ADD", "CNI_PATH", dir, "SKEL_TEST_SELF_PLUGIN", "1"), `{"cniVersion":"1.0.0","name":"net","ipam":{"type":"selfipam"},"failCode":123}`)
	wantError(t, o, 123, "1.0.0", "selfipam: self asked to fail")
	takeSelfCalls()
}

// dns strings reach resolv.conf through runtimes: a newline is refused
// (code 7 naming the entry); DEL goes on regardless.
func TestDNSControlCharacters(t *testing.T) {
	useLockDir(t)
	var last *CmdArgs
	conf := `{"cniVersion":"1.0.0","name":"net","type":"ok","dns":{"nameservers":["10.0.0.1"],"search":["a.example\nnameserver 6.6.6.6"]}}`
	wantError(t, runPlugin(t, okPlugin(&last), env("ADD"), conf), 7, "1.0.0", "dns.search[0]", "newline")
	if o := runPlugin(t, okPlugin(&last), env("DEL"), conf); o.code != 0 {
		t.Errorf("DEL: %+v", o)
	}
	if o := runPlugin(t, okPlugin(&last), env("ADD"), `{"cniVersion":"1.0.0","name":"net","type":"ok","dns":{"domain":"exämple.org","options":["ndots:5"]}}`); o.code != 0 {
		t.Errorf("plain values refused: %+v", o)
	}
}
