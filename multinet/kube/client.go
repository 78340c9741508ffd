package kube

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/patchbay-cni/patchbay/multinet/api"
)

// Client talks to one apiserver. Requests reuse one HTTP/2 connection.
type Client struct {
	base  string
	token string
	http  *http.Client
	// UserAgent identifies us in audit logs.
	UserAgent string
	// retryUnauthorized sends a request answered 401 once more: the
	// transport of NewWithHTTP re-reads a rotated token file after a 401.
	retryUnauthorized bool
}

// NewWithHTTP builds a client on an HTTP client that authenticates by
// itself: the daemon's, from client-go's transport (TLS, client
// certificates, and a token file re-read when it rotates — every minute, and
// at once after a 401, which is why a request answered 401 is sent once
// more). server is the apiserver's URL.
func NewWithHTTP(server string, hc *http.Client) *Client {
	return &Client{base: strings.TrimRight(server, "/"), http: hc, UserAgent: "multinet", retryUnauthorized: true}
}

// New builds a client; timeout bounds each request.
func New(cfg *Config, timeout time.Duration) (*Client, error) {
	tlsCfg := &tls.Config{InsecureSkipVerify: cfg.Insecure} //nolint:gosec // only when the kubeconfig asks
	if len(cfg.CAData) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(cfg.CAData) {
			return nil, errors.New("kube: certificate authority data holds no PEM certificate")
		}
		tlsCfg.RootCAs = pool
	}
	if len(cfg.CertData) > 0 || len(cfg.KeyData) > 0 {
		cert, err := tls.X509KeyPair(cfg.CertData, cfg.KeyData)
		if err != nil {
			return nil, fmt.Errorf("kube: client certificate: %w", err)
		}
		tlsCfg.Certificates = []tls.Certificate{cert}
	}
	token := cfg.Token
	if token == "" && cfg.TokenFile != "" {
		b, err := os.ReadFile(cfg.TokenFile)
		if err != nil {
			return nil, fmt.Errorf("kube: token file: %w", err)
		}
		token = strings.TrimSpace(string(b))
	}
	tr := &http.Transport{
		TLSClientConfig:     tlsCfg,
		ForceAttemptHTTP2:   true,
		MaxIdleConnsPerHost: 4,
		TLSHandshakeTimeout: timeout,
		Proxy:               http.ProxyFromEnvironment,
	}
	return &Client{
		base:      strings.TrimRight(cfg.Server, "/"),
		token:     token,
		http:      &http.Client{Transport: tr, Timeout: timeout},
		UserAgent: "multinet",
	}, nil
}

// StatusError is a non-2xx answer.
type StatusError struct {
	Method, Path string
	Code         int
	Reason       string
	Message      string
}

func (e *StatusError) Error() string {
	if e.Reason != "" {
		return fmt.Sprintf("%s %s: %d %s: %s", e.Method, e.Path, e.Code, e.Reason, e.Message)
	}
	return fmt.Sprintf("%s %s: %d: %s", e.Method, e.Path, e.Code, e.Message)
}

// IsNotFound reports a 404 answer.
func IsNotFound(err error) bool { return hasCode(err, http.StatusNotFound) }

// IsConflict reports a 409 answer.
func IsConflict(err error) bool { return hasCode(err, http.StatusConflict) }

func hasCode(err error, code int) bool {
	var se *StatusError
	return errors.As(err, &se) && se.Code == code
}

func (c *Client) do(ctx context.Context, method, path, contentType string, body []byte, out any) error {
	err := c.doOnce(ctx, method, path, contentType, body, out)
	if c.retryUnauthorized && hasCode(err, http.StatusUnauthorized) {
		err = c.doOnce(ctx, method, path, contentType, body, out)
	}
	return err
}

