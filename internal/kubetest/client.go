package kubetest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// StatusError is a non-2xx answer of the apiserver.
type StatusError struct {
	Method, Path string
	Code         int    // HTTP status
	Reason       string // metav1.Status reason, e.g. "AlreadyExists", when given
	Message      string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("%s %s: %d %s: %s", e.Method, e.Path, e.Code, e.Reason, e.Message)
}

// IsStatus reports whether err is a StatusError with the given HTTP code.
func IsStatus(err error, code int) bool {
	se, ok := err.(*StatusError)
	return ok && se.Code == code
}

// Do sends a request as the admin and returns the status and the JSON body.
// body is nil, raw JSON ([]byte, json.RawMessage or string), or a value to
// marshal. PATCH bodies are sent as JSON merge patches (see DoAs for other
// patch types). A non-2xx answer returns its status, body and a *StatusError.
func (c *Cluster) Do(method, path string, body any) (int, json.RawMessage, error) {
	return c.DoAs(c.Token, method, path, "", body)
}

// DoAs is Do with another bearer token (empty: anonymous) and an explicit
// Content-Type (empty: application/json, or application/merge-patch+json
// for PATCH).
func (c *Cluster) DoAs(token, method, path, contentType string, body any) (int, json.RawMessage, error) {
	var r io.Reader
	if body != nil {
		b, err := rawJSON(body)
		if err != nil {
			return 0, nil, err
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, c.URL+path, r)
	if err != nil {
		return 0, nil, err
	}
	if contentType == "" {
		contentType = "application/json"
		if method == http.MethodPatch {
			contentType = "application/merge-patch+json"
		}
	}
	if body != nil {
		req.Header.Set("Content-Type", contentType)
	}
	req.Header.Set("Accept", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, nil, err
	}
	if resp.StatusCode/100 != 2 {
		se := &StatusError{Method: method, Path: path, Code: resp.StatusCode, Message: strings.TrimSpace(string(out))}
		var st struct{ Reason, Message string }
		if json.Unmarshal(out, &st) == nil && st.Message != "" {
			se.Reason, se.Message = st.Reason, st.Message
		}
		return resp.StatusCode, out, se
	}
	return resp.StatusCode, out, nil
}

func rawJSON(body any) ([]byte, error) {
	switch b := body.(type) {
	case []byte:
		return b, nil
	case json.RawMessage:
		return b, nil
	case string:
		return []byte(b), nil
	default:
		return json.Marshal(body)
	}
}

// objectMeta is what the helpers read from an object to find its URL.
type objectMeta struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"metadata"`
}

// Create POSTs a raw JSON object (apiVersion, kind, metadata.namespace tell
// where; a namespaced object without a namespace goes to "default") and
// returns the stored object.
func (c *Cluster) Create(obj any) (json.RawMessage, error) {
	b, m, err := parseObject(obj)
	if err != nil {
		return nil, err
	}
	path, err := c.ObjectPath(m.APIVersion, m.Kind, m.Metadata.Namespace, "")
	if err != nil {
		return nil, err
	}
	_, out, err := c.Do(http.MethodPost, path, b)
	return out, err
}

// Apply creates or updates a raw JSON object by server-side apply (field
// manager "kubetest", conflicts forced) and returns the stored object.
func (c *Cluster) Apply(obj any) (json.RawMessage, error) {
	b, m, err := parseObject(obj)
	if err != nil {
		return nil, err
	}
	if m.Metadata.Name == "" {
		return nil, fmt.Errorf("apply %s: metadata.name is empty", m.Kind)
	}
	path, err := c.ObjectPath(m.APIVersion, m.Kind, m.Metadata.Namespace, m.Metadata.Name)
	if err != nil {
		return nil, err
	}
	// JSON is YAML, which is what the apply content type carries.
	_, out, err := c.DoAs(c.Token, http.MethodPatch, path+"?fieldManager=kubetest&force=true", "application/apply-patch+yaml", b)
	return out, err
}

// Get returns one object.
func (c *Cluster) Get(apiVersion, kind, namespace, name string) (json.RawMessage, error) {
	path, err := c.ObjectPath(apiVersion, kind, namespace, name)
	if err != nil {
		return nil, err
	}
	_, out, err := c.Do(http.MethodGet, path, nil)
	return out, err
}

// Delete deletes one object; a missing object is not an error.
func (c *Cluster) Delete(apiVersion, kind, namespace, name string) error {
	path, err := c.ObjectPath(apiVersion, kind, namespace, name)
	if err != nil {
		return err
	}
	if _, _, err := c.Do(http.MethodDelete, path, nil); err != nil && !IsStatus(err, http.StatusNotFound) {
		return err
	}
	return nil
}

func parseObject(obj any) ([]byte, objectMeta, error) {
	var m objectMeta
	b, err := rawJSON(obj)
	if err != nil {
		return nil, m, err
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, m, fmt.Errorf("object is not JSON: %v", err)
	}
	if m.APIVersion == "" || m.Kind == "" {
		return nil, m, fmt.Errorf("object has no apiVersion or kind: %.200s", b)
	}
	return b, m, nil
}

// ObjectPath returns the URL path of an object (name != "") or of its
// collection (name == ""), using the apiserver's discovery to map kind to
// resource. Cluster-scoped kinds ignore namespace.
func (c *Cluster) ObjectPath(apiVersion, kind, namespace, name string) (string, error) {
	res, namespaced, err := c.resourceFor(apiVersion, kind)
	if err != nil {
		return "", err
	}
	p := "/apis/" + apiVersion
	if apiVersion == "v1" {
		p = "/api/v1"
	}
	if namespaced {
		if namespace == "" {
			namespace = "default"
		}
		p += "/namespaces/" + url.PathEscape(namespace)
	}
	p += "/" + res
	if name != "" {
		p += "/" + url.PathEscape(name)
	}
	return p, nil
}

// discoveryCache maps apiVersion → kind → resource, filled lazily; a kind
// not found refetches its group version once (new CRDs).
type discoveryCache struct {
	mu sync.Mutex
	gv map[string]map[string]apiResource
}

type apiResource struct {
	Name       string `json:"name"`
	Kind       string `json:"kind"`
	Namespaced bool   `json:"namespaced"`
}

func (c *Cluster) resourceFor(apiVersion, kind string) (string, bool, error) {
	c.disc.mu.Lock()
	defer c.disc.mu.Unlock()
	if r, ok := c.disc.gv[apiVersion][kind]; ok {
		return r.Name, r.Namespaced, nil
	}
	kinds, err := c.discover(apiVersion)
	if err != nil {
		return "", false, err
	}
	if c.disc.gv == nil {
		c.disc.gv = map[string]map[string]apiResource{}
	}
	c.disc.gv[apiVersion] = kinds
	r, ok := kinds[kind]
	if !ok {
		return "", false, fmt.Errorf("kind %s not served in %s (CRD not established yet?)", kind, apiVersion)
	}
	return r.Name, r.Namespaced, nil
}

func (c *Cluster) discover(apiVersion string) (map[string]apiResource, error) {
	path := "/apis/" + apiVersion
	if apiVersion == "v1" {
		path = "/api/v1"
	}
	_, body, err := c.Do(http.MethodGet, path, nil)
	if err != nil {
		return nil, fmt.Errorf("discovery of %s: %w", apiVersion, err)
	}
	var list struct {
		Resources []apiResource `json:"resources"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		return nil, fmt.Errorf("discovery of %s: %v", apiVersion, err)
	}
	kinds := map[string]apiResource{}
	for _, r := range list.Resources {
		if !strings.Contains(r.Name, "/") { // skip subresources such as pods/status
			kinds[r.Kind] = r
		}
	}
	return kinds, nil
}

