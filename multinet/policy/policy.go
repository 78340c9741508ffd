// Package policy is multinet's operator policy for NetworkAttachmentDefinitions:
// which plugin types a NAD outside the operator's namespaces may run — at
// every level of its configuration: each plugin of a list, each "ipam",
// each delegate of a delegating plugin — and, per type, rules on keys
// whose values reach the host (paths, host links, chains, sockets,
// credentials). NAD authors are namespace users, and their configurations
// run as root on every node; the policy is what stands between the two.
//
// The format (JSON, or YAML in a file), every key optional:
//
//	{
//	  "mode": "enforce",          // "audit": report, attach anyway; "off"
//	  "exemptNamespaces": [...],  // default: the caller's (multinet: globalNamespaces,
//	                              // systemNamespaces, multusNamespace)
//	  "builtin": true,            // start from the built-in rules (builtin.json)
//	  "otherTypes": "deny",       // types without an entry: "deny" or "allow"
//	  "types": {
//	    "<type>": {"allow": true, "keys": {"<path>": RULE, ...}, "delegates": {"<path>": "<default type>"}},
//	    "<type>": false           // = {"allow": false}; true = {}
//	  }
//	}
//
// An entry for a type allows it (unless "allow": false) and adds its keys
// to the built-in rules of that type; a key written replaces the built-in
// rule of the same path (`true` or {} lifts it, `false` = {"deny": true}).
// A RULE holds any of: "deny", "required", "oneOf", "noneOf", "prefix",
// "pattern" (RE2, whole value), "under" (clean absolute paths at or below),
// "within" (addresses or prefixes inside one of the CIDRs), "min", "max";
// "names": true applies them to the member names of an object value
// (tuning's sysctl keys); "default" is the plugin's value when the key is
// absent, checked as if written. A path is member names separated by dots,
// "*" for any member; arrays on the way and at the end are entered
// element by element. Names match as encoding/json matches struct fields
// (case-insensitively, Unicode folding): a plugin reads "DataDir" as
// dataDir, so the rule for dataDir applies to it.
package policy

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"math"
	"net/netip"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"

	"sigs.k8s.io/yaml"

	"github.com/patchbay-cni/patchbay/spec"
)

// Mode says what a violation does.
type Mode string

const (
	// Enforce refuses the pod (CNI code 7) and records a Warning Event.
	Enforce Mode = "enforce"
	// Audit records the Event and a log line and attaches anyway.
	Audit Mode = "audit"
	// Off checks nothing.
	Off Mode = "off"
)

// Policy is a parsed policy: the built-in rules merged with an operator's.
type Policy struct {
	Mode Mode
	// ExemptNamespaces, when not nil, replaces the caller's default set of
	// namespaces whose NADs are not checked.
	ExemptNamespaces []string
	// OtherTypes allows plugin types that have no entry.
	OtherTypes bool
	otherRule  string // where OtherTypes was decided, for messages

	mu    sync.Mutex
	types map[string]*typeRule
	// lazy holds the built-in policy's entries until a check needs them:
	// reading all of them costs a thin plugin's process ~0.5 ms, a pod
	// needs two or three.
	lazy map[string]json.RawMessage
	// base, when set, has the entries this policy does not (the built-in
	// rules under an operator's policy).
	base *Policy
}

type typeRule struct {
	name      string // "types.<type>" with its source
	allow     bool
	allowRule string
	keys      map[string]*keyRule // by path as written
	delegates map[string]string   // path -> type when the delegate has none
}

type keyRule struct {
	path                  []string
	name                  string // for messages: where the rule was written
	deny, required, names bool
	oneOf, noneOf         []any
	prefix, under         []string
	pattern               *regexp.Regexp
	patternText           string
	within                []netip.Prefix
	min, max              *float64
	def                   any
	hasDef                bool
}

//go:embed builtin.json
var builtinJSON []byte

// Builtin is the built-in policy's text (what an operator's policy starts
// from unless it says "builtin": false).
func Builtin() []byte { return builtinJSON }

