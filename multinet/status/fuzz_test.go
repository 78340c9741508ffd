package status

import (
	"testing"

	"github.com/patchbay-cni/patchbay/spec"
)

// New must never panic on any result ParseResult accepts, and never write
// "mac" without "interface".
func FuzzNew(f *testing.F) {
	for _, s := range []string{
		`{"cniVersion":"0.2.0","ip4":{"ip":"10.1.0.5/16"}}`,
		`{"cniVersion":"1.1.0","interfaces":[{"name":"eth1","mac":"02:00:00:00:00:01","sandbox":"/x"}],"ips":[{"interface":0,"address":"10.0.0.1/24"},{"interface":7,"address":"10.0.0.2/24"}]}`,
		`{"cniVersion":"0.4.0","interfaces":[{"name":"","mac":"x","sandbox":""}],"ips":[{"version":"4","interface":-3,"address":"10.0.0.1/24"}]}`,
	} {
		f.Add(s, "net1")
	}
	f.Fuzz(func(t *testing.T, data, ifname string) {
		r, err := spec.ParseResult([]byte(data), "")
		if err != nil {
			return
		}
		e, err := New(Input{Name: "ns/n", IfName: ifname, Result: r})
		if err != nil {
			t.Fatal(err)
		}
		if e.Mac != "" && e.Interface == "" {
			t.Fatalf("mac without interface: %+v", e)
		}
	})
}
