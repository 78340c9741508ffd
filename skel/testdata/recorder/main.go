// Command recorder is a delegate plugin for the skel tests. On every verb it
// writes what it received (environment and stdin) to $RECORDER_OUT, then
// fails with the code in the config's "failCode" if set, or answers ADD
// with a fixed IPAM result.
package main

import (
	"encoding/json"
	"net/netip"
	"os"

	"github.com/patchbay-cni/patchbay/skel"
	"github.com/patchbay-cni/patchbay/spec"
)

type conf struct {
	FailCode uint `json:"failCode"`
}

func record(a *skel.CmdArgs) error {
	b, err := json.Marshal(map[string]any{"env": os.Environ(), "stdin": string(a.StdinData)})
	if err != nil {
		return err
	}
	if err := os.WriteFile(os.Getenv("RECORDER_OUT"), b, 0o644); err != nil {
		return err
	}
	var c conf
	if err := a.DecodeConf(&c); err != nil {
		return err
	}
	if c.FailCode != 0 {
		return spec.NewError(c.FailCode, "recorder asked to fail", "failCode in config")
	}
	return nil
}

func main() {
	skel.Main(skel.Plugin{
		Type: "recorder",
		Add: func(a *skel.CmdArgs) (*spec.Result, error) {
			if err := record(a); err != nil {
				return nil, err
			}
			return &spec.Result{IPs: []*spec.IPConfig{{Address: netip.MustParsePrefix("10.9.0.2/24"), Gateway: netip.MustParseAddr("10.9.0.1")}}}, nil
		},
		Del:    record,
		Check:  record,
		GC:     record,
		Status: record,
	})
}