var (
	builtinOnce   sync.Once
	builtinPolicy *Policy
)

const builtinPrefix = "built-in rule "

// Default is the built-in policy. It is read once per process, on first
// use (the thin plugin pays nothing for a pod that needs no check), and
// each type's rules when a check first needs them.
func Default() *Policy {
	builtinOnce.Do(func() { builtinPolicy = parseBuiltin(builtinJSON) })
	return builtinPolicy
}

// parseBuiltin reads the top of the built-in policy; its entries are
// parsed on demand (rule). TestBuiltinParses parses every one of them.
func parseBuiltin(data []byte) *Policy {
	var top struct {
		Mode       Mode                       `json:"mode"`
		OtherTypes string                     `json:"otherTypes"`
		Types      map[string]json.RawMessage `json:"types"`
	}
	p := &Policy{Mode: Enforce, types: map[string]*typeRule{}, otherRule: builtinPrefix + "otherTypes"}
	if err := json.Unmarshal(data, &top); err != nil {
		// Only a broken build gets here: refuse every type.
		return p
	}
	p.Mode, p.OtherTypes, p.lazy = top.Mode, top.OtherTypes == "allow", top.Types
	return p
}

// rule is the entry of a type (nil: none).
func (p *Policy) rule(name string) *typeRule {
	p.mu.Lock()
	t, ok := p.types[name]
	if !ok {
		if raw, isLazy := p.lazy[name]; isLazy {
			var err error
			var v any
			if v, err = decodeTree(raw); err == nil {
				t = &typeRule{keys: map[string]*keyRule{}, delegates: map[string]string{}}
				err = t.merge(v, builtinPrefix+"types."+name)
			}
			if err != nil { // a broken build: refuse the type
				t = &typeRule{name: name, allowRule: builtinPrefix + "types." + name + " (unreadable: " + err.Error() + ")"}
			}
			p.types[name], ok = t, true
			delete(p.lazy, name)
		}
	}
	p.mu.Unlock()
	if !ok && p.base != nil {
		return p.base.rule(name)
	}
	return t
}

// Parse reads an operator's policy (JSON or YAML). source names where it
// was written, for errors and messages: "nadPolicy" (a key of multinet's
// configuration) or "nadPolicyFile /path". Errors are CNI code 7 naming
// the key.
func Parse(data []byte, source string) (*Policy, error) {
	prefix := source + "."
	if strings.HasPrefix(source, "nadPolicyFile") {
		prefix = source + ": "
	}
	j := data
	if t := strings.TrimSpace(string(data)); !strings.HasPrefix(t, "{") {
		// YAML (a ConfigMap's file). JSON is read as it is: the YAML
		// conversion would drop repeated keys instead of refusing them.
		var err error
		if j, err = yaml.YAMLToJSON(data); err != nil {
			return nil, invalid(source, "is neither a JSON object nor YAML: %v", err)
		}
	}
	return parse(j, prefix, Default())
}

func invalid(key, format string, a ...any) error {
	return spec.Errorf(spec.ErrInvalidNetworkConfig, "%s %s", key, fmt.Sprintf(format, a...))
}

