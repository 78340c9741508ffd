package ociimage_test

import (
	"archive/tar"
	"bytes"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/patchbay-cni/patchbay/internal/ociimage"
)

// untar unpacks an archive into a new directory.
func untar(t *testing.T, archive string) string {
	t.Helper()
	dir := t.TempDir()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return dir
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, h.Name)
		if h.Typeflag == tar.TypeDir {
			os.MkdirAll(p, 0o755)
			continue
		}
		b, _ := io.ReadAll(tr)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

type layerEntry struct {
	Type     byte
	Mode     int64
	Link     string
	Contents string
}

// layerEntries reads the flattened file system of an image.
func layerEntries(t *testing.T, rc io.ReadCloser) map[string]layerEntry {
	t.Helper()
	defer rc.Close()
	out := map[string]layerEntry{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		out[strings.TrimSuffix(h.Name, "/")] = layerEntry{Type: h.Typeflag, Mode: h.Mode, Link: h.Linkname, Contents: string(b)}
	}
}

func TestArchiveRoundTrip(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "tool")
	if err := os.WriteFile(src, []byte("#!/bin/true\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	spec := ociimage.Spec{
		Entries: []ociimage.Entry{
			{Path: "/usr/bin/tool", Src: src, Mode: 0o755},
			{Path: "/etc/motd", Data: []byte("hello\n"), Mode: 0o644},
			{Path: "/bin/t", Link: "/usr/bin/tool"},
			{Path: "/tmp", Dir: true, Mode: 0o777 | fs.ModeSticky},
		},
		Entrypoint: []string{"/usr/bin/tool"},
		Env:        []string{"PATH=/usr/bin"},
		Labels:     map[string]string{"a": "b"},
	}
	img, err := ociimage.Build(spec)
	if err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(dir, "img.tar")
	const ref = "example.test/tools/tool:v1"
	if err := ociimage.WriteArchive(archive, ociimage.Tagged{Ref: ref, Image: img}); err != nil {
		t.Fatal(err)
	}

	// Read it back with the library: an OCI layout naming the image as
	// containerd's importer and the OCI spec expect.
	idx, err := layout.ImageIndexFromPath(untar(t, archive))
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 {
		t.Fatalf("%d manifests, want 1", len(im.Manifests))
	}
	d := im.Manifests[0]
	if d.MediaType != types.OCIManifestSchema1 {
		t.Errorf("manifest media type %s", d.MediaType)
	}
	want := map[string]string{"io.containerd.image.name": ref, "org.opencontainers.image.ref.name": "v1"}
	if diff := cmp.Diff(want, d.Annotations); diff != "" {
		t.Errorf("annotations (-want +got):\n%s", diff)
	}
	if d.Platform == nil || d.Platform.OS != "linux" || d.Platform.Architecture == "" {
		t.Errorf("platform %+v", d.Platform)
	}
	got, err := idx.Image(d.Digest)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := got.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(spec.Entrypoint, cfg.Config.Entrypoint); diff != "" {
		t.Errorf("entrypoint: %s", diff)
	}
	if cfg.Config.Labels["a"] != "b" || cfg.Config.Env[0] != "PATH=/usr/bin" {
		t.Errorf("config %+v", cfg.Config)
	}
	layers, err := got.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers %v %v", len(layers), err)
	}
	if mt, _ := layers[0].MediaType(); mt != types.OCILayer {
		t.Errorf("layer media type %s", mt)
	}
	files := layerEntries(t, mutate.Extract(got))
	wantFiles := map[string]layerEntry{
		"bin":          {Type: tar.TypeDir, Mode: 0o755},
		"bin/t":        {Type: tar.TypeSymlink, Mode: 0o777, Link: "/usr/bin/tool"},
		"etc":          {Type: tar.TypeDir, Mode: 0o755},
		"etc/motd":     {Type: tar.TypeReg, Mode: 0o644, Contents: "hello\n"},
		"tmp":          {Type: tar.TypeDir, Mode: 0o1777},
		"usr":          {Type: tar.TypeDir, Mode: 0o755},
		"usr/bin":      {Type: tar.TypeDir, Mode: 0o755},
		"usr/bin/tool": {Type: tar.TypeReg, Mode: 0o755, Contents: "#!/bin/true\n"},
	}
	if diff := cmp.Diff(wantFiles, files); diff != "" {
		t.Errorf("image files (-want +got):\n%s", diff)
	}

	// Reproducible: the same inputs give the same bytes.
	first, _ := os.ReadFile(archive)
	img2, err := ociimage.Build(spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := ociimage.WriteArchive(archive, ociimage.Tagged{Ref: ref, Image: img2}); err != nil {
		t.Fatal(err)
	}
	if second, _ := os.ReadFile(archive); !bytes.Equal(first, second) {
		t.Error("the same image written twice gives different archives")
	}
	// No temporary file or layout directory is left beside the archive.
	des, _ := os.ReadDir(dir)
	var names []string
	for _, de := range des {
		names = append(names, de.Name())
	}
	if diff := cmp.Diff([]string{"img.tar", "tool"}, names); diff != "" {
		t.Errorf("files beside the archive: %s", diff)
	}
}

