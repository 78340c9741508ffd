package selection

import "strings"

// parseComma reads the comma-delimited format (§4.1.1): items "name",
// "namespace/name", each optionally followed by "@ifname" (the shorthand
// Multus established for "interface"). Blanks around items and around each
// part are dropped.
func (p *parser) parseComma(v string) []*Selection {
	var out []*Selection
	for i, item := range strings.Split(v, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			p.elemf(i, "", "", Fatal, "4.1.1", "item is empty (stray comma?) in %q", v)
			continue
		}
		if s := p.commaItem(i, item); s != nil {
			out = append(out, s)
		}
	}
	return out
}

func (p *parser) commaItem(i int, item string) *Selection {
	ref, ifname, hasIf := strings.Cut(item, "@")
	if strings.Contains(ifname, "@") {
		p.elemf(i, item, "", Fatal, "4.1.1", "item %q has more than one '@'", item)
		return nil
	}
	ns, name, hasNS := strings.Cut(ref, "/")
	if !hasNS {
		ns, name = "", ref
	}
	if strings.Contains(name, "/") {
		p.elemf(i, item, "", Fatal, "4.1.1", "item %q has more than one '/'; the format is [namespace/]name[@interface]", item)
		return nil
	}
	ns, name, ifname = strings.TrimSpace(ns), strings.TrimSpace(name), strings.TrimSpace(ifname)
	if hasNS && ns == "" {
		p.elemf(i, item, "namespace", Fatal, "4.1.1", "item %q has an empty namespace before '/'", item)
		return nil
	}
	if ns == "" {
		ns = p.podNS
	}
	s := &Selection{Index: i, Namespace: ns, Name: name}
	if !p.checkRef(i, item, s) {
		return nil
	}
	if hasIf {
		if prob := ifNameProblem(ifname); prob != "" {
			p.elemf(i, s.Ref(), "interface", Ignored, "4.1.2.1.5", "interface %q (after '@') %s", ifname, prob)
			return nil
		}
		s.Interface, s.InterfaceRequested = ifname, true
	}
	return s
}

// checkRef validates namespace and name; label is how the element is shown
// when the reference itself is bad.
func (p *parser) checkRef(i int, label string, s *Selection) bool {
	if prob := objectNameProblem(s.Name); prob != "" {
		p.elemf(i, label, "name", Fatal, "3.3", "network name %q is invalid: it %s", s.Name, prob)
		return false
	}
	if prob := namespaceProblem(s.Namespace); prob != "" {
		p.elemf(i, label, "namespace", Fatal, "3.3", "namespace %q is invalid: it %s", s.Namespace, prob)
		return false
	}
	return true
}