// parse reads a policy; prefix starts every key name in errors and rule
// names; base, when not nil and not refused by "builtin": false, is what
// the policy adds to.
func parse(data []byte, prefix string, base *Policy) (*Policy, error) {
	src := strings.TrimSuffix(strings.TrimSuffix(prefix, "."), ": ")
	tree, err := decodeTree(data)
	if err != nil {
		return nil, invalid(src, "is not valid JSON: %v", err)
	}
	top, ok := tree.(object)
	if !ok {
		if tree == nil { // YAML of an empty file, JSON null: nothing added
			top = object{}
		} else {
			return nil, invalid(src, "must be an object (got %s)", render(tree))
		}
	}
	fields, err := fieldsOf(top, prefix, "mode", "exemptNamespaces", "builtin", "otherTypes", "types")
	if err != nil {
		return nil, err
	}
	p := &Policy{Mode: Enforce, types: map[string]*typeRule{}, otherRule: prefix + "otherTypes"}
	useBase := base != nil
	if v, ok := fields["builtin"]; ok {
		b, ok := v.(bool)
		if !ok {
			return nil, invalid(prefix+"builtin", "must be true or false (got %s)", render(v))
		}
		useBase = useBase && b
	}
	if useBase {
		p.Mode, p.OtherTypes, p.otherRule = base.Mode, base.OtherTypes, base.otherRule
		p.ExemptNamespaces = base.ExemptNamespaces
		p.base = base
	}
	if v, ok := fields["mode"]; ok {
		s, _ := v.(string)
		if v == false { // YAML 1.1 reads a bare off as false
			s = string(Off)
		}
		switch Mode(s) {
		case Enforce, Audit, Off:
			p.Mode = Mode(s)
		default:
			return nil, invalid(prefix+"mode", "must be \"enforce\", \"audit\" or \"off\" (got %s)", render(v))
		}
	}
	if v, ok := fields["otherTypes"]; ok {
		switch s, _ := v.(string); s {
		case "allow", "deny":
			p.OtherTypes, p.otherRule = s == "allow", prefix+"otherTypes"
		default:
			return nil, invalid(prefix+"otherTypes", "must be \"allow\" or \"deny\" (got %s)", render(v))
		}
	}
	if v, ok := fields["exemptNamespaces"]; ok {
		list, err := stringList(v, prefix+"exemptNamespaces")
		if err != nil {
			return nil, err
		}
		for i, ns := range list {
			if ns == "" {
				return nil, invalid(fmt.Sprintf("%sexemptNamespaces[%d]", prefix, i), "is empty")
			}
		}
		p.ExemptNamespaces = list
	}
	if v, ok := fields["types"]; ok {
		types, ok := v.(object)
		if !ok {
			return nil, invalid(prefix+"types", "must be an object of plugin types (got %s)", render(v))
		}
		seen := map[string]bool{}
		for _, m := range types {
			key := prefix + "types." + m.name
			if seen[m.name] {
				return nil, invalid(key, "is given twice")
			}
			seen[m.name] = true
			if err := spec.ValidatePluginType("type", m.name); err != nil {
				return nil, invalid(key, "is not a plugin type name (a file name: letters, digits, '_', '.', '-')")
			}
			if err := p.addType(m.name, m.value, key); err != nil {
				return nil, err
			}
		}
	}
	return p, nil
}

