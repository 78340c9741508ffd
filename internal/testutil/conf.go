package testutil

import (
	"encoding/json"
	"strings"
	"testing"
)

// Conf is a plugin configuration as JSON: base's keys, then extra's on top
// (a nil value in extra removes the key).
func Conf(t testing.TB, base, extra map[string]any) string {
	t.Helper()
	c := make(map[string]any, len(base)+len(extra))
	for k, v := range base {
		c[k] = v
	}
	for k, v := range extra {
		if v == nil {
			delete(c, k)
		} else {
			c[k] = v
		}
	}
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// HostLocal is an "ipam" value for host-local keeping its state in
// dataDir: one range per subnet, and a route to each of routes.
func HostLocal(dataDir string, subnets []string, routes ...string) map[string]any {
	var ranges [][]map[string]string
	for _, s := range subnets {
		ranges = append(ranges, []map[string]string{{"subnet": s}})
	}
	ipam := map[string]any{"type": "host-local", "dataDir": dataDir, "ranges": ranges}
	if len(routes) > 0 {
		var rs []map[string]string
		for _, r := range routes {
			rs = append(rs, map[string]string{"dst": r})
		}
		ipam["routes"] = rs
	}
	return ipam
}

// ChainedConf is the configuration of a chained plugin as a runtime sends
// it: head and keys are JSON object members without braces (head the
// common ones, keys the plugin's, either may be ""), and prev, when not
// empty, is the prevResult.
func ChainedConf(head, keys, prev string) string {
	members := []string{}
	for _, m := range []string{head, keys} {
		if m != "" {
			members = append(members, m)
		}
	}
	if prev != "" {
		members = append(members, `"prevResult":`+prev)
	}
	return "{" + strings.Join(members, ",") + "}"
}

// Head is the common members of a configuration, for ChainedConf.
func Head(version, name, typ string) string {
	return `"cniVersion":"` + version + `","name":"` + name + `","type":"` + typ + `"`
}

// EnvWith returns env with KEY=VALUE entries of extra set on top (a copy).
func EnvWith(env map[string]string, extra ...string) map[string]string {
	e := make(map[string]string, len(env)+len(extra))
	for k, v := range env {
		e[k] = v
	}
	for _, kv := range extra {
		k, v, _ := strings.Cut(kv, "=")
		e[k] = v
	}
	return e
}
