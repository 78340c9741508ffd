package policy

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"sort"
	"strings"

	"github.com/patchbay-cni/patchbay/runtime"
	"github.com/patchbay-cni/patchbay/spec"
)

// Network is one attachment as the delegating plugin will run it.
type Network struct {
	// List is the network's configuration after every edit the
	// delegating plugin makes (name injection, cni-args merged into
	// args.cni).
	List *spec.ConfList
	// CapabilityArgs become each plugin's runtimeConfig for the
	// capabilities it declares (the pod's portMappings, ips, mac, ...).
	CapabilityArgs map[string]any
	// ReservedNames are network names the network may not take: the
	// cluster network's (its plugins keep state by network name, e.g.
	// host-local's address pool).
	ReservedNames []string
}

// Violation is one way a network breaks the policy.
type Violation struct {
	// Where is the plugin configuration: "plugins[1]", "plugins[0].ipam",
	// "plugins[0].delegate"; "network" for the network's own name.
	Where string
	// Type is that plugin's type.
	Type string
	// Key is the offending key's path inside it ("" when the type itself
	// is refused); Value its value as written ("" when it is absent).
	Key, Value string
	// Rule names the rule: "built-in rule types.host-local.keys.dataDir",
	// "nadPolicy.types.bridge.keys.bridge", ...
	Rule string
	// Why says what the value fails.
	Why string
}

func (v Violation) String() string {
	where := v.Where
	if v.Type != "" {
		where += fmt.Sprintf(" (%s)", v.Type)
	}
	what := v.Why
	if v.Key != "" {
		what = fmt.Sprintf("%q", v.Key)
		if v.Value != "" {
			what += " = " + v.Value
		}
		what += " " + v.Why
	}
	return printable(fmt.Sprintf("%s: %s [%s]", where, what, v.Rule))
}

