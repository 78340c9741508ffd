package testutil

import (
	"encoding/json"
	"reflect"
	"testing"
)

func TestConfBuilders(t *testing.T) {
	got := Conf(t, map[string]any{"name": "n", "mtu": 1400, "ipam": HostLocal("/d", []string{"10.0.0.0/24"}, "0.0.0.0/0")},
		map[string]any{"mtu": nil, "x": true})
	var m map[string]any
	if err := json.Unmarshal([]byte(got), &m); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"name": "n", "x": true, "ipam": map[string]any{"type": "host-local", "dataDir": "/d",
		"ranges": []any{[]any{map[string]any{"subnet": "10.0.0.0/24"}}}, "routes": []any{map[string]any{"dst": "0.0.0.0/0"}}}}
	if !reflect.DeepEqual(m, want) {
		t.Errorf("Conf = %s", got)
	}
	for _, c := range []struct{ head, keys, prev, want string }{
		{Head("1.0.0", "n", "t"), "", "", `{"cniVersion":"1.0.0","name":"n","type":"t"}`},
		{Head("1.0.0", "n", "t"), `"a":1`, `{}`, `{"cniVersion":"1.0.0","name":"n","type":"t","a":1,"prevResult":{}}`},
	} {
		if got := ChainedConf(c.head, c.keys, c.prev); got != c.want {
			t.Errorf("ChainedConf = %s, want %s", got, c.want)
		}
	}
	base := map[string]string{"A": "1"}
	if e := EnvWith(base, "B=2", "A=3=x"); !reflect.DeepEqual(e, map[string]string{"A": "3=x", "B": "2"}) || base["A"] != "1" {
		t.Errorf("EnvWith = %v (base %v)", e, base)
	}
}
