package clusteripam

import (
	"encoding/json"
	"reflect"
	"regexp"
	"testing"
	"time"

	upstream "github.com/k8snetworkplumbingwg/ipamclaims/pkg/crd/ipamclaims/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Our IPAMClaim types (claims.go explains why they are written out) read
// and write the same JSON as the upstream module's.
func TestClaimTypesMatchUpstream(t *testing.T) {
	ts := metav1.NewTime(time.Date(2025, 5, 13, 11, 56, 0, 0, time.UTC))
	up := upstream.IPAMClaim{
		TypeMeta:   metav1.TypeMeta{APIVersion: "k8s.cni.cncf.io/v1alpha1", Kind: "IPAMClaim"},
		ObjectMeta: metav1.ObjectMeta{Name: "vm-a.tenantred", Namespace: "ns1", UID: "u-1", ResourceVersion: "7", Generation: 2},
		Spec:       upstream.IPAMClaimSpec{Network: "tenantred", Interface: "pod16367aacb67"},
		Status: upstream.IPAMClaimStatus{
			IPs:      []string{"10.128.20.8/24", "fd10:128:20::8/64"},
			OwnerPod: &upstream.OwnerPod{Name: "virt-launcher-vm-a"},
			Conditions: []metav1.Condition{{Type: ConditionIPsAllocated, Status: metav1.ConditionTrue, ObservedGeneration: 2,
				LastTransitionTime: ts, Reason: ReasonAllocated, Message: "IPs allocated"}},
		},
	}
	b, err := json.Marshal(up)
	if err != nil {
		t.Fatal(err)
	}
	var ours IPAMClaim
	if err := json.Unmarshal(b, &ours); err != nil {
		t.Fatal(err)
	}
	if ours.Metadata.UID != "u-1" || ours.Spec.Network != "tenantred" || ours.Status.OwnerPod.Name != "virt-launcher-vm-a" ||
		len(ours.Status.Conditions) != 1 || ours.Status.Conditions[0].LastTransitionTime != "2025-05-13T11:56:00Z" {
		t.Fatalf("upstream → ours: %+v", ours)
	}
	back, err := json.Marshal(ours)
	if err != nil {
		t.Fatal(err)
	}
	var again upstream.IPAMClaim
	if err := json.Unmarshal(back, &again); err != nil {
		t.Fatal(err)
	}
	again.ObjectMeta.CreationTimestamp = up.ObjectMeta.CreationTimestamp
	if !reflect.DeepEqual(again.Spec, up.Spec) || !reflect.DeepEqual(again.Status.IPs, up.Status.IPs) || *again.Status.OwnerPod != *up.Status.OwnerPod ||
		!again.Status.Conditions[0].LastTransitionTime.Equal(&ts) || again.Status.Conditions[0].Reason != ReasonAllocated || again.Name != up.Name {
		t.Errorf("ours → upstream: %+v", again)
	}
	// The condition reasons match the pattern upstream's CRD enforces.
	for _, r := range []string{ReasonAllocated, ReasonIPAddressConflict, ReasonSubnetExhausted} {
		if !reasonPattern.MatchString(r) {
			t.Errorf("reason %q", r)
		}
	}
}

var reasonPattern = regexp.MustCompile(`^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$`)
