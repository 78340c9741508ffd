package hostdevice

import (
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/patchbay-cni/patchbay/skel"
	"github.com/patchbay-cni/patchbay/spec"
)

// defaultDataDir holds what DEL needs to put a device back. It is on a
// tmpfs: after a reboot the devices are back under their own names and
// every container is gone, so the records are rightly gone too.
const defaultDataDir = "/run/cni/host-device"

// Where the kernel lists devices by bus (variables so that a test can
// point them at a made-up tree).
var (
	sysBusPCI = "/sys/bus/pci/devices"
	sysBusAux = "/sys/bus/auxiliary/devices"
)

// userspaceDrivers are the PCI drivers that leave a NIC without a kernel
// network device (DPDK): such a device is not moved, only addressed in the
// result (the reference's list).
var userspaceDrivers = []string{"vfio-pci", "uio_pci_generic", "igb_uio"}

// Config is the host-device plugin's configuration. Keys and their
// precedence follow the reference host-device v1.9.1: device, then hwaddr,
// then kernelpath, then pciBusID (which the deviceID capability overrides),
// then an auxiliary device from deviceID.
type Config struct {
	spec.NetConf
	Device        string `json:"device"`
	HWAddr        string `json:"hwaddr"`
	KernelPath    string `json:"kernelpath"`
	PCIAddr       string `json:"pciBusID"`
	RuntimeConfig struct {
		DeviceID string `json:"deviceID,omitempty"`
	} `json:"runtimeConfig,omitzero"`
	// DataDir is our addition: where the device's original state is kept
	// between ADD and DEL.
	DataDir string `json:"dataDir,omitempty"`

	auxDevice string // from deviceID: a device on the auxiliary bus
	dpdk      bool   // the PCI device is bound to a userspace driver
	pciID     string // the PCI address of the device, when it is named by one (result's pciID)
}

func invalid(format string, a ...any) error {
	return spec.Errorf(spec.ErrInvalidNetworkConfig, format, a...)
}

// decode only decodes, with defaults. DEL uses it: a DEL must succeed for
// a configuration ADD refused, and for a device that is gone.
func decode(a *skel.CmdArgs) (*Config, error) {
	c := &Config{}
	if err := a.DecodeConf(c); err != nil {
		return nil, err
	}
	if c.DataDir == "" {
		c.DataDir = defaultDataDir
	}
	return c, nil
}

// pciAddr is a PCI address as sysfs names devices: domain:bus:device.function.
var pciAddr = regexp.MustCompile(`^[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$`)

// load decodes and checks the configuration's syntax (code 7 naming the
// key and the value), before anything is looked up or changed.
func load(a *skel.CmdArgs) (*Config, error) {
	c, err := decode(a)
	if err != nil {
		return nil, err
	}
	// STATUS gets no runtimeConfig: a network whose device comes only from
	// the deviceID capability (an SR-IOV VF handed out per pod) names none.
	unnamed := a.Command == spec.CmdStatus && c.Capabilities["deviceID"]
	if c.Device == "" && c.HWAddr == "" && c.KernelPath == "" && c.PCIAddr == "" && c.RuntimeConfig.DeviceID == "" && !unnamed {
		return nil, invalid("specify the device with \"device\", \"hwaddr\", \"kernelpath\", \"pciBusID\" or the deviceID capability (runtimeConfig \"deviceID\")")
	}
	if c.Device != "" {
		if err := spec.ValidateInterfaceName(c.Device); err != nil {
			return nil, invalid("\"device\" value %q is invalid: not a usable interface name", c.Device)
		}
	}
	if c.HWAddr != "" {
		if _, err := net.ParseMAC(c.HWAddr); err != nil {
			return nil, invalid("\"hwaddr\" value %q is invalid: %v", c.HWAddr, err)
		}
	}
	if c.KernelPath != "" {
		// The reference checks only the prefix, so "/sys/devices/../.."
		// passed; a cleaned path must keep it.
		p := strings.TrimSuffix(c.KernelPath, "/")
		if !filepath.IsAbs(p) || filepath.Clean(p) != p || !strings.HasPrefix(p, "/sys/devices/") {
			return nil, invalid("\"kernelpath\" value %q is invalid: must be a clean absolute path beginning with /sys/devices/", c.KernelPath)
		}
		c.KernelPath = p
	}
	if c.PCIAddr != "" && !pciAddr.MatchString(c.PCIAddr) {
		return nil, invalid("\"pciBusID\" value %q is invalid: must be a PCI address such as 0000:00:03.0", c.PCIAddr)
	}
	if id := c.RuntimeConfig.DeviceID; id != "" && !pciAddr.MatchString(id) && !validDeviceName(id) {
		return nil, invalid("runtimeConfig \"deviceID\" value %q is invalid: must be a PCI address or an auxiliary device name", id)
	}
	if !filepath.IsAbs(c.DataDir) {
		return nil, invalid("\"dataDir\" value %q is invalid: must be an absolute path", c.DataDir)
	}
	return c, nil
}

// validDeviceName accepts a name usable as one sysfs path component.
func validDeviceName(s string) bool {
	if s == "" || s == "." || s == ".." || len(s) > 255 {
		return false
	}
	for _, r := range s {
		if r == '/' || r <= ' ' || r > '~' {
			return false
		}
	}
	return true
}

// resolveDeviceID applies the deviceID capability as the reference does:
// a PCI device replaces pciBusID, an auxiliary device is used when no
// other key names a device. It and dpdk detection read sysfs, so ADD and
// CHECK call it (not DEL). Not finding the device is code 7.
func (c *Config) resolveDeviceID() error {
	if id := c.RuntimeConfig.DeviceID; id != "" {
		switch {
		case pciAddr.MatchString(id) && exists(filepath.Join(sysBusPCI, id)):
			c.PCIAddr = id
		case validDeviceName(id) && exists(filepath.Join(sysBusAux, id)):
			c.PCIAddr, c.auxDevice = "", id
		default:
			return invalid("runtimeConfig \"deviceID\" value %q: no such PCI or auxiliary device on this host", id)
		}
	}
	if c.Device == "" && c.HWAddr == "" && c.KernelPath != "" {
		// A kernelpath naming a PCI function: its address for the result.
		if real, err := filepath.EvalSymlinks(c.KernelPath); err == nil {
			if bus, ok := busOf(real); ok && bus == "pci" {
				c.pciID = filepath.Base(real)
			}
		}
	}
	if c.PCIAddr != "" {
		c.pciID = c.PCIAddr
		dir := filepath.Join(sysBusPCI, c.PCIAddr)
		if !exists(dir) {
			return invalid("\"pciBusID\" value %q: no such PCI device on this host", c.PCIAddr)
		}
		if drv, err := filepath.EvalSymlinks(filepath.Join(dir, "driver")); err == nil {
			for _, u := range userspaceDrivers {
				if filepath.Base(drv) == u {
					c.dpdk = true
				}
			}
		}
	}
	return nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
