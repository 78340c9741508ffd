package nodetest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/patchbay-cni/patchbay/internal/ociimage"
)

// Images every node has (imported before kubelet starts). Pods name them
// with a tag other than "latest", so kubelet never tries to pull them.
const (
	// PauseImage is the pod sandbox image (internal/nodetest/pause).
	PauseImage = "patchbay.test/pause:1"
	// BusyboxImage has Debian's static busybox with every applet linked in
	// /bin, /sbin, /usr/bin and /usr/sbin; no entrypoint, Cmd ["sh"].
	BusyboxImage = "patchbay.test/busybox:1"
)

// pausePackage is built into PauseImage.
const pausePackage = "github.com/patchbay-cni/patchbay/internal/nodetest/pause"

// buildTestImages writes the pause and busybox images as one OCI archive in
// dir and returns its path.
func buildTestImages(dir string, b binaries) (string, error) {
	pauseBin := filepath.Join(dir, "pause")
	cmd := exec.Command(b.Go, "build", "-trimpath", "-ldflags=-s -w", "-o", pauseBin, pausePackage)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s (run from inside the module): %v: %s", pausePackage, err, out)
	}
	pause, err := ociimage.Build(ociimage.Spec{
		Entries:    []ociimage.Entry{{Path: "/pause", Src: pauseBin, Mode: 0o755}},
		Entrypoint: []string{"/pause"},
	})
	if err != nil {
		return "", fmt.Errorf("pause image: %w", err)
	}
	busybox, err := busyboxImage(b.Busybox)
	if err != nil {
		return "", fmt.Errorf("busybox image: %w", err)
	}
	archive := filepath.Join(dir, "test-images.tar")
	err = ociimage.WriteArchive(archive,
		ociimage.Tagged{Ref: PauseImage, Image: pause},
		ociimage.Tagged{Ref: BusyboxImage, Image: busybox})
	return archive, err
}

// BusyboxSpec is the spec of BusyboxImage from the static busybox binary at
// path: /bin/busybox and a link for each applet it lists.
func BusyboxSpec(path string) (ociimage.Spec, error) {
	out, err := exec.Command(path, "--list-full").Output()
	if err != nil {
		return ociimage.Spec{}, fmt.Errorf("%s --list-full: %w", path, err)
	}
	entries := []ociimage.Entry{
		{Path: "/bin/busybox", Src: path, Mode: 0o755},
		{Path: "/tmp", Dir: true, Mode: 0o777 | os.ModeSticky},
	}
	for _, applet := range strings.Fields(string(bytes.TrimSpace(out))) {
		p := "/" + strings.TrimPrefix(applet, "/")
		if p == "/bin/busybox" {
			continue
		}
		entries = append(entries, ociimage.Entry{Path: p, Link: "/bin/busybox"})
	}
	return ociimage.Spec{
		Entries: entries,
		Env:     []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		Cmd:     []string{"sh"},
	}, nil
}

func busyboxImage(path string) (v1.Image, error) {
	spec, err := BusyboxSpec(path)
	if err != nil {
		return nil, err
	}
	return ociimage.Build(spec)
}