// EnsureNamespace creates a namespace unless it exists.
func (c *Cluster) EnsureNamespace(name string) error {
	ns := map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": name}}
	if _, _, err := c.Do(http.MethodPost, "/api/v1/namespaces", ns); err != nil && !IsStatus(err, http.StatusConflict) {
		return err
	}
	return nil
}

// CreateDefaultServiceAccount creates the "default" ServiceAccount of a
// namespace unless it exists. Pods are refused without it, and no
// controller-manager runs here to create it.
func (c *Cluster) CreateDefaultServiceAccount(namespace string) error {
	sa := map[string]any{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": map[string]any{"name": "default"}}
	path := "/api/v1/namespaces/" + url.PathEscape(namespace) + "/serviceaccounts"
	if _, _, err := c.Do(http.MethodPost, path, sa); err != nil && !IsStatus(err, http.StatusConflict) {
		return err
	}
	return nil
}

// WaitCRDEstablished waits until the named CustomResourceDefinition has the
// Established condition and its kinds are in discovery. Note: the apiserver
// delays a create of a custom object by 2 s while its CRD has been
// Established for less than 2 s (upstream behaviour, for HA setups).
func (c *Cluster) WaitCRDEstablished(name string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last string
	for {
		_, body, err := c.Do(http.MethodGet, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"+url.PathEscape(name), nil)
		if err == nil {
			var crd struct {
				Spec struct {
					Group    string `json:"group"`
					Names    struct{ Kind string }
					Versions []struct {
						Name   string `json:"name"`
						Served bool   `json:"served"`
					} `json:"versions"`
				} `json:"spec"`
				Status struct {
					Conditions []struct{ Type, Status string } `json:"conditions"`
				} `json:"status"`
			}
			if err = json.Unmarshal(body, &crd); err == nil {
				established := false
				for _, cond := range crd.Status.Conditions {
					established = established || cond.Type == "Established" && cond.Status == "True"
				}
				last = "not Established"
				if established {
					last = ""
					for _, v := range crd.Spec.Versions {
						if !v.Served {
							continue
						}
						if _, _, err := c.resourceFor(crd.Spec.Group+"/"+v.Name, crd.Spec.Names.Kind); err != nil {
							last = err.Error()
						}
					}
					if last == "" {
						return nil
					}
				}
			}
		}
		if err != nil {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("CRD %s not established after %v: %s", name, timeout, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
