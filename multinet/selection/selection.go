// Package selection parses and validates the network selection annotation
// k8s.v1.cni.cncf.io/networks (multi-net spec v1.3 §4), assigns interface
// names (§4.1.2.1.5, §4.2.1), checks namespace isolation (§7.4) and turns a
// selection into the capability arguments and "args" its delegate plugins
// receive (§4.1.2.1.x "CNI Delegating Plugin Requirements"). Everything here
// is pure: no I/O, no Kubernetes client.
package selection

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"

	"github.com/patchbay-cni/patchbay/spec"
)

// Selection is one valid element of the annotation: one network attachment.
type Selection struct {
	// Index is the element's position in the annotation (0-based).
	Index int
	// Namespace is the NetworkAttachmentDefinition's namespace; the pod's
	// namespace when the annotation leaves it out or empty (§4.1.2.1.1).
	Namespace string
	// Name is the NetworkAttachmentDefinition's name.
	Name string
	// Interface is the CNI_IFNAME to use: the requested one, or a generated
	// one (Options.InterfacePrefix + N) when none was requested.
	Interface string
	// InterfaceRequested tells whether Interface came from the annotation.
	InterfaceRequested bool

	// IPs are the requested addresses, as written ("10.2.2.42/24", "2001:db8::5").
	IPs []string
	// MAC is the requested 6-byte MAC address, as written.
	MAC string
	// CNIArgs is "cni-args": merged into args.cni of every delegate plugin.
	CNIArgs map[string]json.RawMessage
	// PortMappings are the requested mappings; Protocol is lower case and
	// defaults to "tcp" (§4.1.2.1.7).
	PortMappings []spec.PortMapping
	// Bandwidth is the requested traffic shaping, as written (no defaults).
	Bandwidth *spec.Bandwidth
	// HasDefaultRoute tells whether "default-route" was given; the list of
	// gateways in DefaultRoute may be empty (§4.1.2.1.9).
	HasDefaultRoute bool
	DefaultRoute    []netip.Addr
	// InfinibandGUID is the requested 8-byte GUID, as written.
	InfinibandGUID string
	// IPAMClaimReference names the IPAMClaim whose IPs the delegate should
	// use (§4.1.2.1.11). It has no runtimeConfig key; delegates that honour
	// it read it from the pod annotation themselves.
	IPAMClaimReference string
	// Extensions holds implementation-specific keys (names with a '.',
	// §4.1.2.1) untouched.
	Extensions map[string]json.RawMessage
}

// Ref is "namespace/name", the form the status annotation uses (§5.3.1).
func (s *Selection) Ref() string { return s.Namespace + "/" + s.Name }

// Severity says what a problem does to the pod.
type Severity int

const (
	// Warning: reported, nothing is dropped (e.g. an unknown reserved key).
	Warning Severity = iota
	// Ignored: the spec says the annotation "shall be invalid and ignored":
	// the pod gets no secondary attachment at all, but is not failed.
	Ignored
	// Fatal: the pod network setup must fail.
	Fatal
)

func (s Severity) String() string {
	switch s {
	case Warning:
		return "warning"
	case Ignored:
		return "annotation-ignored"
	case Fatal:
		return "fatal"
	}
	return fmt.Sprintf("Severity(%d)", int(s))
}

// Problem is one thing wrong with the annotation.
type Problem struct {
	// Index is the element concerned, or -1 for the annotation as a whole.
	Index int
	// Network is "namespace/name" (or the raw item) when known.
	Network string
	// Key is the annotation key concerned ("mac", "ips", ...), if any.
	Key      string
	Severity Severity
	// Section is the spec section that decides the severity.
	Section string
	// Message says exactly what is wrong, naming element, key and value.
	Message string
}

// String is Message plus what happens because of it, for events and logs.
func (p Problem) String() string {
	switch p.Severity {
	case Ignored:
		return fmt.Sprintf("%s; the %s annotation is invalid and ignored (multi-net spec §%s)", p.Message, annotationKey, p.Section)
	case Fatal:
		return fmt.Sprintf("%s; pod network setup fails (multi-net spec §%s)", p.Message, p.Section)
	}
	return p.Message
}

// annotationKey is repeated here (not imported from multinet/api) so that
// this package stays independent of the object types.
const annotationKey = "k8s.v1.cni.cncf.io/networks"

// Result is the outcome of Parse.
type Result struct {
	// Selections are the attachments to make, in annotation order. Empty
	// when the annotation is empty, ignored or fatal.
	Selections []*Selection
	// Problems lists everything found, in annotation order.
	Problems []Problem
}

// Fatal reports whether the pod network setup must fail.
func (r *Result) Fatal() bool { return r.worst() == Fatal }

// Ignored reports whether the annotation must be ignored (and nothing is fatal).
func (r *Result) Ignored() bool { return r.worst() == Ignored }

func (r *Result) worst() Severity {
	w := Warning
	for _, p := range r.Problems {
		w = max(w, p.Severity)
	}
	return w
}

// Err returns a *spec.Error (code 7) listing every fatal problem, or nil.
func (r *Result) Err() error {
	var msgs []string
	for _, p := range r.Problems {
		if p.Severity == Fatal {
			msgs = append(msgs, p.Message)
		}
	}
	if len(msgs) == 0 {
		return nil
	}
	return spec.Errorf(spec.ErrInvalidNetworkConfig, "invalid %s annotation: %s", annotationKey, strings.Join(msgs, "; "))
}

