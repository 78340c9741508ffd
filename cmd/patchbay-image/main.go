// Command patchbay-image writes the product image, an OCI archive of the
// binaries `make build` put in bin/, for `ctr -n k8s.io images import`
// (no registry needed). `make image` runs it:
//
//	patchbay-image [-bin bin] [-out bin/patchbay-image.tar] [-ref REF]
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/patchbay-cni/patchbay/internal/ociimage"
)

func main() {
	bin := flag.String("bin", "bin", "directory of the binaries to put in the image (make build's bin/)")
	out := flag.String("out", "", "archive to write (default: BIN/"+ociimage.ProductArchive+")")
	ref := flag.String("ref", ociimage.ProductRef, "image reference recorded in the archive (what ctr imports it as)")
	flag.Parse()
	if flag.NArg() != 0 {
		fmt.Fprintln(os.Stderr, "usage: patchbay-image [-bin DIR] [-out FILE] [-ref REF]")
		os.Exit(2)
	}
	if *out == "" {
		*out = filepath.Join(*bin, ociimage.ProductArchive)
	}
	if err := run(*bin, *out, *ref); err != nil {
		fmt.Fprintln(os.Stderr, "patchbay-image:", err)
		os.Exit(1)
	}
}

func run(bin, out, ref string) error {
	img, entries, err := ociimage.WriteProduct(bin, out, ref)
	if err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	st, err := os.Stat(out)
	if err != nil {
		return err
	}
	fmt.Printf("wrote %s: %s (%s, %d files, %.1f MiB)\n", out, ref, digest, entries, float64(st.Size())/(1<<20))
	return nil
}
