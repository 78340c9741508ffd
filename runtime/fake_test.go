package runtime

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// The fake plugins below are small shell scripts, used ONLY for what the
// reference plugins cannot show: the exact stdin and CNI_* environment of
// every call, call order, chosen exit codes and error JSON, and a slow
// plugin for timeouts. Everything about real networking is tested against
// the reference plugins in ref_test.go.

type fake struct {
	result string // printed on ADD
	errOn  string // verb on which to fail ("" never, "*" always)
	errOut string // printed on stdout when failing (error JSON)
	sleep  string // seconds to sleep before answering
}

const fakeScript = `#!/bin/sh
# test-only fake CNI plugin: records the call, then answers as configured
n=$(ls "%[1]s" | wc -l)
base="%[1]s/$(printf %%05d "$n")-%[2]s-$CNI_COMMAND"
cat > "$base.stdin"
env | grep '^CNI_' | sort > "$base.env"
%[3]s
if [ "%[4]s" = "*" ] || [ "%[4]s" = "$CNI_COMMAND" ]; then
	printf '%%s' '%[5]s'
	exit 1
fi
if [ "$CNI_COMMAND" = ADD ]; then
	printf '%%s' '%[6]s'
fi
exit 0
`

// fakeEnv is a plugin directory and a call log.
type fakeEnv struct {
	bin, log, cache string
}

func newFakeEnv(t *testing.T) *fakeEnv {
	d := t.TempDir()
	e := &fakeEnv{bin: filepath.Join(d, "bin"), log: filepath.Join(d, "log"), cache: filepath.Join(d, "cache")}
	for _, p := range []string{e.bin, e.log} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

func (e *fakeEnv) cni() *CNI { return &CNI{Path: []string{e.bin}, CacheDir: e.cache} }

func (e *fakeEnv) plugin(t *testing.T, name string, f fake) {
	t.Helper()
	sleep := ""
	if f.sleep != "" {
		sleep = "exec sleep " + f.sleep // exec: the timeout kill must hit sleep itself
	}
	script := fmt.Sprintf(fakeScript, e.log, name, sleep, f.errOn, f.errOut, f.result)
	if err := os.WriteFile(filepath.Join(e.bin, name), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
}

type call struct {
	Plugin, Verb string
	Stdin        map[string]any
	StdinRaw     string
	Env          map[string]string
}

func (e *fakeEnv) calls(t *testing.T) []call {
	t.Helper()
	ents, err := os.ReadDir(e.log)
	if err != nil {
		t.Fatal(err)
	}
	var bases []string
	for _, en := range ents {
		if b, ok := strings.CutSuffix(en.Name(), ".stdin"); ok {
			bases = append(bases, b)
		}
	}
	sort.Strings(bases)
	var out []call
	for _, b := range bases {
		parts := strings.Split(b, "-")
		c := call{Plugin: strings.Join(parts[1:len(parts)-1], "-"), Verb: parts[len(parts)-1], Env: map[string]string{}}
		raw, _ := os.ReadFile(filepath.Join(e.log, b+".stdin"))
		c.StdinRaw = string(raw)
		if err := json.Unmarshal(raw, &c.Stdin); err != nil {
			t.Fatalf("call %s: stdin is not JSON: %v: %s", b, err, raw)
		}
		env, _ := os.ReadFile(filepath.Join(e.log, b+".env"))
		for _, line := range strings.Split(strings.TrimSpace(string(env)), "\n") {
			if k, v, ok := strings.Cut(line, "="); ok {
				c.Env[k] = v
			}
		}
		out = append(out, c)
	}
	return out
}

// reset forgets the calls logged so far.
func (e *fakeEnv) reset(t *testing.T) {
	t.Helper()
	if err := os.RemoveAll(e.log); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(e.log, 0o755); err != nil {
		t.Fatal(err)
	}
}

// seq renders calls as "plugin:VERB" for order assertions.
func seq(cs []call) string {
	var s []string
	for _, c := range cs {
		s = append(s, c.Plugin+":"+c.Verb)
	}
	return strings.Join(s, " ")
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