// Options tune Parse.
type Options struct {
	// DefaultInterface is the CNI_IFNAME of the cluster-wide default network
	// attachment (usually "eth0"): no selection may request it, and
	// generated names skip it.
	DefaultInterface string
	// InterfacePrefix is the prefix of generated names; "net" when empty.
	InterfacePrefix string
}

// Parse reads the annotation value. podNamespace fills namespaces the
// annotation leaves out. Both formats of §4.1 are accepted: a value whose
// first non-blank character is '[' is the JSON list format, anything else
// the comma-delimited format.
//
// Severity policy (the spec's words decide, everything else fails the pod):
//   - Ignored: an invalid value of "ips", "mac", "interface" (also the
//     "@ifname" of the comma format), "portMappings", "bandwidth",
//     "infiniband-guid", a "default-route" that is not a list of IP
//     addresses, or "default-route" on more than one element — for each of
//     these the spec says the annotation "shall be invalid and ignored".
//     The whole annotation is then ignored: Selections is empty.
//   - Fatal: a malformed annotation (bad JSON, an empty or malformed comma
//     item), a missing or invalid "name" or "namespace" (no such
//     NetworkAttachmentDefinition can exist, so §3.4.1 rule 4 fails the
//     request), "ips" together with "ipam-claim-reference" (§4.1.2.1.11
//     "will result in an error"), an interface name already used by an
//     earlier attachment or by the default network (§4.1.2.1.5 "must fail"),
//     a wrongly typed "cni-args" or "ipam-claim-reference".
//   - When both kinds occur the result is fatal: every problem is still
//     listed so one event can tell the user everything.
func Parse(annotation, podNamespace string, opts Options) *Result {
	p := &parser{podNS: podNamespace, res: &Result{}}
	v := strings.TrimSpace(annotation)
	var sels []*Selection
	switch {
	case v == "":
		return p.res
	case v[0] == '[':
		sels = p.parseJSON(v)
	case v[0] == '{':
		p.add(Problem{Index: -1, Severity: Fatal, Section: "4.1.2",
			Message: "the annotation is a single JSON object; the JSON format is a list of objects: [{...}]"})
	default:
		sels = p.parseComma(v)
	}
	p.checkDefaultRoute(sels)
	p.assignInterfaces(sels, opts)
	if p.res.worst() == Warning {
		p.res.Selections = sels
	}
	return p.res
}

type parser struct {
	podNS string
	res   *Result
}

func (p *parser) add(pr Problem) { p.res.Problems = append(p.res.Problems, pr) }

// elemf records a problem about one element.
func (p *parser) elemf(idx int, ref, key string, sev Severity, section, format string, a ...any) {
	prefix := fmt.Sprintf("networks[%d]", idx)
	if ref != "" {
		prefix += fmt.Sprintf(" (%q)", ref)
	}
	p.add(Problem{Index: idx, Network: ref, Key: key, Severity: sev, Section: section,
		Message: prefix + ": " + fmt.Sprintf(format, a...)})
}

// checkDefaultRoute enforces "only one network attachment may specify the
// default-route key" (§4.1.2.1.9).
func (p *parser) checkDefaultRoute(sels []*Selection) {
	var first *Selection
	for _, s := range sels {
		if s == nil || !s.HasDefaultRoute {
			continue
		}
		if first == nil {
			first = s
			continue
		}
		p.elemf(s.Index, s.Ref(), "default-route", Ignored, "4.1.2.1.9",
			"\"default-route\" is also set on networks[%d] (%q); only one attachment may set it", first.Index, first.Ref())
	}
}

// assignInterfaces fails duplicate requested names (§4.1.2.1.5) and gives
// every other selection a generated name unique in the pod (§4.2.1 asks
// for uniqueness per [container, network]; per pod is stricter and lets the
// same network be selected twice, §4.2). Generated names are prefix+N with
// N counting from 1 and skipping every requested name and the default
// network's interface, so the result depends only on the annotation.
func (p *parser) assignInterfaces(sels []*Selection, opts Options) {
	prefix := opts.InterfacePrefix
	if prefix == "" {
		prefix = "net"
	}
	used := map[string]*Selection{}
	for _, s := range sels {
		if s == nil || !s.InterfaceRequested {
			continue
		}
		if opts.DefaultInterface != "" && s.Interface == opts.DefaultInterface {
			p.elemf(s.Index, s.Ref(), "interface", Fatal, "4.1.2.1.5",
				"interface %q is already used by the cluster-wide default network attachment", s.Interface)
			continue
		}
		if prev, ok := used[s.Interface]; ok {
			p.elemf(s.Index, s.Ref(), "interface", Fatal, "4.1.2.1.5",
				"interface %q is already used by networks[%d] (%q)", s.Interface, prev.Index, prev.Ref())
			continue
		}
		used[s.Interface] = s
	}
	n := 0
	for _, s := range sels {
		if s == nil || s.InterfaceRequested {
			continue
		}
		for {
			n++
			name := fmt.Sprintf("%s%d", prefix, n)
			if prob := ifNameProblem(name); prob != "" {
				// Only a misconfigured (too long) prefix gets here.
				p.elemf(s.Index, s.Ref(), "interface", Fatal, "4.2.1",
					"generated interface name %q %s (interface prefix %q is too long)", name, prob, prefix)
				break
			}
			if _, taken := used[name]; !taken && name != opts.DefaultInterface {
				s.Interface = name
				used[name] = s
				break
			}
		}
	}
}
