package api

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// §3.2.1 and §3.2.2, the spec's YAML examples as the API server serves them (JSON).
func TestDecodeNADSpecExamples(t *testing.T) {
	for _, tc := range []struct {
		name, obj, wantName, wantConfigPrefix string
	}{
		{"3.2.1 config", `{"apiVersion":"k8s.cni.cncf.io/v1","kind":"NetworkAttachmentDefinition","metadata":{"name":"a-bridge-network","namespace":"default","uid":"6f7c","resourceVersion":"42","annotations":{"k8s.v1.cni.cncf.io/resourceName":"x"}},
			"spec":{"config":"{ \"cniVersion\": \"0.3.0\", \"name\": \"a-bridge-network\", \"type\": \"bridge\", \"bridge\": \"br0\", \"isGateway\": true, \"ipam\": { \"type\": \"host-local\", \"subnet\": \"192.168.5.0/24\", \"dataDir\": \"/mnt/cluster-ipam\" } }"}}`,
			"a-bridge-network", `{ "cniVersion": "0.3.0"`},
		{"3.2.2 configlist", `{"apiVersion":"k8s.cni.cncf.io/v1","kind":"NetworkAttachmentDefinition","metadata":{"name":"another-bridge-network"},
			"spec":{"config":"{ \"cniVersion\": \"0.3.0\", \"name\": \"another-bridge-network\", \"plugins\": [ { \"type\": \"bridge\" }, { \"type\": \"port-forwarding\" } ] }"}}`,
			"another-bridge-network", `{ "cniVersion": "0.3.0", "name": "another-bridge-network", "plugins"`},
		{"3.2.4 no spec", `{"apiVersion":"k8s.cni.cncf.io/v1","kind":"NetworkAttachmentDefinition","metadata":{"name":"a-bridge-network"}}`,
			"a-bridge-network", ``},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var nad NetworkAttachmentDefinition
			if err := json.Unmarshal([]byte(tc.obj), &nad); err != nil {
				t.Fatal(err)
			}
			if nad.Metadata.Name != tc.wantName || !strings.HasPrefix(nad.Spec.Config, tc.wantConfigPrefix) ||
				nad.APIVersion != APIVersion(NADVersion) || nad.Kind != NADKind {
				t.Errorf("decoded %+v", nad)
			}
			if tc.wantConfigPrefix == "" && nad.Spec.Config != "" {
				t.Errorf("config %q", nad.Spec.Config)
			}
		})
	}
	var nad NetworkAttachmentDefinition
	_ = json.Unmarshal([]byte(`{"metadata":{"name":"n","namespace":"ns","uid":"u","resourceVersion":"7","annotations":{"a":"b"}}}`), &nad)
	want := ObjectMeta{Name: "n", Namespace: "ns", UID: "u", ResourceVersion: "7", Annotations: map[string]string{"a": "b"}}
	if !reflect.DeepEqual(nad.Metadata, want) {
		t.Errorf("metadata %+v", nad.Metadata)
	}
}

// §8.2.1, the spec's IPAMClaim example. (The spec prints apiVersion
// persistentip.cni.cncf.io/v1alpha1 there, while its CRD in §8.1 defines the
// group k8s.cni.cncf.io; the CRD wins, the decoding does not care.)
func TestDecodeIPAMClaimSpecExample(t *testing.T) {
	const obj = `{"apiVersion":"k8s.cni.cncf.io/v1alpha1","kind":"IPAMClaim","metadata":{"name":"vm-a.tenantred.pod16367aacb67","namespace":"ns1",
		"ownerReferences":[{"apiVersion":"kubevirt.io/v1","kind":"VirtualMachine","name":"vm-a","uid":"a0790345-4e84-4257-837a-e3d762d191ab"}]},
		"spec":{"network":"tenantred","interface":"pod16367aacb67"},"status":{"ips":["10.128.20.8/24","fd10:128:20::8/64"]}}`
	var c IPAMClaim
	if err := json.Unmarshal([]byte(obj), &c); err != nil {
		t.Fatal(err)
	}
	want := IPAMClaim{
		TypeMeta: TypeMeta{APIVersion: APIVersion(IPAMClaimVersion), Kind: IPAMClaimKind},
		Metadata: ObjectMeta{Name: "vm-a.tenantred.pod16367aacb67", Namespace: "ns1",
			OwnerReferences: []OwnerReference{{APIVersion: "kubevirt.io/v1", Kind: "VirtualMachine", Name: "vm-a", UID: "a0790345-4e84-4257-837a-e3d762d191ab"}}},
		Spec:   IPAMClaimSpec{Network: "tenantred", Interface: "pod16367aacb67"},
		Status: IPAMClaimStatus{IPs: []string{"10.128.20.8/24", "fd10:128:20::8/64"}},
	}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("got  %+v\nwant %+v", c, want)
	}
	// Spec fields are always written (§8.2: no omitempty on network/interface).
	b, _ := json.Marshal(IPAMClaim{})
	if !strings.Contains(string(b), `"spec":{"network":"","interface":""}`) || !strings.Contains(string(b), `"status":{"ips":null}`) {
		t.Errorf("encoding %s", b)
	}
}

func TestAnnotationKeys(t *testing.T) {
	for got, want := range map[string]string{
		NetworksAnnotation:       "k8s.v1.cni.cncf.io/networks",
		NetworkStatusAnnotation:  "k8s.v1.cni.cncf.io/network-status",
		DefaultNetworkAnnotation: "v1.multus-cni.io/default-network",
	} {
		if got != want {
			t.Errorf("%q != %q", got, want)
		}
	}
}

// The CRD manifests in deploy/crds name the group, kinds and versions these
// types use. (A plain text check: the repository has no YAML parser.)
func TestCRDManifests(t *testing.T) {
	for file, needles := range map[string][]string{
		"network-attachment-definitions.yaml": {
			"apiVersion: apiextensions.k8s.io/v1\n", "name: network-attachment-definitions.k8s.cni.cncf.io\n",
			"group: " + Group + "\n", "kind: " + NADKind + "\n", "plural: " + NADResource + "\n",
			"- net-attach-def\n", "- name: " + NADVersion + "\n", "scope: Namespaced\n",
			"                config:\n", "                  type: string\n",
		},
		"ipamclaims.yaml": {
			"apiVersion: apiextensions.k8s.io/v1\n", "name: ipamclaims.k8s.cni.cncf.io\n",
			"group: " + Group + "\n", "kind: " + IPAMClaimKind + "\n", "plural: " + IPAMClaimRes + "\n",
			"listKind: IPAMClaimList\n", "- name: " + IPAMClaimVersion + "\n", "status: {}\n",
			"                - interface\n", "                - network\n", "                - ips\n",
		},
	} {
		b, err := os.ReadFile(filepath.Join("..", "..", "deploy", "crds", file))
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), "\t") {
			t.Errorf("%s: tabs are not valid YAML indentation", file)
		}
		for _, n := range needles {
			if !strings.Contains(string(b), n) {
				t.Errorf("%s: missing %q", file, n)
			}
		}
	}
}
