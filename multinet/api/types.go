// Package api holds the Kubernetes object types of the multi-network
// specification (Network Plumbing WG de-facto standard v1.3) as plain Go
// structs with JSON tags: NetworkAttachmentDefinition (§3) and IPAMClaim
// (§8), plus the annotation keys of §4, §5 and the default-network override.
// They are written here rather than imported: the upstream type packages
// (network-attachment-definition-client, ipamclaims) pull
// k8s.io/apimachinery's meta/v1 into every plugin exec; for ipamclaims that
// was measured at 0.8 ms of start-up per invocation and twice the binary
// size (clusteripam/README.md). Only the fields we read or write exist;
// clusteripam's TestClaimTypesMatchUpstream checks the IPAMClaim ones
// against the upstream module.
package api

// API groups and versions.
const (
	Group = "k8s.cni.cncf.io"
	// NADVersion is the version of NetworkAttachmentDefinition (§3.1).
	NADVersion = "v1"
	// IPAMClaimVersion is the version of IPAMClaim (§8.1).
	IPAMClaimVersion = "v1alpha1"

	NADKind       = "NetworkAttachmentDefinition"
	NADResource   = "network-attachment-definitions" // plural, used in REST paths
	IPAMClaimKind = "IPAMClaim"
	IPAMClaimRes  = "ipamclaims"
)

// Pod annotation keys.
const (
	// NetworksAnnotation selects the secondary networks of a pod (§4.1).
	NetworksAnnotation = "k8s.v1.cni.cncf.io/networks"
	// NetworkStatusAnnotation reports every attachment's result (§5).
	NetworkStatusAnnotation = "k8s.v1.cni.cncf.io/network-status"
	// DefaultNetworkAnnotation is not part of the spec: §6 leaves it to the
	// implementation how the cluster-wide default network is configured. This
	// is the key Multus uses to let a pod replace the default network by a
	// NetworkAttachmentDefinition reference; we honour the same key so pods
	// written for Multus keep working.
	DefaultNetworkAnnotation = "v1.multus-cni.io/default-network"
)

// TypeMeta is the apiVersion/kind pair of every object.
type TypeMeta struct {
	APIVersion string `json:"apiVersion,omitempty"`
	Kind       string `json:"kind,omitempty"`
}

// ObjectMeta is the subset of metav1.ObjectMeta that we use.
type ObjectMeta struct {
	Name              string            `json:"name,omitempty"`
	Namespace         string            `json:"namespace,omitempty"`
	UID               string            `json:"uid,omitempty"`
	ResourceVersion   string            `json:"resourceVersion,omitempty"`
	Generation        int64             `json:"generation,omitempty"`
	CreationTimestamp string            `json:"creationTimestamp,omitempty"`
	DeletionTimestamp string            `json:"deletionTimestamp,omitempty"`
	Labels            map[string]string `json:"labels,omitempty"`
	Annotations       map[string]string `json:"annotations,omitempty"`
	// OwnerReferences ties an IPAMClaim to the object it is held for (§8.3.2).
	OwnerReferences []OwnerReference `json:"ownerReferences,omitempty"`
}

// OwnerReference is the subset of metav1.OwnerReference that §8.3.2 relies on.
type OwnerReference struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Name       string `json:"name"`
	UID        string `json:"uid"`
}

// ListMeta is the metadata of a list response.
type ListMeta struct {
	ResourceVersion string `json:"resourceVersion,omitempty"`
	Continue        string `json:"continue,omitempty"`
}

// NetworkAttachmentDefinition describes how to attach a pod to one network (§3.2).
type NetworkAttachmentDefinition struct {
	TypeMeta `json:",inline"`
	Metadata ObjectMeta `json:"metadata"`
	// Spec is optional (§3.2.4): without a config the implementation attaches
	// an implementation-known network named like the object.
	Spec NetworkAttachmentDefinitionSpec `json:"spec"`
}

// NetworkAttachmentDefinitionSpec holds the CNI configuration (§3.2).
type NetworkAttachmentDefinitionSpec struct {
	// Config is a JSON CNI configuration or configuration list. It may omit
	// "name"; the delegating plugin then injects the object's name (§3.4.2).
	Config string `json:"config,omitempty"`
}

// NetworkAttachmentDefinitionList is the list response.
type NetworkAttachmentDefinitionList struct {
	TypeMeta `json:",inline"`
	Metadata ListMeta                      `json:"metadata"`
	Items    []NetworkAttachmentDefinition `json:"items"`
}

// IPAMClaim records an IP allocation held on behalf of another entity (§8.2).
type IPAMClaim struct {
	TypeMeta `json:",inline"`
	Metadata ObjectMeta      `json:"metadata"`
	Spec     IPAMClaimSpec   `json:"spec"`
	Status   IPAMClaimStatus `json:"status"`
}

// IPAMClaimSpec is written by the workload controller (§8.2).
type IPAMClaimSpec struct {
	// Network is the network name the allocation was created for.
	Network string `json:"network"`
	// Interface is the pod interface name the allocation was created for.
	Interface string `json:"interface"`
}

// IPAMClaimStatus is written by the IPAM plugin (§8.2); OwnerPod and
// Conditions are the upstream module's additions (ipamclaims v0.5.1-alpha).
type IPAMClaimStatus struct {
	// IPs are the allocated addresses (v4 and/or v6), with prefix length.
	IPs []string `json:"ips"`
	// OwnerPod names the pod holding the claim.
	OwnerPod *OwnerPod `json:"ownerPod,omitempty"`
	// Conditions report the allocation (type IPsAllocated).
	Conditions []Condition `json:"conditions,omitempty"`
}

// OwnerPod names the pod holding an IPAMClaim.
type OwnerPod struct {
	Name string `json:"name,omitempty"`
}

// Condition is metav1.Condition (times in RFC 3339).
type Condition struct {
	Type               string `json:"type"`
	Status             string `json:"status"`
	ObservedGeneration int64  `json:"observedGeneration,omitempty"`
	LastTransitionTime string `json:"lastTransitionTime"`
	Reason             string `json:"reason"`
	Message            string `json:"message"`
}

// IPAMClaimList is the list response.
type IPAMClaimList struct {
	TypeMeta `json:",inline"`
	Metadata ListMeta    `json:"metadata"`
	Items    []IPAMClaim `json:"items"`
}

// APIVersion returns "group/version" for the given version.
func APIVersion(version string) string { return Group + "/" + version }
