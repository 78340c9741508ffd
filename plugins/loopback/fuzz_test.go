package loopback

import (
	"testing"

	"github.com/patchbay-cni/patchbay/internal/testutil"
)

// FuzzConfig: loopback reads no keys of its own, so its configuration
// handling is skel's (version, name, environment, CNI_ARGS, prevResult):
// every refusal is a configuration error naming no plugin.
func FuzzConfig(f *testing.F) {
	testutil.FuzzConfig[any](f, Plugin(), [][2]string{
		{`{"cniVersion":"1.1.0","name":"lo","type":"loopback"}`, ""},
		{`{"cniVersion":"0.4.0","name":"lo","type":"loopback","prevResult":{"cniVersion":"0.4.0","ips":[{"version":"4","address":"10.0.0.2/24"}]}}`, "K=V"},
		{`{"cniVersion":"1.0.0","name":"lo","prevResult":{"ips":[{"address":"x"}]}}`, "bad"},
		{`{"cniVersion":"9.9.9","name":"-"}`, ""},
		{`null`, ""}, {`{}`, ""},
	}, nil, nil)
}
