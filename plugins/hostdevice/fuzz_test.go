package hostdevice

import (
	"encoding/json"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"github.com/patchbay-cni/patchbay/skel"
	"github.com/patchbay-cni/patchbay/spec"
)

// FuzzConfig: host-device's configuration parsing and the sysfs lookups
// behind deviceID/pciBusID never panic and refuse with code 6 or 7 only;
// what is accepted names sysfs paths inside the kernel's trees only, and
// the record's path stays inside dataDir.
func FuzzConfig(f *testing.F) {
	for _, extra := range []map[string]any{
		{"device": "eth1"},
		{"hwaddr": "02:00:00:00:00:01"},
		{"kernelpath": "/sys/devices/pci0000:00/0000:00:03.0"},
		{"kernelpath": "/sys/devices/../../etc"},
		{"pciBusID": "0000:00:03.0"},
		{"pciBusID": "../../../../etc/passwd"},
		{"runtimeConfig": map[string]any{"deviceID": "0000:00:03.0"}},
		{"runtimeConfig": map[string]any{"deviceID": "mlx5_core.sf.4"}},
		{"runtimeConfig": map[string]any{"deviceID": "../x"}},
		{"device": "eth1", "dataDir": "relative"},
		{},
	} {
		m := map[string]any{"cniVersion": "1.1.0", "name": "hdfuzz", "type": "host-device"}
		for k, v := range extra {
			m[k] = v
		}
		b, _ := json.Marshal(m)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, stdin []byte) {
		c, err := load(&skel.CmdArgs{StdinData: stdin, ContainerID: "ctr", IfName: "eth0"})
		if err == nil {
			err = c.resolveDeviceID()
		}
		if err != nil {
			var se *spec.Error
			if !errors.As(err, &se) || (se.Code != spec.ErrInvalidNetworkConfig && se.Code != spec.ErrDecodingFailure) {
				t.Fatalf("refused without code 6 or 7: %v", err)
			}
			return
		}
		if c.Device != "" && spec.ValidateInterfaceName(c.Device) != nil {
			t.Fatalf("accepted device %q", c.Device)
		}
		if c.HWAddr != "" {
			if _, err := net.ParseMAC(c.HWAddr); err != nil {
				t.Fatalf("accepted hwaddr %q", c.HWAddr)
			}
		}
		inside := func(dir, p string) bool {
			rel, err := filepath.Rel(dir, p)
			return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
		}
		if c.KernelPath != "" && !inside("/sys/devices", c.KernelPath) {
			t.Fatalf("accepted kernelpath %q", c.KernelPath)
		}
		if c.PCIAddr != "" && !inside(sysBusPCI, filepath.Join(sysBusPCI, c.PCIAddr)) {
			t.Fatalf("accepted pciBusID %q", c.PCIAddr)
		}
		if c.auxDevice != "" && !inside(sysBusAux, filepath.Join(sysBusAux, c.auxDevice)) {
			t.Fatalf("accepted auxiliary device %q", c.auxDevice)
		}
		if c.Name != "" && !inside(c.DataDir, statePath(c.DataDir, c.Name, "ctr", "eth0")) {
			t.Fatalf("record path outside dataDir for name %q", c.Name)
		}
	})
}