func TestBadInput(t *testing.T) {
	for _, tc := range []struct {
		name    string
		entries []ociimage.Entry
		want    string
	}{
		{"relative path", []ociimage.Entry{{Path: "bin/x", Data: nil}}, `"bin/x"`},
		{"unclean path", []ociimage.Entry{{Path: "/bin/../x"}}, `"/bin/../x"`},
		{"root", []ociimage.Entry{{Path: "/", Dir: true}}, `"/"`},
		{"twice", []ociimage.Entry{{Path: "/x"}, {Path: "/x"}}, "given twice"},
		{"file as parent", []ociimage.Entry{{Path: "/x"}, {Path: "/x/y"}}, "not a directory"},
		{"missing source", []ociimage.Entry{{Path: "/x", Src: "/nonexistent/file"}}, "/nonexistent/file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ociimage.Build(ociimage.Spec{Entries: tc.entries})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one mentioning %s", err, tc.want)
			}
		})
	}
	img, err := ociimage.Build(ociimage.Spec{Entries: []ociimage.Entry{{Path: "/x"}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, ref := range []string{"no-tag", "UPPER/case:v1", "example.test/x@sha256:abc"} {
		err := ociimage.WriteArchive(filepath.Join(t.TempDir(), "a.tar"), ociimage.Tagged{Ref: ref, Image: img})
		if err == nil || !strings.Contains(err.Error(), ref) {
			t.Errorf("reference %q: error %v, want one naming it", ref, err)
		}
	}
}

func TestProduct(t *testing.T) {
	bin := t.TempDir()
	write := func(name, data string, mode os.FileMode) {
		if err := os.WriteFile(filepath.Join(bin, name), []byte(data), mode); err != nil {
			t.Fatal(err)
		}
	}
	write("patchbay", "cli", 0o755)
	write("patchbay-plugins", "plugins", 0o755)
	write("multinet", "multinet", 0o755)
	write(ociimage.ProductArchive, "an older archive", 0o644)
	write(".hidden", "x", 0o644)
	for _, ty := range []string{"bridge", "host-local"} {
		if err := os.Symlink("patchbay-plugins", filepath.Join(bin, ty)); err != nil {
			t.Fatal(err)
		}
	}
	outside := filepath.Join(t.TempDir(), "extra")
	if err := os.WriteFile(outside, []byte("extra"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(bin, "extra")); err != nil {
		t.Fatal(err)
	}
	spec, err := ociimage.Product(bin)
	if err != nil {
		t.Fatal(err)
	}
	img, err := ociimage.Build(spec)
	if err != nil {
		t.Fatal(err)
	}
	files := layerEntries(t, mutate.Extract(img))
	want := map[string]layerEntry{
		"bridge":           {Type: tar.TypeSymlink, Mode: 0o777, Link: "patchbay-plugins"},
		"extra":            {Type: tar.TypeReg, Mode: 0o755, Contents: "extra"},
		"host-local":       {Type: tar.TypeSymlink, Mode: 0o777, Link: "patchbay-plugins"},
		"multinet":         {Type: tar.TypeReg, Mode: 0o755, Contents: "multinet"},
		"patchbay":         {Type: tar.TypeReg, Mode: 0o755, Contents: "cli"},
		"patchbay-plugins": {Type: tar.TypeReg, Mode: 0o755, Contents: "plugins"},
		"tmp":              {Type: tar.TypeDir, Mode: 0o1777},
	}
	if diff := cmp.Diff(want, files); diff != "" {
		t.Errorf("product image files (-want +got):\n%s", diff)
	}
	cfg, _ := img.ConfigFile()
	if diff := cmp.Diff([]string{"/patchbay", "version"}, cfg.Config.Cmd); diff != "" {
		t.Errorf("cmd: %s", diff)
	}

	// Without make build's output there is nothing to package.
	if _, err := ociimage.Product(t.TempDir()); err == nil || !strings.Contains(err.Error(), "make build") {
		t.Errorf("empty bin dir: %v", err)
	}
}
