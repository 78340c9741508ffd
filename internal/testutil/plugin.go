package testutil

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/patchbay-cni/patchbay/internal/netns"
	"github.com/patchbay-cni/patchbay/spec"
)

// WithPrevResult returns the configuration conf with "prevResult" set to
// the result prev (as a runtime builds CHECK's and DEL's input).
func WithPrevResult(t testing.TB, conf, prev string) string {
	t.Helper()
	var c map[string]json.RawMessage
	if err := json.Unmarshal([]byte(conf), &c); err != nil {
		t.Fatalf("configuration is not a JSON object: %v", err)
	}
	c["prevResult"] = json.RawMessage(prev)
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatalf("prevResult: %v", err)
	}
	return string(b)
}

// CNIError decodes a plugin's error output, failing the test when it is
// not one.
func CNIError(t testing.TB, out string) *spec.Error {
	t.Helper()
	e, ok := spec.ParseError([]byte(out))
	if !ok {
		t.Fatalf("not a CNI error: %s", out)
	}
	return e
}

// ExecPlugin runs a plugin executable (ours in bin/ or the reference's) as
// a runtime would, from inside the network namespace at hostPath (the child
// inherits the locked thread's namespace), with env's CNI_* variables.
func ExecPlugin(t testing.TB, hostPath, bin string, env map[string]string, conf string) (string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	err := netns.Do(hostPath, func() error {
		c := exec.Command(bin)
		c.Env = []string{"PATH=" + os.Getenv("PATH")}
		for k, v := range env {
			c.Env = append(c.Env, k+"="+v)
		}
		c.Stdin, c.Stdout, c.Stderr = strings.NewReader(conf), &out, &errb
		return c.Run()
	})
	if err != nil {
		return out.String() + errb.String(), err
	}
	return out.String(), nil
}

// BenchAddDel runs ADD then DEL of the plugin executable bin in the
// namespace at hostPath once per benchmark iteration (CNI_CONTAINERID
// differs each time; env holds the other CNI_* variables) and reports the
// medians as add-ms and del-ms.
func BenchAddDel(b *testing.B, hostPath, bin string, env map[string]string, conf string) {
	b.Helper()
	var adds, dels []time.Duration
	for i := 0; b.Loop(); i++ {
		env["CNI_CONTAINERID"] = fmt.Sprint("bench", i)
		t0 := time.Now()
		env["CNI_COMMAND"] = "ADD"
		if out, err := ExecPlugin(b, hostPath, bin, env, conf); err != nil {
			b.Fatalf("ADD: %v: %s", err, out)
		}
		t1 := time.Now()
		env["CNI_COMMAND"] = "DEL"
		if out, err := ExecPlugin(b, hostPath, bin, env, conf); err != nil {
			b.Fatalf("DEL: %v: %s", err, out)
		}
		adds, dels = append(adds, t1.Sub(t0)), append(dels, time.Since(t1))
	}
	b.ReportMetric(Median(adds), "add-ms")
	b.ReportMetric(Median(dels), "del-ms")
}

// Median is the middle of a set of durations, in milliseconds.
func Median(d []time.Duration) float64 {
	s := slices.Clone(d)
	slices.Sort(s)
	return float64(s[len(s)/2]) / float64(time.Millisecond)
}
