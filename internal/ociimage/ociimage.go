// Package ociimage builds small one-layer container images from files on
// this machine and writes them as OCI archives: an OCI image layout
// (oci-layout, index.json, blobs/) in a tar, which `ctr images import` reads
// without any registry. go-containerregistry makes the image format
// (manifests, config, digests, the layout); this package only says which
// files go in and tars the finished layout directory.
//
// Images are reproducible: entries are sorted, owned by root, and carry a
// fixed modification time, so the same files give the same digests.
package ociimage

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Epoch is the creation and modification time of everything in an image
// (reproducible builds; the value of SOURCE_DATE_EPOCH=0).
var Epoch = time.Unix(0, 0).UTC()

// Entry is one file, directory or symbolic link of an image's layer.
type Entry struct {
	Path string      // absolute path in the image, e.g. "/bin/sh"
	Mode fs.FileMode // permission bits (0755 when zero); ignored for links
	Dir  bool        // a directory
	Link string      // a symbolic link to this target
	Src  string      // a regular file with the contents of this host file
	Data []byte      // or with these contents (when Src is empty)
}

// Spec describes an image: its files and how it runs.
type Spec struct {
	Entries    []Entry
	Entrypoint []string
	Cmd        []string
	Env        []string
	WorkingDir string
	Labels     map[string]string
}

// Build makes an OCI image (manifest, config, one gzip layer) for the
// platform this program runs on. Parent directories missing from
// s.Entries are added with mode 0755.
func Build(s Spec) (v1.Image, error) {
	layerTar, err := layerTar(s.Entries)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching)
	if err != nil {
		return nil, fmt.Errorf("layer: %w", err)
	}
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	cfg, err := base.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", runtime.GOARCH
	cfg.Created = v1.Time{Time: Epoch}
	cfg.Config = v1.Config{
		Entrypoint: s.Entrypoint,
		Cmd:        s.Cmd,
		Env:        s.Env,
		WorkingDir: s.WorkingDir,
		Labels:     s.Labels,
	}
	img, err := mutate.ConfigFile(base, cfg)
	if err != nil {
		return nil, err
	}
	return mutate.Append(img, mutate.Addendum{
		Layer:   layer,
		History: v1.History{Created: v1.Time{Time: Epoch}, CreatedBy: "patchbay ociimage"},
	})
}

// Tagged is an image with the reference it is imported under.
type Tagged struct {
	Ref   string // full reference, e.g. "ghcr.io/patchbay-cni/patchbay:v0.1.0"
	Image v1.Image
}

// Annotations of an index entry that name the image. containerd's importer
// (ctr images import) takes the full name from io.containerd.image.name; the
// OCI annotation holds the tag, as the image-layout spec describes it.
const (
	annotationContainerdName = "io.containerd.image.name"
	annotationOCIRefName     = "org.opencontainers.image.ref.name"
)

// WriteArchive writes the images as one OCI archive at path, atomically (a
// temporary file renamed into place).
func WriteArchive(path string, images ...Tagged) error {
	if len(images) == 0 {
		return fmt.Errorf("write %s: no images", path)
	}
	var adds []mutate.IndexAddendum
	for _, t := range images {
		tag, err := name.NewTag(t.Ref, name.StrictValidation)
		if err != nil {
			return fmt.Errorf("image reference %q: %w (want registry/repository:tag)", t.Ref, err)
		}
		cfg, err := t.Image.ConfigFile()
		if err != nil {
			return err
		}
		adds = append(adds, mutate.IndexAddendum{
			Add: t.Image,
			Descriptor: v1.Descriptor{
				Platform: &v1.Platform{OS: cfg.OS, Architecture: cfg.Architecture},
				Annotations: map[string]string{
					annotationContainerdName: tag.Name(),
					annotationOCIRefName:     tag.TagStr(),
				},
			},
		})
	}
	idx := mutate.AppendManifests(empty.Index, adds...)

	dir, err := os.MkdirTemp(filepath.Dir(path), ".oci-layout-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if _, err := layout.Write(dir, idx); err != nil {
		return fmt.Errorf("write OCI layout: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	if err := tarDir(tmp, dir); err != nil {
		tmp.Close()
		return fmt.Errorf("tar OCI layout: %w", err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// tarDir writes the tree under dir (directories and regular files only, as
// an OCI layout has) to w as a tar with reproducible headers.
func tarDir(w io.Writer, dir string) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		h := &tar.Header{Name: filepath.ToSlash(rel), Mode: 0o644, ModTime: Epoch, Format: tar.FormatPAX, Uname: "root", Gname: "root"}
		if d.IsDir() {
			h.Typeflag, h.Name, h.Mode = tar.TypeDir, h.Name+"/", 0o755
			return tw.WriteHeader(h)
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("%s: not a regular file", p)
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		st, err := f.Stat()
		if err != nil {
			return err
		}
		h.Typeflag, h.Size = tar.TypeReg, st.Size()
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		_, err = io.Copy(tw, f)
		return err
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// layerTar returns the layer's uncompressed tar: every entry and its missing
// parent directories, sorted by path, owned by root, dated Epoch.
func layerTar(entries []Entry) ([]byte, error) {
	byPath := map[string]Entry{}
	for _, e := range entries {
		p := e.Path
		if !path.IsAbs(p) || path.Clean(p) != p || p == "/" {
			return nil, fmt.Errorf("entry path %q: want a clean absolute path other than /", p)
		}
		if _, dup := byPath[p]; dup {
			return nil, fmt.Errorf("entry path %q given twice", p)
		}
		byPath[p] = e
	}
	for p := range byPath {
		for d := path.Dir(p); d != "/"; d = path.Dir(d) {
			if e, ok := byPath[d]; ok {
				if !e.Dir {
					return nil, fmt.Errorf("entry %q is inside %q, which is not a directory", p, d)
				}
				continue
			}
			byPath[d] = Entry{Path: d, Dir: true}
		}
	}
	paths := make([]string, 0, len(byPath))
	for p := range byPath {
		paths = append(paths, p)
	}
	sort.Strings(paths)

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, p := range paths {
		e := byPath[p]
		h := &tar.Header{Name: strings.TrimPrefix(p, "/"), Mode: tarMode(e.Mode), ModTime: Epoch, Format: tar.FormatPAX, Uname: "root", Gname: "root"}
		var data []byte
		switch {
		case e.Dir:
			h.Typeflag, h.Name = tar.TypeDir, h.Name+"/"
		case e.Link != "":
			h.Typeflag, h.Linkname, h.Mode = tar.TypeSymlink, e.Link, 0o777
		default:
			h.Typeflag = tar.TypeReg
			data = e.Data
			if e.Src != "" {
				var err error
				if data, err = os.ReadFile(e.Src); err != nil {
					return nil, fmt.Errorf("entry %s: %w", p, err)
				}
			}
			h.Size = int64(len(data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// tarMode is the tar header mode of m: its permission bits (0755 when
// none) and tar's own setuid/setgid/sticky bits, which differ from
// fs.FileMode's.
func tarMode(m fs.FileMode) int64 {
	out := int64(m.Perm())
	if out == 0 {
		out = 0o755
	}
	if m&fs.ModeSetuid != 0 {
		out |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		out |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		out |= 0o1000
	}
	return out
}