// fieldsOf maps an object's members by name, refusing unknown and
// repeated names: a misspelt key of a security policy must not be
// silently ignored.
func fieldsOf(o object, prefix string, known ...string) (map[string]any, error) {
	out := make(map[string]any, len(o))
	for _, m := range o {
		if !contains(known, m.name) {
			return nil, invalid(prefix+m.name, "is not a policy key (known here: %s)", strings.Join(known, ", "))
		}
		if _, dup := out[m.name]; dup {
			return nil, invalid(prefix+m.name, "is given twice")
		}
		out[m.name] = m.value
	}
	return out, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func stringList(v any, key string) ([]string, error) {
	arr, ok := v.([]any)
	if !ok {
		return nil, invalid(key, "must be a list of strings (got %s)", render(v))
	}
	out := make([]string, 0, len(arr))
	for i, e := range arr {
		s, ok := e.(string)
		if !ok {
			return nil, invalid(fmt.Sprintf("%s[%d]", key, i), "must be a string (got %s)", render(e))
		}
		out = append(out, s)
	}
	return out, nil
}

func (t *typeRule) clone() *typeRule {
	c := *t
	c.keys = make(map[string]*keyRule, len(t.keys))
	for k, v := range t.keys {
		c.keys[k] = v
	}
	c.delegates = make(map[string]string, len(t.delegates))
	for k, v := range t.delegates {
		c.delegates[k] = v
	}
	return &c
}

// addType merges one "types" entry into p, over its base's entry.
func (p *Policy) addType(name string, v any, key string) error {
	t := &typeRule{keys: map[string]*keyRule{}, delegates: map[string]string{}}
	if p.base != nil {
		if b := p.base.rule(name); b != nil {
			t = b.clone()
		}
	}
	p.types[name] = t
	return t.merge(v, key)
}

// merge reads one "types" entry over t.
func (t *typeRule) merge(v any, key string) error {
	t.name, t.allow, t.allowRule = key, true, key
	switch x := v.(type) {
	case bool:
		t.allow = x
		return nil
	case object:
		fields, err := fieldsOf(x, key+".", "allow", "keys", "delegates")
		if err != nil {
			return err
		}
		if a, ok := fields["allow"]; ok {
			b, ok := a.(bool)
			if !ok {
				return invalid(key+".allow", "must be true or false (got %s)", render(a))
			}
			t.allow, t.allowRule = b, key+".allow"
		}
		if ks, ok := fields["keys"]; ok {
			obj, ok := ks.(object)
			if !ok {
				return invalid(key+".keys", "must be an object of key paths (got %s)", render(ks))
			}
			seen := map[string]bool{}
			for _, m := range obj {
				rk := key + ".keys." + m.name
				if seen[m.name] {
					return invalid(rk, "is given twice")
				}
				seen[m.name] = true
				r, err := parseRule(m.name, m.value, rk)
				if err != nil {
					return err
				}
				t.keys[m.name] = r
			}
		}
		if ds, ok := fields["delegates"]; ok {
			obj, ok := ds.(object)
			if !ok {
				return invalid(key+".delegates", "must be an object of key paths to default types (got %s)", render(ds))
			}
			for _, m := range obj {
				dk := key + ".delegates." + m.name
				if _, err := splitPath(m.name, dk); err != nil {
					return err
				}
				s, ok := m.value.(string)
				if !ok {
					return invalid(dk, "must be a plugin type, or \"\" when the delegate must name its own (got %s)", render(m.value))
				}
				if s != "" {
					if err := spec.ValidatePluginType("type", s); err != nil {
						return invalid(dk, "%q is not a plugin type name", s)
					}
				}
				t.delegates[m.name] = s
			}
		}
		return nil
	}
	return invalid(key, "must be an object, true or false (got %s)", render(v))
}

func splitPath(path, key string) ([]string, error) {
	segs := strings.Split(path, ".")
	for _, s := range segs {
		if s == "" {
			return nil, invalid(key, "is not a key path (member names separated by single dots, \"*\" for any)")
		}
	}
	return segs, nil
}

// parseRule reads one key rule.
func parseRule(path string, v any, key string) (*keyRule, error) {
	segs, err := splitPath(path, key)
	if err != nil {
		return nil, err
	}
	r := &keyRule{path: segs, name: key}
	switch x := v.(type) {
	case bool:
		r.deny = !x
		return r, nil
	case object:
		fields, err := fieldsOf(x, key+".", "deny", "required", "names", "oneOf", "noneOf", "prefix", "pattern",
			"under", "within", "min", "max", "default")
		if err != nil {
			return nil, err
		}
		return r, r.fill(fields, key)
	}
	return nil, invalid(key, "must be a rule object, true (anything) or false (deny) (got %s)", render(v))
}

func (r *keyRule) fill(f map[string]any, key string) error {
	flag := func(name string, into *bool) error {
		v, ok := f[name]
		if !ok {
			return nil
		}
		b, ok := v.(bool)
		if !ok {
			return invalid(key+"."+name, "must be true or false (got %s)", render(v))
		}
		*into = b
		return nil
	}
	for name, into := range map[string]*bool{"deny": &r.deny, "required": &r.required, "names": &r.names} {
		if err := flag(name, into); err != nil {
			return err
		}
	}
	scalars := func(name string) ([]any, error) {
		v, ok := f[name]
		if !ok {
			return nil, nil
		}
		arr, ok := v.([]any)
		if !ok {
			return nil, invalid(key+"."+name, "must be a list of values (got %s)", render(v))
		}
		for i, e := range arr {
			switch e.(type) {
			case object, []any:
				return nil, invalid(fmt.Sprintf("%s.%s[%d]", key, name, i), "must be a string, number, boolean or null (got %s)", render(e))
			}
		}
		return arr, nil
	}
	var err error
	if r.oneOf, err = scalars("oneOf"); err != nil {
		return err
	}
	if r.noneOf, err = scalars("noneOf"); err != nil {
		return err
	}
	if v, ok := f["prefix"]; ok {
		if r.prefix, err = stringList(v, key+".prefix"); err != nil {
			return err
		}
	}
	if v, ok := f["pattern"]; ok {
		s, ok := v.(string)
		if !ok {
			return invalid(key+".pattern", "must be a regular expression string (got %s)", render(v))
		}
		re, err := regexp.Compile(`^(?:` + s + `)$`)
		if err != nil {
			return invalid(key+".pattern", "%q is not a valid regular expression (RE2): %v", s, err)
		}
		r.pattern, r.patternText = re, s
	}
	if v, ok := f["under"]; ok {
		dirs, err := stringList(v, key+".under")
		if err != nil {
			return err
		}
		for i, d := range dirs {
			if !filepath.IsAbs(d) {
				return invalid(fmt.Sprintf("%s.under[%d]", key, i), "%q is not an absolute path", d)
			}
			r.under = append(r.under, filepath.Clean(d))
		}
	}
	if v, ok := f["within"]; ok {
		cidrs, err := stringList(v, key+".within")
		if err != nil {
			return err
		}
		for i, c := range cidrs {
			pfx, err := parsePrefix(c)
			if err != nil {
				return invalid(fmt.Sprintf("%s.within[%d]", key, i), "%q is not an address or CIDR", c)
			}
			r.within = append(r.within, pfx)
		}
	}
	for name, into := range map[string]**float64{"min": &r.min, "max": &r.max} {
		v, ok := f[name]
		if !ok {
			continue
		}
		n, ok := number(v)
		if !ok {
			return invalid(key+"."+name, "must be a number (got %s)", render(v))
		}
		*into = &n
	}
	if r.min != nil && r.max != nil && *r.min > *r.max {
		return invalid(key, "has min %v above max %v", *r.min, *r.max)
	}
	if v, ok := f["default"]; ok {
		if r.names {
			return invalid(key+".default", "cannot be combined with \"names\"")
		}
		r.def, r.hasDef = v, true
	}
	if r.deny && (r.required || r.names || r.hasDef || r.hasMatchers()) {
		return invalid(key+".deny", "cannot be combined with other rules (a denied key may not be set at all)")
	}
	return nil
}

func (r *keyRule) hasMatchers() bool {
	return r.oneOf != nil || r.noneOf != nil || r.prefix != nil || r.pattern != nil || r.under != nil ||
		r.within != nil || r.min != nil || r.max != nil
}

func number(v any) (float64, bool) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, false
	}
	f, err := n.Float64()
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, false
	}
	return f, true
}

// parsePrefix reads an address (a /32 or /128) or a CIDR (host bits
// allowed, as in host-local's "subnet"), IPv4-mapped IPv6 as IPv4.
func parsePrefix(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, err
		}
		a := p.Addr()
		bits := p.Bits()
		if a.Is4In6() {
			if bits < 96 {
				return netip.Prefix{}, fmt.Errorf("IPv4-mapped prefix shorter than /96")
			}
			a, bits = a.Unmap(), bits-96
		}
		return netip.PrefixFrom(a, bits).Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	a = a.Unmap().WithZone("")
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// Types lists the types the policy has an entry for, allowed or not.
func (p *Policy) Types() []string {
	set := map[string]bool{}
	for q := p; q != nil; q = q.base {
		q.mu.Lock()
		for t := range q.types {
			set[t] = true
		}
		for t := range q.lazy {
			set[t] = true
		}
		q.mu.Unlock()
	}
	out := make([]string, 0, len(set))
	for t := range set {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}