func (c *Client) doOnce(ctx context.Context, method, path, contentType string, body []byte, out any) error {
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, r)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", c.UserAgent)
	if body != nil {
		req.Header.Set("Content-Type", contentType)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("%s %s: reading the answer: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		se := &StatusError{Method: method, Path: path, Code: resp.StatusCode, Message: strings.TrimSpace(string(data))}
		var st struct{ Reason, Message string }
		if json.Unmarshal(data, &st) == nil && st.Message != "" {
			se.Reason, se.Message = st.Reason, st.Message
		}
		return se
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("%s %s: decoding the answer: %w", method, path, err)
		}
	}
	return nil
}

// Pod is the part of a pod we read.
type Pod struct {
	Metadata api.ObjectMeta `json:"metadata"`
	Spec     PodSpec        `json:"spec"`
}

// PodSpec is the part of a pod's spec we read.
type PodSpec struct {
	// NodeName is the node the pod is bound to: the name its kubelet
	// registered (--hostname-override honoured), which Events name as
	// their source host.
	NodeName string `json:"nodeName,omitempty"`
}

func podPath(ns, name string) string {
	return "/api/v1/namespaces/" + url.PathEscape(ns) + "/pods/" + url.PathEscape(name)
}

// fromCache is the query of a read the apiserver may answer from its watch
// cache ("resourceVersion=0": any version, no etcd quorum read). Measured
// here it takes 1-2 ms off a pod GET + NAD GET; the object may be a few
// milliseconds old, which the callers handle (see GetPod).
const fromCache = "?resourceVersion=0"

