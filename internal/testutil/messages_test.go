package testutil

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestMessagesDoNotNameTheirPlugin enforces skel's message rule in every
// plugin's source: an error a plugin builds never starts with its own type
// (the runtime and Delegate name the plugin; "dhcp: dhcp: ..." otherwise).
// The fuzz targets check the configuration errors at run time
// (ConfigError); this covers every other error, which no fuzzer reaches.
func TestMessagesDoNotNameTheirPlugin(t *testing.T) {
	dirs, err := filepath.Glob("../../plugins/*")
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no plugin directories: %v", err)
	}
	maker := regexp.MustCompile(`(Errorf|NewError|errors\.New|[Ii]nvalid|checkErr|CheckErr)\(`)
	for _, dir := range dirs {
		typ := filepath.Base(dir)
		// Directories drop the type's hyphen.
		switch typ {
		case "hostlocal":
			typ = "host-local"
		case "hostdevice":
			typ = "host-device"
		}
		bad := regexp.MustCompile(`"` + regexp.QuoteMeta(typ) + `(:| (ADD|DEL|CHECK|GC|STATUS)\b)`)
		files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for i, line := range strings.Split(string(b), "\n") {
				if maker.MatchString(line) && bad.MatchString(line) {
					t.Errorf("%s:%d: a message naming its own plugin: %s", f, i+1, strings.TrimSpace(line))
				}
			}
		}
	}
}
