package main

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"text/tabwriter"

	pbrt "github.com/patchbay-cni/patchbay/runtime"
)

// cmdList prints the networks of NETCONFPATH in load order. A broken file is
// a row of its own with its error; the listing itself still succeeds.
func cmdList(stdout io.Writer) error {
	dir := getenv("NETCONFPATH", "/etc/cni/net.d")
	files, err := pbrt.ListNetworks(dir)
	if err != nil {
		return fmt.Errorf("%s: %w", dir, err)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tVERSION\tPLUGINS\tFILE")
	for _, f := range files {
		file := filepath.Base(f.Path)
		if f.Err != nil {
			fmt.Fprintf(tw, "-\t-\t-\t%s  BROKEN: %s\n", file, oneLine(f.Err.Error()))
			continue
		}
		var types []string
		for _, p := range f.List.Plugins {
			types = append(types, p.Network.Type)
		}
		note := ""
		if f.Shadowed {
			note = " (shadowed by an earlier file)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s%s\n", f.List.Name, f.List.Version(), strings.Join(types, ","), file, note)
	}
	return tw.Flush()
}

// cmdCache prints the cached attachments; unreadable cache files are listed
// on stderr without failing the listing.
func cmdCache(stdout, stderr io.Writer, network string) error {
	c, err := newCNI(stderr)
	if err != nil {
		return err
	}
	atts, err := c.GetCachedAttachments(network, "")
	if err != nil {
		var ce *pbrt.CacheError
		if !errors.As(err, &ce) { // the directory itself is unreadable
			return err
		}
		for _, line := range strings.Split(err.Error(), "\n") {
			fmt.Fprintf(stderr, "patchbay: warning: %s\n", line)
		}
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NETWORK\tCONTAINER\tIFNAME\tNETNS\tIPS")
	for _, a := range atts {
		var ips []string
		if a.Result != nil {
			for _, ip := range a.Result.IPs {
				ips = append(ips, ip.Address.String())
			}
		}
		if len(ips) == 0 {
			ips = []string{"-"}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", a.Network, a.ContainerID, a.IfName, orDash(a.NetNS), strings.Join(ips, ","))
	}
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
