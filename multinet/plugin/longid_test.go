package plugin

import (
	"context"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/patchbay-cni/patchbay/internal/atomicfile"
)

// A container ID too long for "<id>.json" gets a bounded file name: the plan
// round-trips, listPlans reports the ID, the lock works, and removal leaves
// nothing (also the temporary of a killed write).
func TestLongContainerIDPlanAndLock(t *testing.T) {
	dir := t.TempDir()
	long := "c" + strings.Repeat("0", 299)
	for _, id := range []string{"short", long} {
		p := &Plan{ContainerID: id, Attachments: []*Attachment{{Name: "kube-system/c", IfName: "eth0",
			Config: json.RawMessage(`{"cniVersion":"1.0.0","name":"c","plugins":[{"type":"bridge"}]}`)}}}
		if err := writePlan(dir, p); err != nil {
			t.Fatalf("%d characters: writePlan: %v", len(id), err)
		}
		if got, err := readPlan(dir, id); err != nil || got == nil || got.ContainerID != id {
			t.Fatalf("%d characters: readPlan = %v, %v", len(id), got, err)
		}
		l, err := lockContainer(context.Background(), dir, id)
		if err != nil {
			t.Fatalf("%d characters: lock: %v", len(id), err)
		}
		l.unlock(true)
	}
	ids, err := listPlans(dir)
	slices.Sort(ids)
	if err != nil || !slices.Equal(ids, []string{long, "short"}) {
		t.Errorf("listPlans = %d IDs %v, %v", len(ids), ids, err)
	}
	os.WriteFile(atomicfile.TempPath(planPath(dir, long)), []byte("{"), 0o600)
	for _, id := range []string{"short", long} {
		if err := removePlan(dir, id); err != nil {
			t.Error(err)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("left: %v", ents)
	}
}
