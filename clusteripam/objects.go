package clusteripam

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/netip"
	"net/url"
	"strings"

	"github.com/patchbay-cni/patchbay/multinet/api"
	"github.com/patchbay-cni/patchbay/multinet/kube"
)

// The IPAllocation custom resource (deploy/crds/cluster-ipam.yaml): one
// cluster-scoped object per allocated address, named after the address
// and its address space. Creating it is the allocation; the apiserver's
// create-if-absent makes it exclusive, with no lock anywhere: concurrent
// ADDs only meet when they pick the same address.
const (
	Group    = "cluster-ipam.patchbay.dev"
	Version  = "v1alpha1"
	Kind     = "IPAllocation"
	Resource = "ipallocations"

	// LabelScope is the address space (network_name, and the range when
	// enable_overlapping_ranges is false): listing one pool.
	LabelScope = Group + "/scope"
	// LabelAttachment is a hash of (CNI network, container ID, interface):
	// what DEL finds without knowing the addresses.
	LabelAttachment = Group + "/attachment"
	// LabelNode is the node of the attachment: what GC sweeps.
	LabelNode = Group + "/node"
	// LabelClaim is the UID of the IPAMClaim owning the address.
	LabelClaim = Group + "/claim"
)

// Allocation is an IPAllocation object.
type Allocation struct {
	APIVersion string         `json:"apiVersion"`
	Kind       string         `json:"kind"`
	Metadata   ObjectMeta     `json:"metadata"`
	Spec       AllocationSpec `json:"spec"`
}

// ObjectMeta is the part of metav1.ObjectMeta we use.
type ObjectMeta = api.ObjectMeta

// AllocationSpec says which address is held, in which address space, and
// by whom: an attachment (container, interface, pod, node) and/or an
// IPAMClaim. A claim's address between two pods has no attachment.
type AllocationSpec struct {
	Address string `json:"address"`
	// Range is the configured range's CIDR (its prefix length is the
	// result's).
	Range string `json:"range"`
	// NetworkName is ipam.network_name: networks with the same one share
	// address space.
	NetworkName string `json:"networkName,omitempty"`
	// Network, ContainerID, IfName identify the CNI attachment holding the
	// address (Network is the configuration's "name").
	Network     string    `json:"network,omitempty"`
	ContainerID string    `json:"containerID,omitempty"`
	IfName      string    `json:"ifName,omitempty"`
	Node        string    `json:"node,omitempty"`
	Pod         *PodRef   `json:"pod,omitempty"`
	Claim       *ClaimRef `json:"claim,omitempty"`
}

// PodRef names a pod (UID: a re-created pod of the same name is another).
type PodRef struct {
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name,omitempty"`
	UID       string `json:"uid,omitempty"`
}

func (p *PodRef) String() string {
	if p == nil || p.Name == "" {
		return "(no pod)"
	}
	return p.Namespace + "/" + p.Name
}

// ClaimRef names an IPAMClaim.
type ClaimRef struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid"`
}

// Attachment is the CNI attachment an invocation is about.
type Attachment struct {
	Network     string // the configuration's "name"
	ContainerID string
	IfName      string
	Node        string
	Pod         PodRef
}

// Key is the LabelAttachment value.
func (at Attachment) Key() string {
	return "a" + hash(at.Network, at.ContainerID, at.IfName)[:24]
}

// holds reports whether the allocation is bound to this attachment.
func (at Attachment) holds(a *Allocation) bool {
	return a.Spec.ContainerID == at.ContainerID && a.Spec.IfName == at.IfName && a.Spec.Network == at.Network
}

func (a *Allocation) bound() bool { return a.Spec.ContainerID != "" }

// holder describes who holds the address, for messages.
func (a *Allocation) holder() string {
	switch {
	case a.bound() && a.Spec.Pod != nil:
		return fmt.Sprintf("pod %s (container %s, %s)", a.Spec.Pod, short(a.Spec.ContainerID), a.Spec.IfName)
	case a.bound():
		return fmt.Sprintf("container %s (%s) of network %q on node %s", short(a.Spec.ContainerID), a.Spec.IfName, a.Spec.Network, a.Spec.Node)
	case a.Spec.Claim != nil:
		return fmt.Sprintf("IPAMClaim %s/%s", a.Spec.Claim.Namespace, a.Spec.Claim.Name)
	}
	return "IPAllocation " + a.Metadata.Name
}

