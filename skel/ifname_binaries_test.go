package skel_test

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/patchbay-cni/patchbay/internal/testutil"
	"github.com/patchbay-cni/patchbay/spec"
)

// Every built plugin (bin/, multinet included) answers DEL of an interface
// name longer than the kernel allows with success and no output, and ADD of
// it with code 4 naming CNI_IFNAME: a runtime or a delegating plugin that
// sends such a name (and DELs after the refused ADD) never leaves the pod
// stuck terminating. The binaries run as a runtime would run them; nothing
// touches a network namespace (the name is refused before any work).
func TestBuiltPluginsDelAnInterfaceNameADDRefuses(t *testing.T) {
	bin := testutil.OurBin(t)
	const long = "a-very-long-interface-name"
	for _, typ := range []string{"bridge", "ptp", "host-local", "static", "tuning", "portmap", "loopback", "multinet"} {
		t.Run(typ, func(t *testing.T) {
			path := filepath.Join(bin, typ)
			if _, err := os.Stat(path); err != nil {
				t.Fatalf("%v (run `make build`)", err)
			}
			conf := `{"cniVersion":"1.0.0","name":"net","type":"` + typ + `","clusterNetwork":"/nonexistent","ipam":{"type":"host-local","subnet":"10.99.0.0/24","dataDir":"/nonexistent"}}`
			run := func(cmd string) (int, string) {
				c := exec.Command(path)
				c.Env = []string{"CNI_COMMAND=" + cmd, "CNI_CONTAINERID=c1", "CNI_NETNS=/nonexistent/netns",
					"CNI_IFNAME=" + long, "CNI_PATH=" + bin}
				c.Stdin = strings.NewReader(conf)
				var out bytes.Buffer
				c.Stdout = &out
				err := c.Run()
				code := 0
				if ee, ok := err.(*exec.ExitError); ok {
					code = ee.ExitCode()
				} else if err != nil {
					t.Fatal(err)
				}
				return code, out.String()
			}
			if code, out := run("DEL"); code != 0 || out != "" {
				t.Errorf("DEL with CNI_IFNAME %q: exit %d, stdout %q; want success with no output", long, code, out)
			}
			code, out := run("ADD")
			var e spec.Error
			if code != 1 || json.Unmarshal([]byte(out), &e) != nil || e.Code != spec.ErrInvalidEnvironment || !strings.Contains(e.Msg, "CNI_IFNAME") {
				t.Errorf("ADD with CNI_IFNAME %q: exit %d, stdout %q; want code %d naming CNI_IFNAME", long, code, out, spec.ErrInvalidEnvironment)
			}
		})
	}
}
