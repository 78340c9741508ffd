package daemon

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/patchbay-cni/patchbay/multinet/api"
	"github.com/patchbay-cni/patchbay/multinet/kube"
)

// DefaultServiceAccountDir is where a pod's service account files are.
const DefaultServiceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// restConfig builds the client configuration: the kubeconfig, or the
// in-cluster service account (serviceAccountDir, KUBERNETES_SERVICE_HOST and
// _PORT). A token file (the projected service account token, a
// kubeconfig's tokenFile) is never read once for good: see tokenFile.
func restConfig(kubeconfig, serviceAccountDir string) (*rest.Config, error) {
	var cfg *rest.Config
	if kubeconfig != "" {
		c, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
		}
		cfg = c
	} else {
		host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
		if host == "" || port == "" {
			return nil, fmt.Errorf("no \"kubeconfig\" and not in a pod (KUBERNETES_SERVICE_HOST/PORT unset)")
		}
		if serviceAccountDir == "" {
			serviceAccountDir = DefaultServiceAccountDir
		}
		ca := filepath.Join(serviceAccountDir, "ca.crt")
		if _, err := os.Stat(ca); err != nil {
			return nil, fmt.Errorf("in-cluster configuration: %w", err)
		}
		cfg = &rest.Config{
			Host:            "https://" + joinHostPort(host, port),
			TLSClientConfig: rest.TLSClientConfig{CAFile: ca},
			BearerTokenFile: filepath.Join(serviceAccountDir, "token"),
		}
	}
	if cfg.BearerTokenFile != "" {
		// client-go would re-read the file only once a minute and, for a
		// file token, not after a 401 (transport.bearerAuthRoundTripper):
		// a token rotated and revoked meanwhile fails requests for up to a
		// minute. tokenFile re-reads it as soon as the file changes.
		tf := &tokenFile{path: cfg.BearerTokenFile}
		if _, err := tf.get(); err != nil {
			return nil, err
		}
		cfg.BearerToken, cfg.BearerTokenFile = "", ""
		cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return &tokenRoundTripper{tf, rt} })
	}
	cfg.UserAgent = "multinet-daemon"
	// The defaults (5 queries per second, bursts of 10) would queue a
	// burst of pods' status writes behind each other.
	cfg.QPS, cfg.Burst = 100, 200
	return cfg, nil
}

func joinHostPort(host, port string) string {
	if len(host) > 0 && host[0] != '[' && containsColon(host) {
		return "[" + host + "]:" + port
	}
	return host + ":" + port
}

func containsColon(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == ':' {
			return true
		}
	}
	return false
}

// tokenFile is a bearer token file read again whenever it changes (inode,
// size or modification time: the kubelet replaces a projected token by
// swapping a symbolic link, so the inode changes). A stat per request costs
// about a microsecond.
type tokenFile struct {
	path  string
	mu    sync.Mutex
	token string
	stamp [4]int64
}

func (t *tokenFile) get() (string, error) {
	var st syscall.Stat_t
	err := syscall.Stat(t.path, &st)
	t.mu.Lock()
	defer t.mu.Unlock()
	if err == nil {
		stamp := [4]int64{int64(st.Ino), st.Size, st.Mtim.Sec, st.Mtim.Nsec}
		if stamp == t.stamp && t.token != "" {
			return t.token, nil
		}
		b, rerr := os.ReadFile(t.path)
		if rerr == nil && len(trimSpace(b)) > 0 {
			t.token, t.stamp = string(trimSpace(b)), stamp
			return t.token, nil
		}
		err = rerr
		if err == nil {
			err = fmt.Errorf("empty")
		}
	}
	if t.token != "" { // keep the last good token while the file is being replaced
		return t.token, nil
	}
	return "", fmt.Errorf("token file %s: %w", t.path, err)
}

func trimSpace(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == '\r' || b[len(b)-1] == ' ' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t' || b[0] == '\n' || b[0] == '\r') {
		b = b[1:]
	}
	return b
}

type tokenRoundTripper struct {
	t    *tokenFile
	next http.RoundTripper
}

func (rt *tokenRoundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Header.Get("Authorization") != "" {
		return rt.next.RoundTrip(req)
	}
	tok, err := rt.t.get()
	if err != nil {
		return nil, err
	}
	req = req.Clone(req.Context())
	req.Header.Set("Authorization", "Bearer "+tok)
	return rt.next.RoundTrip(req)
}

// informers watch the pods of this node and every NetworkAttachmentDefinition.
type informers struct {
	pods, nads cache.SharedIndexInformer
}

