package hostlocal

import (
	"bufio"
	"os"
	"strings"

	"github.com/patchbay-cni/patchbay/spec"
)

// parseResolvConf turns a resolv.conf into result DNS: nameserver, domain,
// search and options lines; comments and unknown lines are skipped.
func parseResolvConf(path string) (spec.DNS, error) {
	var d spec.DNS
	f, err := os.Open(path)
	if err != nil {
		return d, spec.Errorf(spec.ErrInvalidNetworkConfig, "ipam.resolvConf %q cannot be read: %v", path, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) < 2 {
			continue
		}
		switch fields[0] {
		case "nameserver":
			d.Nameservers = append(d.Nameservers, fields[1])
		case "domain":
			d.Domain = fields[1]
		case "search":
			d.Search = append(d.Search, fields[1:]...)
		case "options":
			d.Options = append(d.Options, fields[1:]...)
		}
	}
	if err := sc.Err(); err != nil {
		return d, spec.Errorf(spec.ErrIOFailure, "ipam.resolvConf %q: %v", path, err)
	}
	return d, nil
}
