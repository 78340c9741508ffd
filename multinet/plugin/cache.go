package plugin

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/patchbay-cni/patchbay/internal/atomicfile"
	"github.com/patchbay-cni/patchbay/spec"
)

const planKind = "multinetCacheV1"

// Plan is what one container's ADD set out to do, written to
// <cniDir>/<containerID>.json before any delegate runs, so that DEL, CHECK
// and GC work without the apiserver: the pod or a NetworkAttachmentDefinition
// may be gone by then, and an edited NetworkAttachmentDefinition must not
// change what DEL undoes. The delegates' results are in the runtime library's
// libcni-format cache under <cniDir>/results.
type Plan struct {
	Kind         string        `json:"kind"`
	ContainerID  string        `json:"containerID"`
	NetNS        string        `json:"netns,omitempty"`
	PodNamespace string        `json:"podNamespace,omitempty"`
	PodName      string        `json:"podName,omitempty"`
	PodUID       string        `json:"podUID,omitempty"`
	CNIArgs      [][2]string   `json:"cniArgs,omitempty"`
	Attachments  []*Attachment `json:"attachments"`
}

// Attachment is one delegate invocation: the cluster network or one
// selected network.
type Attachment struct {
	// Name is "namespace/name" as the status annotation shows it.
	Name    string `json:"name"`
	IfName  string `json:"ifName"`
	Default bool   `json:"default,omitempty"`
	// Config is the self-contained conflist given to the runtime library,
	// after name injection and the cni-args merge.
	Config json.RawMessage `json:"config"`
	// CapabilityArgs are the runtimeConfig values offered to the plugins.
	CapabilityArgs map[string]any `json:"capabilityArgs,omitempty"`
	// CNIArgs, when set, replace the runtime's CNI_ARGS for this
	// attachment (see podCNIArgs); the cluster network has none and gets
	// the runtime's own.
	CNIArgs [][2]string `json:"cniArgs,omitempty"`
	// DefaultRoute is set when the selection had "default-route".
	DefaultRoute []string `json:"defaultRoute,omitempty"`
	HasDefault   bool     `json:"hasDefaultRoute,omitempty"`

	list *spec.ConfList // parsed Config
}

// List parses the cached configuration.
func (a *Attachment) List() (*spec.ConfList, error) {
	if a.list != nil {
		return a.list, nil
	}
	l, err := spec.ParseConfList(a.Config)
	if err != nil {
		return nil, err
	}
	a.list = l
	return l, nil
}

// planPath is <cniDir>/<containerID>.json, or atomicfile.BoundedName's
// "_<hash>.json" for an ID too long for a file name (listPlans then reads
// the ID from the file).
func planPath(cniDir, containerID string) string {
	return filepath.Join(cniDir, atomicfile.BoundedName(containerID, ".json", containerID))
}

// writePlan stores the plan atomically: a temporary file renamed over the
// old one, so a crashed or killed multinet leaves either plan, never half
// of one. There is no fsync: it cost 1-10 ms per write on the test machine,
// and only a power loss could lose the page cache — which also destroys
// every pod network namespace; the IPAM state left then is removed by DEL's
// fallback (the delegates' own result cache) or by GC.
func writePlan(cniDir string, p *Plan) error {
	p.Kind = planKind
	data, err := json.Marshal(p)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(cniDir, 0o700); err != nil {
		return err
	}
	return atomicfile.Write(planPath(cniDir, p.ContainerID), data, 0o600, false)
}

// errCorruptPlan marks a plan file that exists but cannot be used.
var errCorruptPlan = errors.New("corrupt multinet cache file")

// readPlan returns the container's plan; nil, nil when there is none; an
// error wrapping errCorruptPlan when the file is unusable.
func readPlan(cniDir, containerID string) (*Plan, error) {
	file := planPath(cniDir, containerID)
	data, err := os.ReadFile(file)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%w %s: %v", errCorruptPlan, file, err)
	}
	var p Plan
	if err := json.Unmarshal(data, &p); err != nil {
		return nil, fmt.Errorf("%w %s: %v", errCorruptPlan, file, err)
	}
	if p.Kind != planKind || p.ContainerID != containerID {
		return nil, fmt.Errorf("%w %s: kind %q, container %q", errCorruptPlan, file, p.Kind, p.ContainerID)
	}
	for i, a := range p.Attachments {
		if a == nil || a.IfName == "" {
			return nil, fmt.Errorf("%w %s: attachments[%d] is incomplete", errCorruptPlan, file, i)
		}
	}
	return &p, nil
}

// removePlan deletes the plan and the temporary a killed writePlan may have
// left.
func removePlan(cniDir, containerID string) error {
	return atomicfile.Remove(planPath(cniDir, containerID))
}

// listPlans returns the container IDs with a plan file.
func listPlans(cniDir string) ([]string, error) {
	entries, err := os.ReadDir(cniDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, e := range entries {
		n := e.Name()
		if e.IsDir() || filepath.Ext(n) != ".json" || n[0] == '.' {
			continue
		}
		if n[0] == '_' { // a bounded name: the ID is inside
			var p struct {
				ContainerID string `json:"containerID"`
			}
			if data, err := os.ReadFile(filepath.Join(cniDir, n)); err == nil && json.Unmarshal(data, &p) == nil && planPath(cniDir, p.ContainerID) == filepath.Join(cniDir, n) {
				ids = append(ids, p.ContainerID)
			}
			continue
		}
		ids = append(ids, n[:len(n)-len(".json")])
	}
	return ids, nil
}