// newInformers builds both informers on one HTTP client (one connection).
// Their clients know only the two types they read (not client-go's whole
// clientset: its scheme of every API group would cost memory for nothing),
// and the pods' is protobuf. Cached objects keep only what the verbs read.
func newInformers(cfg *rest.Config, hc *http.Client, node string) (*informers, error) {
	podClient, err := restClient(cfg, hc, "/api", corev1.SchemeGroupVersion, corev1.AddToScheme, true)
	if err != nil {
		return nil, err
	}
	nadClient, err := restClient(cfg, hc, "/apis", nadv1.SchemeGroupVersion, nadv1.AddToScheme, false)
	if err != nil {
		return nil, err
	}
	pods := cache.NewSharedIndexInformer(
		cache.NewListWatchFromClient(podClient, "pods", metav1.NamespaceAll, fields.OneTermEqualSelector("spec.nodeName", node)),
		&corev1.Pod{}, 0, cache.Indexers{})
	if err := pods.SetTransform(slimPod); err != nil {
		return nil, err
	}
	nads := cache.NewSharedIndexInformer(
		cache.NewListWatchFromClient(nadClient, "network-attachment-definitions", metav1.NamespaceAll, fields.Everything()),
		&nadv1.NetworkAttachmentDefinition{}, 0, cache.Indexers{})
	if err := nads.SetTransform(slimNAD); err != nil {
		return nil, err
	}
	return &informers{pods: pods, nads: nads}, nil
}

func restClient(base *rest.Config, hc *http.Client, apiPath string, gv schema.GroupVersion, add func(*runtime.Scheme) error, protobuf bool) (*rest.RESTClient, error) {
	scheme := runtime.NewScheme()
	if err := add(scheme); err != nil {
		return nil, err
	}
	metav1.AddToGroupVersion(scheme, gv)
	c := rest.CopyConfig(base)
	c.APIPath, c.GroupVersion = apiPath, &gv
	c.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	if protobuf {
		c.ContentType = runtime.ContentTypeProtobuf
		c.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	}
	return rest.RESTClientForConfigAndClient(c, hc)
}

func (i *informers) run(stop <-chan struct{}) {
	go i.pods.Run(stop)
	go i.nads.Run(stop)
}

func (i *informers) synced() bool { return i.pods.HasSynced() && i.nads.HasSynced() }

func slimPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, UID: p.UID,
			ResourceVersion: p.ResourceVersion, Annotations: p.Annotations},
		Spec: corev1.PodSpec{NodeName: p.Spec.NodeName},
	}, nil
}

func slimNAD(obj any) (any, error) {
	n, ok := obj.(*nadv1.NetworkAttachmentDefinition)
	if !ok {
		return obj, nil
	}
	return &nadv1.NetworkAttachmentDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: n.Name, Namespace: n.Namespace, UID: n.UID, ResourceVersion: n.ResourceVersion},
		Spec:       n.Spec,
	}, nil
}

// informerAPI is the verbs' API (plugin.API) in the daemon: cached reads
// from the informers, a GET when they do not have the object (yet), and
// writes through kube.Client, the thin plugin's code, on client-go's
// authenticating transport.
type informerAPI struct {
	*kube.Client
	inf *informers
	m   *metrics
}

func notInInformer(kind, ns, name string) error {
	return &kube.StatusError{Method: "GET", Path: "informer " + kind + " " + ns + "/" + name, Code: http.StatusNotFound,
		Reason: "NotFound", Message: "not in the daemon's informer (yet)"}
}

func (a *informerAPI) GetPod(ctx context.Context, ns, name string, cached bool) (*kube.Pod, error) {
	if cached {
		obj, ok, _ := a.inf.pods.GetIndexer().GetByKey(ns + "/" + name)
		if p, isPod := obj.(*corev1.Pod); ok && isPod {
			a.m.reads.WithLabelValues("pod", "informer").Inc()
			return &kube.Pod{
				Metadata: api.ObjectMeta{Name: p.Name, Namespace: p.Namespace, UID: string(p.UID),
					ResourceVersion: p.ResourceVersion, Annotations: p.Annotations},
				Spec: kube.PodSpec{NodeName: p.Spec.NodeName},
			}, nil
		}
		a.m.reads.WithLabelValues("pod", "informer_miss").Inc()
		return nil, notInInformer("pod", ns, name)
	}
	a.m.reads.WithLabelValues("pod", "api").Inc()
	return a.Client.GetPod(ctx, ns, name, false)
}

func (a *informerAPI) GetNAD(ctx context.Context, ns, name string, cached bool) (*api.NetworkAttachmentDefinition, error) {
	if cached {
		obj, ok, _ := a.inf.nads.GetIndexer().GetByKey(ns + "/" + name)
		if n, isNAD := obj.(*nadv1.NetworkAttachmentDefinition); ok && isNAD {
			a.m.reads.WithLabelValues("nad", "informer").Inc()
			return &api.NetworkAttachmentDefinition{
				TypeMeta: api.TypeMeta{APIVersion: api.APIVersion(api.NADVersion), Kind: api.NADKind},
				Metadata: api.ObjectMeta{Name: n.Name, Namespace: n.Namespace, UID: string(n.UID), ResourceVersion: n.ResourceVersion},
				Spec:     api.NetworkAttachmentDefinitionSpec{Config: n.Spec.Config},
			}, nil
		}
		a.m.reads.WithLabelValues("nad", "informer_miss").Inc()
		return nil, notInInformer("NetworkAttachmentDefinition", ns, name)
	}
	a.m.reads.WithLabelValues("nad", "api").Inc()
	return a.Client.GetNAD(ctx, ns, name, false)
}

// apiTimeoutClient is hc bounded per request as the thin client is.
func apiTimeoutClient(hc *http.Client, timeout time.Duration) *http.Client {
	c := *hc
	c.Timeout = timeout
	return &c
}
