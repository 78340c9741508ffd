package hostlocal

import (
	"os"
	"path/filepath"
	"testing"
)

// DEL needs only the data directory and the network name: a configuration
// whose ranges ADD would refuse (edited since ADD, or the runtime's DEL
// after a refused ADD) still releases the attachment's addresses and
// succeeds, instead of failing the chain's DEL for ever.
func TestDelToleratesInvalidRanges(t *testing.T) {
	dir := t.TempDir()
	mustAdd(t, testConf(dir, `"subnet":"10.37.0.0/24"`), "lenient")
	for _, bad := range []string{`"subnet":"10.0.0.0/33"`, `"routes":[{"dst":"1.2.3.4/99"}]`, `"ranges":[]`} {
		if out, code := run(t, call{cmd: "DEL", id: "lenient"}, testConf(dir, bad)); code != 0 {
			t.Errorf("DEL with %s: code %d: %s", bad, code, out)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "testnet", "10.37.0.2")); !os.IsNotExist(err) {
		t.Errorf("10.37.0.2 still allocated after DEL (stat: %v)", err)
	}
}
