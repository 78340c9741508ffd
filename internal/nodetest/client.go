package nodetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/rand"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
)

// apiHelpers holds what Apply needs beyond the clients.
type apiHelpers struct {
	mapper *restmapper.DeferredDiscoveryRESTMapper
}

// connect makes the admin clients, through the forwarder.
func (n *Node) connect() error {
	n.Config = &rest.Config{
		Host:            "https://" + n.apiAddr,
		BearerToken:     n.Credentials.AdminToken,
		TLSClientConfig: rest.TLSClientConfig{CAData: n.Credentials.CAPEM},
		QPS:             100,
		Burst:           200,
		Timeout:         time.Minute,
	}
	var err error
	if n.Client, err = kubernetes.NewForConfig(n.Config); err != nil {
		return err
	}
	if n.Dynamic, err = dynamic.NewForConfig(n.Config); err != nil {
		return err
	}
	n.api = &apiHelpers{mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(n.Client.Discovery()))}
	return nil
}

// FieldManager is the server-side apply field manager of Apply.
const FieldManager = "nodetest"

// Apply creates or updates every object of manifests (YAML or JSON, several
// documents separated by "---", List kinds expanded), in order, like
// `kubectl apply --server-side --force-conflicts`. Namespaced objects
// without a namespace go to "default". A kind the apiserver does not know
// yet (a CRD applied just before) is retried until it is served (30 s). It
// returns the objects as stored.
func (n *Node) Apply(ctx context.Context, manifests []byte) ([]*unstructured.Unstructured, error) {
	objs, err := DecodeManifests(manifests)
	if err != nil {
		return nil, err
	}
	var out []*unstructured.Unstructured
	for _, obj := range objs {
		ri, err := n.resource(ctx, obj)
		if err != nil {
			return out, err
		}
		got, err := ri.Apply(ctx, obj.GetName(), obj, metav1.ApplyOptions{FieldManager: FieldManager, Force: true})
		if err != nil {
			return out, fmt.Errorf("apply %s %s: %w", obj.GetKind(), objName(obj), err)
		}
		out = append(out, got)
	}
	return out, nil
}

// ApplyFiles applies files, and the *.yaml, *.yml and *.json files of
// directories (sorted by name), like `kubectl apply -f PATH -f PATH`.
func (n *Node) ApplyFiles(ctx context.Context, paths ...string) ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	for _, p := range paths {
		files, err := ManifestFiles(p)
		if err != nil {
			return out, err
		}
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				return out, err
			}
			objs, err := n.Apply(ctx, b)
			out = append(out, objs...)
			if err != nil {
				return out, fmt.Errorf("%s: %w", f, err)
			}
		}
	}
	return out, nil
}

// ManifestFiles lists what `kubectl apply -f p` reads: p itself if it is a
// file, else the *.yaml, *.yml and *.json files of the directory p (not its
// subdirectories), sorted by name.
func ManifestFiles(p string) ([]string, error) {
	st, err := os.Stat(p)
	if err != nil {
		return nil, err
	}
	if !st.IsDir() {
		return []string{p}, nil
	}
	des, err := os.ReadDir(p)
	if err != nil {
		return nil, err
	}
	var files []string
	for _, de := range des {
		switch filepath.Ext(de.Name()) {
		case ".yaml", ".yml", ".json":
			if !de.IsDir() {
				files = append(files, filepath.Join(p, de.Name()))
			}
		}
	}
	sort.Strings(files)
	return files, nil
}

// Delete deletes every object of manifests, last first (background
// propagation); objects already gone are fine. It does not wait.
func (n *Node) Delete(ctx context.Context, manifests []byte) error {
	objs, err := DecodeManifests(manifests)
	if err != nil {
		return err
	}
	var errs []error
	for i := len(objs) - 1; i >= 0; i-- {
		obj := objs[i]
		ri, err := n.resource(ctx, obj)
		if err != nil {
			if meta.IsNoMatchError(err) {
				continue // its CRD is gone already
			}
			errs = append(errs, err)
			continue
		}
		bg := metav1.DeletePropagationBackground
		if err := ri.Delete(ctx, obj.GetName(), metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete %s %s: %w", obj.GetKind(), objName(obj), err))
		}
	}
	return errors.Join(errs...)
}

