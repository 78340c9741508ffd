package daemon

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// metrics are the daemon's Prometheus metrics (README "Metrics" lists them).
type metrics struct {
	reg         *prometheus.Registry
	verb        *prometheus.HistogramVec // verb, result
	delegate    *prometheus.HistogramVec // verb, plugin, result
	apiLatency  *prometheus.HistogramVec // method, resource
	apiErrors   *prometheus.CounterVec   // method, resource, code
	attachments *prometheus.CounterVec   // verb, network, result
	reads       *prometheus.CounterVec   // kind, source
	inFlight    prometheus.Gauge
	waiting     prometheus.Gauge
	refused     *prometheus.CounterVec // reason
}

// latencyBuckets: 0.25 ms to about 16 s, doubling.
var latencyBuckets = prometheus.ExponentialBuckets(0.00025, 2, 17)

func newMetrics() *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		verb: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "multinet_verb_duration_seconds", Buckets: latencyBuckets,
			Help: "Time the daemon took for a CNI verb, from receiving the request to answering it (queueing included), by verb and result (success, error).",
		}, []string{"verb", "result"}),
		delegate: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "multinet_delegate_duration_seconds", Buckets: latencyBuckets,
			Help: "Run time of one delegate plugin execution, by verb, plugin type and result.",
		}, []string{"verb", "plugin", "result"}),
		apiLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "multinet_api_request_duration_seconds", Buckets: latencyBuckets,
			Help: "Latency of apiserver requests (watches excluded), by method and resource.",
		}, []string{"method", "resource"}),
		apiErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "multinet_api_request_errors_total",
			Help: "apiserver requests that failed, by method, resource and HTTP code (\"error\" when there was no answer).",
		}, []string{"method", "resource", "code"}),
		attachments: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "multinet_attachments_total",
			Help: "Attachments (one network of one pod) handled, by verb (ADD, CHECK, DEL), network (namespace/name) and result.",
		}, []string{"verb", "network", "result"}),
		reads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "multinet_object_reads_total",
			Help: "Pod and NetworkAttachmentDefinition reads of the verbs, by kind and source: informer (no API request), informer_miss (then read from the API), api.",
		}, []string{"kind", "source"}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "multinet_requests_in_flight", Help: "Requests being run now (at most maxParallelRequests).",
		}),
		waiting: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "multinet_requests_waiting", Help: "Requests waiting for a free slot.",
		}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "multinet_requests_refused_total",
			Help: "Requests answered with CNI error 11 without running, by reason (shutdown, malformed).",
		}, []string{"reason"}),
	}
	m.reg.MustRegister(m.verb, m.delegate, m.apiLatency, m.apiErrors, m.attachments, m.reads, m.inFlight, m.waiting, m.refused,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

func result(err error) string {
	if err != nil {
		return "error"
	}
	return "success"
}

// observeAttachment is plugin.Host.Observe.
func (m *metrics) observeAttachment(verb, network string, err error) {
	m.attachments.WithLabelValues(verb, network, result(err)).Inc()
}

// roundTripper measures every apiserver request (informers' included).
type roundTripper struct {
	m    *metrics
	next http.RoundTripper
}

func (rt *roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	method, resource := apiLabels(req)
	start := time.Now()
	resp, err := rt.next.RoundTrip(req)
	if method != "WATCH" {
		rt.m.apiLatency.WithLabelValues(method, resource).Observe(time.Since(start).Seconds())
	}
	switch {
	case err != nil:
		rt.m.apiErrors.WithLabelValues(method, resource, "error").Inc()
	case resp.StatusCode >= 400:
		rt.m.apiErrors.WithLabelValues(method, resource, strconv.Itoa(resp.StatusCode)).Inc()
	}
	return resp, err
}

// apiLabels names a request: method (GET, LIST, WATCH, PATCH, POST, ...)
// and resource ("pods", "pods/status", "network-attachment-definitions",
// "events"), without object names, so the labels stay few.
func apiLabels(req *http.Request) (string, string) {
	parts := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
	// /api/v1/... or /apis/<group>/<version>/...
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) >= 3 && parts[0] == "apis":
		parts = parts[3:]
	default:
		return req.Method, "other"
	}
	if len(parts) >= 2 && parts[0] == "namespaces" {
		parts = parts[2:]
	}
	resource, named := "", false
	switch len(parts) {
	case 0:
		resource = "namespaces"
	case 1:
		resource = parts[0]
	case 2:
		resource, named = parts[0], true
	default:
		resource, named = parts[0]+"/"+parts[2], true
	}
	method := req.Method
	if method == http.MethodGet && !named {
		method = "LIST"
		if req.URL.Query().Get("watch") == "true" || req.URL.Query().Get("watch") == "1" {
			method = "WATCH"
		}
	}
	return method, resource
}
