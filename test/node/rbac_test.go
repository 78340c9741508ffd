package node

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/patchbay-cni/patchbay/internal/nodetest"
)

var nadResource = schema.GroupVersionResource{Group: "k8s.cni.cncf.io", Version: "v1", Resource: "network-attachment-definitions"}

// rbac: as the DaemonSet's service account (impersonated, on the real
// apiserver), every call multinet makes succeeds — the thin plugin's and
// the daemon's reads and writes, the installer's and the preStop hook's —
// and writing anything else, or reading secrets, is forbidden.
func (d *deployment) rbac(t *testing.T) {
	n, c := d.n, ctxT(t, 2*time.Minute)
	ns := n.Namespace(t, d.mode+"-rbac")
	if _, err := n.Apply(c, []byte(nadYAML(ns, "blue", "blue0", blueSubnet)+podYAML(ns, "p", ""))); err != nil {
		t.Fatal(err)
	}
	pod, err := n.WaitPodRunning(c, ns, "p")
	if err != nil {
		t.Fatal(err)
	}
	cfg := rest.CopyConfig(n.Config)
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + dsNamespace + ":multinet",
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + dsNamespace, "system:authenticated"},
	}
	sa, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	node, err := n.Client.CoreV1().Nodes().Get(c, nodetest.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	onNode := metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", nodetest.NodeName).String()}
	allowed := []struct {
		what string
		call func(ctx context.Context) error
	}{
		{"get pod", func(ctx context.Context) error {
			_, err := sa.CoreV1().Pods(ns).Get(ctx, "p", metav1.GetOptions{})
			return err
		}},
		{"list pods of the node (all namespaces)", func(ctx context.Context) error {
			_, err := sa.CoreV1().Pods("").List(ctx, onNode)
			return err
		}},
		{"watch pods of the node", func(ctx context.Context) error {
			w, err := sa.CoreV1().Pods("").Watch(ctx, onNode)
			if err == nil {
				w.Stop()
			}
			return err
		}},
		{"patch pods/status", func(ctx context.Context) error {
			patch := fmt.Sprintf(`{"metadata":{"uid":%q,"annotations":{"rbac-test":"yes"}}}`, pod.UID)
			_, err := sa.CoreV1().Pods(ns).Patch(ctx, "p", types.MergePatchType, []byte(patch), metav1.PatchOptions{}, "status")
			return err
		}},
		{"get NAD", func(ctx context.Context) error {
			_, err := dyn.Resource(nadResource).Namespace(ns).Get(ctx, "blue", metav1.GetOptions{})
			return err
		}},
		{"list NADs", func(ctx context.Context) error {
			_, err := dyn.Resource(nadResource).List(ctx, metav1.ListOptions{})
			return err
		}},
		{"watch NADs", func(ctx context.Context) error {
			w, err := dyn.Resource(nadResource).Watch(ctx, metav1.ListOptions{})
			if err == nil {
				w.Stop()
			}
			return err
		}},
		{"create event (core/v1)", func(ctx context.Context) error {
			_, err := sa.CoreV1().Events(ns).Create(ctx, &corev1.Event{
				ObjectMeta:     metav1.ObjectMeta{Name: "rbac-test.1"},
				InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: "p", UID: pod.UID},
				Reason:         "RBACTest", Message: "test", Type: corev1.EventTypeNormal,
				Source: corev1.EventSource{Component: "multinet", Host: nodetest.NodeName},
			}, metav1.CreateOptions{})
			return err
		}},
		{"create event (events.k8s.io/v1)", func(ctx context.Context) error {
			_, err := sa.EventsV1().Events(ns).Create(ctx, &eventsv1.Event{
				ObjectMeta: metav1.ObjectMeta{Name: "rbac-test.2"}, EventTime: metav1.NowMicro(),
				Regarding: corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: "p", UID: pod.UID},
				Reason:    "RBACTest", Note: "test", Type: corev1.EventTypeNormal, Action: "Test",
				ReportingController: "patchbay.dev/multinet", ReportingInstance: "multinet-" + nodetest.NodeName,
			}, metav1.CreateOptions{})
			return err
		}},
		{"get node", func(ctx context.Context) error {
			_, err := sa.CoreV1().Nodes().Get(ctx, nodetest.NodeName, metav1.GetOptions{})
			return err
		}},
		{"create its own node-bound token", func(ctx context.Context) error {
			exp := int64(600)
			_, err := sa.CoreV1().ServiceAccounts(dsNamespace).CreateToken(ctx, "multinet", &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
				ExpirationSeconds: &exp,
				BoundObjectRef:    &authenticationv1.BoundObjectReference{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID},
			}}, metav1.CreateOptions{})
			return err
		}},
		{"get its DaemonSet", func(ctx context.Context) error {
			_, err := sa.AppsV1().DaemonSets(dsNamespace).Get(ctx, dsName, metav1.GetOptions{})
			return err
		}},
	}
	for _, a := range allowed {
		if err := a.call(c); err != nil {
			t.Errorf("%s: %v (the role must allow it)", a.what, err)
		}
	}
	forbidden := []struct {
		what string
		call func(ctx context.Context) error
	}{
		{"create pod", func(ctx context.Context) error {
			_, err := sa.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "x"},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "x", Image: nodetest.BusyboxImage}}}}, metav1.CreateOptions{})
			return err
		}},
		{"delete pod", func(ctx context.Context) error {
			return sa.CoreV1().Pods(ns).Delete(ctx, "p", metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
		}},
		{"patch pod (not status)", func(ctx context.Context) error {
			_, err := sa.CoreV1().Pods(ns).Patch(ctx, "p", types.MergePatchType, []byte(`{"metadata":{"labels":{"x":"y"}}}`), metav1.PatchOptions{})
			return err
		}},
		{"update pods/status", func(ctx context.Context) error {
			_, err := sa.CoreV1().Pods(ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
			return err
		}},
		{"create NAD", func(ctx context.Context) error {
			u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
				"metadata": map[string]any{"name": "x", "namespace": ns}}}
			_, err := dyn.Resource(nadResource).Namespace(ns).Create(ctx, u, metav1.CreateOptions{})
			return err
		}},
		{"delete NAD", func(ctx context.Context) error {
			return dyn.Resource(nadResource).Namespace(ns).Delete(ctx, "blue", metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
		}},
		{"list secrets", func(ctx context.Context) error {
			_, err := sa.CoreV1().Secrets(dsNamespace).List(ctx, metav1.ListOptions{})
			return err
		}},
		{"list nodes", func(ctx context.Context) error {
			_, err := sa.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
			return err
		}},
		{"patch node", func(ctx context.Context) error {
			_, err := sa.CoreV1().Nodes().Patch(ctx, nodetest.NodeName, types.MergePatchType, []byte(`{"metadata":{"labels":{"x":"y"}}}`), metav1.PatchOptions{})
			return err
		}},
		{"token of another service account", func(ctx context.Context) error {
			_, err := sa.CoreV1().ServiceAccounts(dsNamespace).CreateToken(ctx, "default", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
			return err
		}},
		{"get another DaemonSet", func(ctx context.Context) error {
			_, err := sa.AppsV1().DaemonSets(dsNamespace).Get(ctx, "other", metav1.GetOptions{})
			return err
		}},
		{"patch its DaemonSet", func(ctx context.Context) error {
			_, err := sa.AppsV1().DaemonSets(dsNamespace).Patch(ctx, dsName, types.MergePatchType, []byte(`{"metadata":{"labels":{"x":"y"}}}`), metav1.PatchOptions{})
			return err
		}},
		{"create configmap", func(ctx context.Context) error {
			_, err := sa.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metav1.CreateOptions{})
			return err
		}},
		{"update event", func(ctx context.Context) error {
			ev, err := n.Client.CoreV1().Events(ns).Get(ctx, "rbac-test.1", metav1.GetOptions{})
			if err != nil {
				return fmt.Errorf("admin get: %w", err)
			}
			_, err = sa.CoreV1().Events(ns).Update(ctx, ev, metav1.UpdateOptions{})
			return err
		}},
	}
	for _, f := range forbidden {
		if err := f.call(c); !apierrors.IsForbidden(err) {
			t.Errorf("%s: %v, want forbidden", f.what, err)
		}
	}
	// The role's rules are what rbac.yaml says (no rule added elsewhere).
	cr, err := n.Client.RbacV1().ClusterRoles().Get(c, "multinet", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var rules []string
	for _, r := range cr.Rules {
		rules = append(rules, fmt.Sprintf("%v %v %v", r.APIGroups, r.Resources, r.Verbs))
	}
	t.Logf("ClusterRole multinet: %s", strings.Join(rules, "; "))
	if err := n.Client.CoreV1().Pods(ns).Delete(c, "p", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := n.WaitPodGone(c, ns, "p"); err != nil {
		t.Fatal(err)
	}
}