// resource maps an object to its dynamic client, defaulting its namespace.
func (n *Node) resource(ctx context.Context, obj *unstructured.Unstructured) (dynamic.ResourceInterface, error) {
	gvk := obj.GroupVersionKind()
	if gvk.Kind == "" || gvk.Version == "" {
		return nil, fmt.Errorf("object %s has no apiVersion or kind", objName(obj))
	}
	if obj.GetName() == "" {
		return nil, fmt.Errorf("%s without metadata.name (generateName is not supported by apply)", gvk.Kind)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		m, err := n.api.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err == nil {
			if m.Scope.Name() != meta.RESTScopeNameNamespace {
				return n.Dynamic.Resource(m.Resource), nil
			}
			if obj.GetNamespace() == "" {
				obj.SetNamespace(metav1.NamespaceDefault)
			}
			return n.Dynamic.Resource(m.Resource).Namespace(obj.GetNamespace()), nil
		}
		if !meta.IsNoMatchError(err) || time.Now().After(deadline) {
			return nil, fmt.Errorf("%s: %w", gvk, err)
		}
		n.api.mapper.Reset()
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%s: %w (%v)", gvk, err, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// DecodeManifests reads YAML or JSON documents (List kinds expanded; empty
// documents skipped) into objects.
func DecodeManifests(manifests []byte) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(manifests), 4096)
	var out []*unstructured.Unstructured
	for i := 1; ; i++ {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if len(m) == 0 {
			continue
		}
		u := &unstructured.Unstructured{Object: m}
		if u.IsList() {
			l, err := u.ToList()
			if err != nil {
				return nil, fmt.Errorf("document %d: %w", i, err)
			}
			for j := range l.Items {
				out = append(out, &l.Items[j])
			}
			continue
		}
		out = append(out, u)
	}
}

func objName(obj *unstructured.Unstructured) string {
	if obj.GetNamespace() != "" {
		return obj.GetNamespace() + "/" + obj.GetName()
	}
	return obj.GetName()
}

// poll calls cond every 100 ms until it reports done, returns an error, or
// ctx ends; then the error names what and cond's last reason.
func poll(ctx context.Context, what string, cond func() (done bool, reason string, err error)) error {
	last := "not checked yet"
	for {
		done, reason, err := cond()
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		if done {
			return nil
		}
		if reason != "" {
			last = reason
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %v; last: %s", what, ctx.Err(), last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// WaitNodeReady waits until the node's Ready condition is True.
func (n *Node) WaitNodeReady(ctx context.Context) (*corev1.Node, error) {
	var node *corev1.Node
	err := poll(ctx, "node "+NodeName+" Ready", func() (bool, string, error) {
		var err error
		node, err = n.Client.CoreV1().Nodes().Get(ctx, NodeName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady {
				return c.Status == corev1.ConditionTrue, fmt.Sprintf("Ready=%s %s: %s%s", c.Status, c.Reason, c.Message, n.exitsNote()), nil
			}
		}
		return false, "no Ready condition yet", nil
	})
	return node, err
}

func (n *Node) waitNodeRegistered(ctx context.Context) error {
	return poll(ctx, "node "+NodeName+" registered", func() (bool, string, error) {
		_, err := n.Client.CoreV1().Nodes().Get(ctx, NodeName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error() + n.exitsNote(), nil
		}
		return true, "", nil
	})
}

func (n *Node) waitServiceAccount(ctx context.Context, namespace string) error {
	return poll(ctx, "ServiceAccount "+namespace+"/default", func() (bool, string, error) {
		_, err := n.Client.CoreV1().ServiceAccounts(namespace).Get(ctx, "default", metav1.GetOptions{})
		if err != nil {
			return false, err.Error() + n.exitsNote(), nil
		}
		return true, "", nil
	})
}

func (n *Node) exitsNote() string {
	if ex := n.Exits(); len(ex) > 0 {
		return " (" + strings.Join(ex, "; ") + ")"
	}
	return ""
}

// Namespace creates a namespace named prefix-<random>, waits for its
// default ServiceAccount (pods are refused before), and deletes it when the
// test ends (without waiting: kubelet tears its pods down in the background).
func (n *Node) Namespace(t testing.TB, prefix string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	name := strings.ToLower(prefix) + "-" + rand.String(5)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := n.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("nodetest: namespace %s: %v", name, err)
	}
	if err := n.waitServiceAccount(ctx, name); err != nil {
		t.Fatalf("nodetest: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		n.Client.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{})
	})
	return name
}