// printable escapes control characters (names in paths come from the
// network's configuration and the policy; the text goes into errors,
// Events and log lines).
func printable(s string) string {
	if !strings.ContainsFunc(s, isControl) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if isControl(r) {
			fmt.Fprintf(&b, "\\x%02x", r)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

// maxNesting bounds plugin configurations inside plugin configurations
// (ipam, delegates).
const maxNesting = 8

// Check returns every violation of n, in a stable order (none: allowed).
func (p *Policy) Check(n Network) []Violation {
	c := &checker{p: p}
	if n.List == nil {
		return nil
	}
	for _, r := range n.ReservedNames {
		if r != "" && n.List.Name == r {
			c.add(Violation{Where: "network", Key: "name", Value: render(n.List.Name), Rule: "reserved network name",
				Why: "is the cluster network's name: plugins keep state by network name (host-local's address pool, result caches), so it would share the cluster network's"})
		}
	}
	for i, pc := range n.List.Plugins {
		where := fmt.Sprintf("plugins[%d]", i)
		req, err := spec.BuildRequest(pc, n.List.Name, n.List.Version(), nil, runtime.RuntimeConfigFor(pc, n.CapabilityArgs), nil)
		if err != nil {
			c.add(Violation{Where: where, Type: pc.Network.Type, Rule: "readable configuration", Why: "cannot be read: " + err.Error()})
			continue
		}
		tree, err := decodeTree(req)
		obj, ok := tree.(object)
		if err != nil || !ok {
			c.add(Violation{Where: where, Type: pc.Network.Type, Rule: "readable configuration", Why: fmt.Sprintf("cannot be read: %v", err)})
			continue
		}
		c.forgedKeys(obj, where, pc.Network.Type)
		walk(p, obj, pc.Network.Type, where, 0, c.plugin, c.add)
	}
	return c.out
}

// Types lists every plugin type of a network at every level (its plugins,
// their ipam, the delegates of the built-in delegating types), in order.
func Types(list *spec.ConfList) []string {
	var out []string
	for _, pc := range list.Plugins {
		tree, err := decodeTree(pc.Bytes)
		obj, ok := tree.(object)
		if err != nil || !ok {
			out = append(out, pc.Network.Type)
			continue
		}
		walk(Default(), obj, pc.Network.Type, "", 0, func(_ object, typ, _ string) bool {
			out = append(out, typ)
			return true
		}, func(Violation) {})
	}
	return out
}

// walk visits a plugin configuration and every one nested in it: its
// "ipam", and for types with "delegates" the configurations at those
// paths (objects, lists of them, or configuration lists with "plugins").
// visit returns whether to look inside; bad nesting is reported to fail.
func walk(p *Policy, obj object, typ, where string, depth int, visit func(object, string, string) bool, fail func(Violation)) {
	if depth > maxNesting {
		fail(Violation{Where: where, Type: typ, Rule: "nesting", Why: fmt.Sprintf("nests plugin configurations more than %d deep", maxNesting)})
		return
	}
	if !visit(obj, typ, where) {
		return
	}
	nested := func(v any, at, defType string) {
		o, ok := v.(object)
		if !ok {
			return
		}
		t, ok := typeOf(o, defType)
		if !ok {
			fail(Violation{Where: at, Rule: "unambiguous type", Why: "gives \"type\" more than once with different values: parsers disagree on which runs"})
			return
		}
		if t == "" {
			return // no plugin there (an empty ipam)
		}
		walk(p, o, t, at, depth+1, visit, fail)
	}
	for _, v := range obj.lookup("ipam") {
		nested(v, where+".ipam", "")
	}
	t := p.rule(typ)
	if t == nil {
		return
	}
	paths := make([]string, 0, len(t.delegates))
	for path := range t.delegates {
		paths = append(paths, path)
	}
	sort.Strings(paths)
	for _, path := range paths {
		segs, _ := splitPath(path, "")
		var found []found
		resolve(obj, segs, "", &found)
		for _, f := range found {
			for _, leaf := range flatten(f) {
				at := where + "." + leaf.at
				if o, ok := leaf.value.(object); ok {
					if lists := o.lookup("plugins"); len(lists) > 0 { // a configuration list
						for _, l := range lists {
							for i, e := range asList(l) {
								nested(e, fmt.Sprintf("%s.plugins[%d]", at, i), t.delegates[path])
							}
						}
						continue
					}
				}
				nested(leaf.value, at, t.delegates[path])
			}
		}
	}
}

func asList(v any) []any {
	if arr, ok := v.([]any); ok {
		return arr
	}
	return []any{v}
}

// typeOf is a nested configuration's "type" (def when it has none); not
// ok when it gives several different ones.
func typeOf(o object, def string) (string, bool) {
	ts := o.lookup("type")
	if len(ts) == 0 {
		return def, true
	}
	first, _ := ts[0].(string)
	for _, v := range ts[1:] {
		if s, _ := v.(string); s != first {
			return "", false
		}
	}
	if first == "" {
		return def, true
	}
	return first, true
}

type checker struct {
	p   *Policy
	out []Violation
}

func (c *checker) add(v Violation) { c.out = append(c.out, v) }

// forgedKeys refuses members that a plugin decoding with encoding/json
// reads as runtimeConfig or prevResult ("RuntimeConfig", "prevRe\u017fult"):
// only the runtime writes those (from the declared capabilities, from the
// previous plugin), and it removes only the exact names.
func (c *checker) forgedKeys(obj object, where, typ string) {
	for _, m := range obj {
		for _, k := range []string{"runtimeConfig", "prevResult"} {
			if m.name != k && strings.EqualFold(m.name, k) {
				c.add(Violation{Where: where, Type: typ, Key: m.name, Value: render(m.value), Rule: "reserved keys",
					Why: fmt.Sprintf("reads as %q to a plugin, which only the runtime may set", k)})
			}
		}
	}
}

// plugin checks one plugin configuration's type and keys; it returns
// whether to check what is nested in it.
func (c *checker) plugin(obj object, typ, where string) bool {
	if err := spec.ValidatePluginType("type", typ); err != nil {
		c.add(Violation{Where: where, Type: typ, Rule: "plugin type names", Why: fmt.Sprintf("type %q is not a plugin name", typ)})
		return false
	}
	t := c.p.rule(typ)
	if t == nil {
		if !c.p.OtherTypes {
			c.add(Violation{Where: where, Type: typ, Rule: c.p.otherRule,
				Why: fmt.Sprintf("type %q is not allowed: the policy has no entry for it (an operator allows it with nadPolicy.types.%s)", typ, typ)})
			return false
		}
		return true
	}
	if !t.allow {
		c.add(Violation{Where: where, Type: typ, Rule: t.allowRule, Why: fmt.Sprintf("type %q is not allowed", typ)})
		return false
	}
	paths := make([]string, 0, len(t.keys))
	for path := range t.keys {
		paths = append(paths, path)
	}
	sort.Strings(paths)
	for _, path := range paths {
		c.rule(obj, t.keys[path], where, typ)
	}
	return true
}

type found struct {
	at    string
	value any
}

// resolve finds the values at a path: arrays on the way are entered
// element by element, "*" is any member, names fold as encoding/json's.
func resolve(v any, segs []string, at string, out *[]found) {
	if len(segs) == 0 {
		*out = append(*out, found{at, v})
		return
	}
	switch x := v.(type) {
	case []any:
		for i, e := range x {
			resolve(e, segs, fmt.Sprintf("%s[%d]", at, i), out)
		}
	case object:
		for _, m := range x {
			if segs[0] == "*" || strings.EqualFold(m.name, segs[0]) {
				next := m.name
				if at != "" {
					next = at + "." + m.name
				}
				resolve(m.value, segs[1:], next, out)
			}
		}
	}
}

// flatten enters the arrays of a found value (conditionsV4's tokens are
// checked one by one).
func flatten(f found) []found {
	arr, ok := f.value.([]any)
	if !ok {
		return []found{f}
	}
	var out []found
	for i, e := range arr {
		out = append(out, flatten(found{fmt.Sprintf("%s[%d]", f.at, i), e})...)
	}
	return out
}

func (c *checker) rule(obj object, r *keyRule, where, typ string) {
	var fs []found
	resolve(obj, r.path, "", &fs)
	// null and "" count as not set: plugins decoding with encoding/json
	// keep their default for null, and treat "" as unset (bridge "" is
	// cni0, dataDir "" the default directory).
	path := strings.Join(r.path, ".")
	if r.deny { // the key as a whole; empty values set nothing
		for _, f := range fs {
			if !empty(f.value) {
				c.add(Violation{Where: where, Type: typ, Key: f.at, Value: render(f.value), Rule: r.name, Why: "must not be set"})
			}
		}
		return
	}
	var set []found
	unset := len(fs) == 0
	for _, f := range fs {
		for _, leaf := range flatten(f) {
			if leaf.value != nil && leaf.value != "" {
				set = append(set, leaf)
			} else {
				// {"bridge":"b1","Bridge":""}: a plugin may read either.
				unset = true
			}
		}
	}
	if len(set) == 0 && r.required {
		c.add(Violation{Where: where, Type: typ, Key: path, Rule: r.name, Why: "must be set"})
	}
	if unset && r.hasDef {
		if why := r.match(r.def); why != "" {
			c.add(Violation{Where: where, Type: typ, Key: path, Rule: r.name,
				Why: fmt.Sprintf("is not set, and the plugin's default %s %s", render(r.def), why)})
		}
	}
	for _, leaf := range set {
		if !r.names {
			if why := r.match(leaf.value); why != "" {
				c.add(Violation{Where: where, Type: typ, Key: leaf.at, Value: render(leaf.value), Rule: r.name, Why: why})
			}
			continue
		}
		o, ok := leaf.value.(object)
		if !ok {
			c.add(Violation{Where: where, Type: typ, Key: leaf.at, Value: render(leaf.value), Rule: r.name,
				Why: "must be an object (the rule checks its keys)"})
			continue
		}
		for _, m := range o {
			if why := r.match(m.name); why != "" {
				c.add(Violation{Where: where, Type: typ, Key: leaf.at, Rule: r.name,
					Why: fmt.Sprintf("has the key %q, which %s", m.name, why)})
			}
		}
	}
}

func empty(v any) bool {
	switch x := v.(type) {
	case nil:
		return true
	case string:
		return x == ""
	case []any:
		return len(x) == 0
	case object:
		return len(x) == 0
	}
	return false
}

// match says why a value fails the rule's matchers ("" when it passes).
func (r *keyRule) match(v any) string {
	if !r.hasMatchers() {
		return ""
	}
	if _, ok := v.(object); ok {
		return "is an object, not a value the rule allows"
	}
	if r.oneOf != nil && !anyEqual(r.oneOf, v) {
		return "is not one of " + renderList(r.oneOf)
	}
	if r.noneOf != nil && anyEqual(r.noneOf, v) {
		return "is one of the refused values " + renderList(r.noneOf)
	}
	s, isStr := v.(string)
	if r.prefix != nil {
		ok := false
		for _, p := range r.prefix {
			ok = ok || isStr && strings.HasPrefix(s, p)
		}
		if !ok {
			return "does not start with any of " + renderStrings(r.prefix)
		}
	}
	if r.pattern != nil && !(isStr && r.pattern.MatchString(s)) {
		return fmt.Sprintf("does not match the pattern %q", r.patternText)
	}
	if r.under != nil && !(isStr && under(s, r.under)) {
		return "is not a clean absolute path at or under any of " + renderStrings(r.under)
	}
	if r.within != nil {
		var pfx netip.Prefix
		var err error
		if isStr {
			pfx, err = parsePrefix(s)
		}
		if !isStr || err != nil || !within(pfx, r.within) {
			cidrs := make([]string, len(r.within))
			for i, w := range r.within {
				cidrs[i] = w.String()
			}
			return "is not an address or prefix inside " + renderStrings(cidrs)
		}
	}
	if r.min != nil || r.max != nil {
		n, ok := number(v)
		switch {
		case !ok:
			return "is not a number"
		case r.min != nil && n < *r.min:
			return fmt.Sprintf("is below the minimum %v", *r.min)
		case r.max != nil && n > *r.max:
			return fmt.Sprintf("is above the maximum %v", *r.max)
		}
	}
	return ""
}

func anyEqual(list []any, v any) bool {
	for _, e := range list {
		if jsonEqual(e, v) {
			return true
		}
	}
	return false
}

// under: p is absolute and already clean (a plugin may not clean it, and
// the kernel resolves ".." after symbolic links, not lexically), and is
// one of dirs or below one.
func under(p string, dirs []string) bool {
	if !filepath.IsAbs(p) || filepath.Clean(p) != p {
		return false
	}
	for _, d := range dirs {
		if p == d || d == "/" || strings.HasPrefix(p, d+"/") {
			return true
		}
	}
	return false
}

func within(p netip.Prefix, allowed []netip.Prefix) bool {
	for _, a := range allowed {
		if a.Addr().Is4() == p.Addr().Is4() && a.Bits() <= p.Bits() && a.Contains(p.Addr()) {
			return true
		}
	}
	return false
}

// renderList shows at most a few values of a rule's list.
func renderList(list []any) string {
	parts := make([]string, 0, len(list))
	for _, e := range list {
		parts = append(parts, render(e))
	}
	return joinShort(parts)
}

func renderStrings(list []string) string {
	parts := make([]string, 0, len(list))
	for _, s := range list {
		parts = append(parts, render(s))
	}
	return joinShort(parts)
}

func joinShort(parts []string) string {
	const shown = 6
	if len(parts) > shown {
		return "[" + strings.Join(parts[:shown], ", ") + fmt.Sprintf(", … %d more]", len(parts)-shown)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}