// GetPod reads a pod: a quorum read, or with cached from the apiserver's
// watch cache. The kubelet learned of the pod from that cache, so a cached
// read normally finds it; callers retry with a quorum read when a cached
// read says "not found" or returns another pod of the same name (UID).
func (c *Client) GetPod(ctx context.Context, ns, name string, cached bool) (*Pod, error) {
	var p Pod
	path := podPath(ns, name)
	if cached {
		path += fromCache
	}
	if err := c.do(ctx, http.MethodGet, path, "", nil, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// GetNAD reads a NetworkAttachmentDefinition; cached as for GetPod.
func (c *Client) GetNAD(ctx context.Context, ns, name string, cached bool) (*api.NetworkAttachmentDefinition, error) {
	var n api.NetworkAttachmentDefinition
	path := "/apis/" + api.Group + "/" + api.NADVersion + "/namespaces/" + url.PathEscape(ns) + "/" + api.NADResource + "/" + url.PathEscape(name)
	if cached {
		path += fromCache
	}
	if err := c.do(ctx, http.MethodGet, path, "", nil, &n); err != nil {
		return nil, err
	}
	if n.Metadata.Namespace == "" {
		n.Metadata.Namespace = ns
	}
	return &n, nil
}

// ErrPodReplaced says the pod of that name now has another UID.
var ErrPodReplaced = errors.New("the pod was deleted and re-created with another UID")

// SetNetworkStatus writes the network-status annotation through the pod's
// status subresource (so a node agent needs only pods/status rights) with a
// JSON merge patch. The patch carries metadata.uid, which the apiserver
// refuses to change: a pod re-created under the same name is never written
// (ErrPodReplaced). Conflicts (409) and throttling/unavailability
// (429, 500, 503, 504) are retried with backoff, at most attempts times.
func (c *Client) SetNetworkStatus(ctx context.Context, ns, name, uid, value string, attempts int) error {
	meta := map[string]any{"annotations": map[string]any{api.NetworkStatusAnnotation: value}}
	if uid != "" {
		meta["uid"] = uid
	}
	body, err := json.Marshal(map[string]any{"metadata": meta})
	if err != nil {
		return err
	}
	backoff := 10 * time.Millisecond
	for i := 1; ; i++ {
		err = c.do(ctx, http.MethodPatch, podPath(ns, name)+"/status", "application/merge-patch+json", body, nil)
		if err == nil {
			return nil
		}
		var se *StatusError
		if !errors.As(err, &se) {
			return err
		}
		// A patch whose metadata.uid differs from the stored pod's is
		// refused: 422 "metadata.uid ... field is immutable" (or a 409
		// precondition failure on older servers).
		if uid != "" && (se.Code == http.StatusConflict && strings.Contains(se.Message, "Precondition failed: UID") ||
			se.Code == http.StatusUnprocessableEntity && strings.Contains(se.Message, "metadata.uid")) {
			return fmt.Errorf("%w: %v", ErrPodReplaced, err)
		}
		switch se.Code {
		case http.StatusConflict, http.StatusTooManyRequests, http.StatusInternalServerError,
			http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		default:
			return err
		}
		if i >= attempts {
			return fmt.Errorf("after %d attempts: %w", i, err)
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(backoff):
		}
		backoff *= 2
	}
}

// ClearNetworkStatus removes the network-status annotation of the pod
// (status subresource, one JSON patch) only if the pod still has that UID
// and the annotation still holds value: the patch tests both before the
// remove, so the status another sandbox of the pod wrote meanwhile, or a
// re-created pod's, is left alone. It reports whether it removed it; a
// failed test or a missing pod is not an error.
func (c *Client) ClearNetworkStatus(ctx context.Context, ns, name, uid, value string) (bool, error) {
	path := "/metadata/annotations/" + strings.NewReplacer("~", "~0", "/", "~1").Replace(api.NetworkStatusAnnotation)
	body, err := json.Marshal([]map[string]any{
		{"op": "test", "path": "/metadata/uid", "value": uid},
		{"op": "test", "path": path, "value": value},
		{"op": "remove", "path": path},
	})
	if err != nil {
		return false, err
	}
	err = c.do(ctx, http.MethodPatch, podPath(ns, name)+"/status", "application/json-patch+json", body, nil)
	var se *StatusError
	switch {
	case err == nil:
		return true, nil
	case errors.As(err, &se) && (se.Code == http.StatusNotFound || se.Code == http.StatusUnprocessableEntity):
		return false, nil // gone, or not ours any more
	}
	return false, err
}

// Event types.
const (
	EventWarning = "Warning"
	EventNormal  = "Normal"
)

// CreateEvent records a core/v1 Event about a pod, once: the event's name
// is derived from the pod's UID, the reason and the message, so the same
// problem reported again (the kubelet retrying a failed sandbox, a new
// sandbox of the same pod) finds the event already there (409) and adds
// none.
func (c *Client) CreateEvent(ctx context.Context, pod *Pod, typ, reason, message, component, host string) error {
	now := time.Now().UTC().Format(time.RFC3339)
	if len(message) > 1024 { // the apiserver refuses longer event messages
		message = message[:1021] + "..."
	}
	ev := map[string]any{
		"apiVersion": "v1",
		"kind":       "Event",
		"metadata": map[string]any{
			"name":      EventName(pod, reason, message),
			"namespace": pod.Metadata.Namespace,
		},
		"involvedObject": map[string]any{
			"apiVersion": "v1", "kind": "Pod", "name": pod.Metadata.Name,
			"namespace": pod.Metadata.Namespace, "uid": pod.Metadata.UID,
			"resourceVersion": pod.Metadata.ResourceVersion,
		},
		"type": typ, "reason": reason, "message": message,
		"source":         map[string]any{"component": component, "host": host},
		"firstTimestamp": now, "lastTimestamp": now, "count": 1,
		"reportingComponent": component, "reportingInstance": host,
	}
	body, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	path := "/api/v1/namespaces/" + url.PathEscape(pod.Metadata.Namespace) + "/events"
	err = c.do(ctx, http.MethodPost, path, "application/json", body, nil)
	if IsConflict(err) { // already reported
		return nil
	}
	return err
}

// EventName is "<pod>.<16 hex digits of sha256(uid, reason, message)>",
// the pod name shortened so that the whole is a valid object name.
func EventName(pod *Pod, reason, message string) string {
	sum := sha256.Sum256([]byte(pod.Metadata.UID + "\x00" + reason + "\x00" + message))
	name := pod.Metadata.Name
	if len(name) > 253-17 {
		name = strings.TrimRight(name[:253-17], ".-")
	}
	return name + "." + hex.EncodeToString(sum[:8])
}