func short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

func hash(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Scope is the address-space key of a range: addresses are unique per
// scope. network_name (hashed: any string is allowed there) and, with
// enable_overlapping_ranges false, the range's CIDR. A hash collision
// would only merge two address spaces: stricter, never a duplicate.
func Scope(networkName string, overlapping bool, prefix netip.Prefix) string {
	var parts []string
	if networkName != "" {
		parts = append(parts, "n"+hash(networkName)[:12])
	}
	if !overlapping {
		parts = append(parts, "r"+hash(prefix.Masked().String())[:8])
	}
	return strings.Join(parts, ".")
}

// scopeLabel is the LabelScope value ("default" for the empty scope).
func scopeLabel(scope string) string {
	if scope == "" {
		return "default"
	}
	return scope
}

// ObjectName is the IPAllocation name of addr in scope: "10.1.2.3",
// "n<hash>.10.1.2.3", "fd00-0000-...-0005" (IPv6: eight groups of four hex
// digits). The label counts differ between the forms, so the mapping is
// one to one.
func ObjectName(scope string, addr netip.Addr) string {
	key := addr.String()
	if addr.Is6() {
		b := addr.As16()
		g := make([]string, 8)
		for i := range g {
			g[i] = hex.EncodeToString(b[2*i : 2*i+2])
		}
		key = strings.Join(g, "-")
	}
	if scope == "" {
		return key
	}
	return scope + "." + key
}

// validLabelValue: 1 to 63 of [-A-Za-z0-9_.], alphanumeric at both ends.
// (Not a regexp: compiling one at start-up cost 0.29 ms per exec here.)
func validLabelValue(s string) bool {
	alnum := func(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' }
	if len(s) == 0 || len(s) > 63 || !alnum(s[0]) || !alnum(s[len(s)-1]) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !alnum(c) && c != '-' && c != '_' && c != '.' {
			return false
		}
	}
	return true
}

// nodeLabel is the node name if it is a valid label value, else a hash.
func nodeLabel(node string) string {
	if validLabelValue(node) {
		return node
	}
	return "h" + hash(node)[:24]
}

// REST paths.
const collection = "/apis/" + Group + "/" + Version + "/" + Resource

func objectPath(name string) string { return collection + "/" + url.PathEscape(name) }

// store is the IPAllocation API over the thin client.
type store struct{ c *kube.Client }

func (s store) create(ctx context.Context, a *Allocation) (*Allocation, error) {
	a.APIVersion, a.Kind = Group+"/"+Version, Kind
	var out Allocation
	if err := s.c.Create(ctx, collection, a, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

func (s store) get(ctx context.Context, name string, cached bool) (*Allocation, error) {
	var out Allocation
	if err := s.c.Get(ctx, objectPath(name), cached, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// remove deletes a as read: a changed object (rebound, re-created) is a
// 409 and stays.
func (s store) remove(ctx context.Context, a *Allocation) error {
	return s.c.Delete(ctx, objectPath(a.Metadata.Name), a.Metadata.UID, a.Metadata.ResourceVersion)
}

// update writes a back (conditional on its resourceVersion).
func (s store) update(ctx context.Context, a *Allocation) (*Allocation, error) {
	var out Allocation
	if err := s.c.Update(ctx, objectPath(a.Metadata.Name), a, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

func (s store) list(ctx context.Context, selector string, cached bool) ([]*Allocation, error) {
	raw, _, err := s.c.List(ctx, collection, kube.ListOptions{LabelSelector: selector, Cached: cached})
	if err != nil {
		return nil, err
	}
	out := make([]*Allocation, 0, len(raw))
	for _, r := range raw {
		var a Allocation
		if err := json.Unmarshal(r, &a); err != nil {
			return nil, fmt.Errorf("decoding an IPAllocation: %w", err)
		}
		out = append(out, &a)
	}
	return out, nil
}
