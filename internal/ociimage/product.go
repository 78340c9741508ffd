package ociimage

import (
	"debug/buildinfo"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// ProductRef is the reference of the product image that `make image` writes
// and deploy/ names. Change it here (and in deploy/) on a release.
const ProductRef = "ghcr.io/patchbay-cni/patchbay:v0.1.0-dev"

// ProductArchive is the file name `make image` writes in bin/.
const ProductArchive = "patchbay-image.tar"

// Product returns the spec of the product image: every executable and link
// in binDir (`make build`'s bin/: patchbay, patchbay-plugins and its type
// links, multinet, and whatever else is there) at the image's root, so
// `/patchbay version` runs and an installer copies /<type> to the host.
// Symbolic links to files in binDir stay links (the plugin types are links
// to the multi-call binary); other links are copied as files. Tar files
// (the archive itself) and hidden files are left out.
func Product(binDir string) (Spec, error) {
	des, err := os.ReadDir(binDir)
	if err != nil {
		return Spec{}, err
	}
	s := Spec{
		// Go programs want a /tmp (os.TempDir).
		Entries: []Entry{{Path: "/tmp", Dir: true, Mode: 0o777 | fs.ModeSticky}},
		Env:     []string{"PATH=/"},
		Cmd:     []string{"/patchbay", "version"},
		Labels: map[string]string{
			"org.opencontainers.image.title":       "patchbay",
			"org.opencontainers.image.description": "Patchbay CNI plugins, the patchbay CLI and the multinet delegating plugin",
			"org.opencontainers.image.source":      "https://github.com/patchbay-cni/patchbay",
		},
	}
	var names []string
	for _, de := range des {
		n := de.Name()
		if strings.HasPrefix(n, ".") || strings.HasSuffix(n, ".tar") || de.IsDir() {
			continue
		}
		names = append(names, n)
	}
	sort.Strings(names)
	have := map[string]bool{}
	for _, n := range names {
		have[n] = true
	}
	for _, n := range names {
		p := filepath.Join(binDir, n)
		st, err := os.Lstat(p)
		if err != nil {
			return Spec{}, err
		}
		if st.Mode()&fs.ModeSymlink != 0 {
			target, err := os.Readlink(p)
			if err != nil {
				return Spec{}, err
			}
			if !strings.Contains(target, "/") && have[target] {
				s.Entries = append(s.Entries, Entry{Path: "/" + n, Link: target})
				continue
			}
			if st, err = os.Stat(p); err != nil {
				return Spec{}, fmt.Errorf("%s: %w", p, err)
			}
		}
		if !st.Mode().IsRegular() {
			continue
		}
		s.Entries = append(s.Entries, Entry{Path: "/" + n, Src: p, Mode: st.Mode().Perm()})
	}
	if !have["patchbay"] {
		return Spec{}, fmt.Errorf("%s has no patchbay binary: run `make build` first", binDir)
	}
	// The version and commit the binaries were built from, when the build
	// recorded them.
	if bi, err := buildinfo.ReadFile(filepath.Join(binDir, "patchbay")); err == nil {
		if v := bi.Main.Version; v != "" && v != "(devel)" {
			s.Labels["org.opencontainers.image.version"] = v
		}
		for _, kv := range bi.Settings {
			if kv.Key == "vcs.revision" {
				s.Labels["org.opencontainers.image.revision"] = kv.Value
			}
		}
	}
	return s, nil
}

// WriteProduct builds the product image from binDir and writes it as an OCI
// archive at out under ref (what `make image` does). It returns the image
// and the number of entries in its layer.
func WriteProduct(binDir, out, ref string) (v1.Image, int, error) {
	spec, err := Product(binDir)
	if err != nil {
		return nil, 0, err
	}
	img, err := Build(spec)
	if err != nil {
		return nil, 0, err
	}
	if err := WriteArchive(out, Tagged{Ref: ref, Image: img}); err != nil {
		return nil, 0, err
	}
	return img, len(spec.Entries), nil
}
