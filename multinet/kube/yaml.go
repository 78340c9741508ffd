package kube

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// parseYAML reads the YAML that kubeconfig files are written in, into
// map[string]any / []any / string / bool / nil: block mappings and
// sequences (a sequence may sit at its key's indentation, as kubectl writes
// it), one-line flow collections ({a: b}, [x, y]), plain, 'single' and
// "double" quoted scalars, comments and a leading "---". Anchors, aliases,
// tags, block scalars (| >), multi-line scalars and several documents are
// refused with an error naming the line: kubeconfig writers (kubectl,
// kubeadm, the Multus and multinet installers) do not produce them. A JSON
// document (also YAML) is read with encoding/json.
//
// It replaces a general YAML library, whose package initialization alone
// (~0.2-0.4 ms measured here) and parse (~0.15 ms) were paid by every
// multinet invocation, DEL included.
func parseYAML(data []byte) (any, error) {
	if t := strings.TrimSpace(string(data)); strings.HasPrefix(t, "{") { // JSON, any layout
		var v any
		if err := json.Unmarshal([]byte(t), &v); err != nil {
			return nil, fmt.Errorf("JSON: %w", err)
		}
		return v, nil
	}
	p := &yamlParser{}
	for i, raw := range strings.Split(string(data), "\n") {
		line := strings.TrimRight(raw, " \t\r")
		content := strings.TrimLeft(line, " ")
		if content == "" || content[0] == '#' {
			continue
		}
		if strings.HasPrefix(content, "\t") {
			return nil, fmt.Errorf("line %d: tab indentation", i+1)
		}
		if line == "---" && len(p.lines) == 0 {
			continue
		}
		if line == "---" || line == "..." {
			return nil, fmt.Errorf("line %d: more than one YAML document", i+1)
		}
		p.lines = append(p.lines, yamlLine{no: i + 1, indent: len(line) - len(content), text: content})
	}
	if len(p.lines) == 0 {
		return nil, nil
	}
	v, err := p.block(p.lines[0].indent)
	if err != nil {
		return nil, err
	}
	if p.pos < len(p.lines) {
		return nil, p.errf(p.lines[p.pos], "unexpected indentation")
	}
	return v, nil
}

type yamlLine struct {
	no, indent int
	text       string
}

type yamlParser struct {
	lines []yamlLine
	pos   int
}

func (p *yamlParser) errf(l yamlLine, format string, a ...any) error {
	return fmt.Errorf("line %d: %s (only the YAML subset kubeconfig writers produce is read; JSON works too)", l.no, fmt.Sprintf(format, a...))
}

func isSeqItem(text string) bool { return text == "-" || strings.HasPrefix(text, "- ") }

// block reads the mapping or sequence whose lines are at indent.
func (p *yamlParser) block(indent int) (any, error) {
	l := p.lines[p.pos]
	if isSeqItem(l.text) {
		return p.sequence(indent)
	}
	if _, _, ok := splitKey(l.text); !ok {
		// A lone scalar or flow collection.
		p.pos++
		if p.pos < len(p.lines) && p.lines[p.pos].indent > indent {
			return nil, p.errf(p.lines[p.pos], "multi-line scalars are not supported")
		}
		return scalarOrFlow(l, l.text)
	}
	return p.mapping(indent)
}

func (p *yamlParser) mapping(indent int) (any, error) {
	m := map[string]any{}
	for p.pos < len(p.lines) {
		l := p.lines[p.pos]
		if l.indent < indent {
			break
		}
		if l.indent > indent {
			return nil, p.errf(l, "unexpected indentation")
		}
		if isSeqItem(l.text) {
			break // the enclosing sequence's next item
		}
		key, rest, ok := splitKey(l.text)
		if !ok {
			return nil, p.errf(l, "expected \"key: value\"")
		}
		if _, dup := m[key]; dup {
			return nil, p.errf(l, "duplicate key %q", key)
		}
		p.pos++
		v, err := p.value(l, indent, rest)
		if err != nil {
			return nil, err
		}
		m[key] = v
	}
	return m, nil
}

// value reads what follows "key:" (rest) on a line at indent: a scalar or
// flow collection, or a nested block on the next lines (deeper, or a
// sequence at the same indentation).
func (p *yamlParser) value(l yamlLine, indent int, rest string) (any, error) {
	if rest != "" {
		if p.pos < len(p.lines) && p.lines[p.pos].indent > indent {
			return nil, p.errf(p.lines[p.pos], "multi-line scalars are not supported")
		}
		return scalarOrFlow(l, rest)
	}
	if p.pos >= len(p.lines) {
		return nil, nil
	}
	next := p.lines[p.pos]
	switch {
	case next.indent > indent:
		return p.block(next.indent)
	case next.indent == indent && isSeqItem(next.text):
		return p.sequence(indent)
	}
	return nil, nil
}

func (p *yamlParser) sequence(indent int) (any, error) {
	seq := []any{}
	for p.pos < len(p.lines) {
		l := p.lines[p.pos]
		if l.indent != indent || !isSeqItem(l.text) {
			if l.indent > indent {
				return nil, p.errf(l, "unexpected indentation")
			}
			break
		}
		item := strings.TrimLeft(strings.TrimPrefix(l.text, "-"), " ")
		if item == "" { // the item is the nested block below
			p.pos++
			if p.pos < len(p.lines) && p.lines[p.pos].indent > indent {
				v, err := p.block(p.lines[p.pos].indent)
				if err != nil {
					return nil, err
				}
				seq = append(seq, v)
			} else {
				seq = append(seq, nil)
			}
			continue
		}
		// "- key: value" starts a mapping whose keys align with "key".
		itemIndent := indent + len(l.text) - len(item)
		p.lines[p.pos] = yamlLine{no: l.no, indent: itemIndent, text: item}
		v, err := p.block(itemIndent)
		if err != nil {
			return nil, err
		}
		seq = append(seq, v)
	}
	return seq, nil
}

// splitKey splits "key: rest" (or "key:") with a plain or quoted key.
func splitKey(text string) (key, rest string, ok bool) {
	if text == "" || strings.ContainsRune("[{", rune(text[0])) {
		return "", "", false
	}
	if text[0] == '"' || text[0] == '\'' {
		s, n, err := quoted(text)
		if err != nil || !strings.HasPrefix(text[n:], ":") {
			return "", "", false
		}
		after := text[n+1:]
		if after != "" && after[0] != ' ' {
			return "", "", false
		}
		return s, strings.TrimSpace(after), true
	}
	for i := 0; i < len(text); i++ {
		if text[i] == ':' && (i+1 == len(text) || text[i+1] == ' ') {
			return strings.TrimSpace(text[:i]), strings.TrimSpace(text[i+1:]), true
		}
		if text[i] == '#' && i > 0 && text[i-1] == ' ' {
			break
		}
	}
	return "", "", false
}

// scalarOrFlow reads a value written on one line.
func scalarOrFlow(l yamlLine, text string) (any, error) {
	fp := &flowParser{s: text}
	v, err := fp.value(true)
	if err == nil {
		fp.skipSpace()
		if fp.i < len(fp.s) && fp.s[fp.i] != '#' {
			err = fmt.Errorf("unexpected %q after the value", fp.s[fp.i:])
		}
	}
	if err != nil {
		return nil, fmt.Errorf("line %d: %v (only the YAML subset kubeconfig writers produce is read; JSON works too)", l.no, err)
	}
	return v, nil
}

type flowParser struct {
	s string
	i int
}

func (f *flowParser) skipSpace() {
	for f.i < len(f.s) && f.s[f.i] == ' ' {
		f.i++
	}
}

// value reads one value; top is true outside flow collections, where a
// plain scalar runs to the end of the line (or a comment).
func (f *flowParser) value(top bool) (any, error) {
	f.skipSpace()
	if f.i >= len(f.s) {
		return nil, nil
	}
	switch c := f.s[f.i]; c {
	case '{':
		return f.mapping()
	case '[':
		return f.sequence()
	case '"', '\'':
		s, n, err := quoted(f.s[f.i:])
		f.i += n
		return s, err
	case '&', '*', '!', '|', '>', '%', '@', '`':
		return nil, fmt.Errorf("%q (anchors, aliases, tags and block scalars) is not supported", c)
	}
	start := f.i
	for f.i < len(f.s) {
		c := f.s[f.i]
		if c == '#' && f.i > start && f.s[f.i-1] == ' ' {
			break
		}
		if !top && (c == ',' || c == '}' || c == ']') {
			break
		}
		if !top && c == ':' && (f.i+1 == len(f.s) || f.s[f.i+1] == ' ' || f.s[f.i+1] == ',') {
			break
		}
		f.i++
	}
	return plain(strings.TrimSpace(f.s[start:f.i])), nil
}

func (f *flowParser) mapping() (any, error) {
	f.i++ // {
	m := map[string]any{}
	for {
		f.skipSpace()
		if f.i < len(f.s) && f.s[f.i] == '}' {
			f.i++
			return m, nil
		}
		k, err := f.value(false)
		if err != nil {
			return nil, err
		}
		key, ok := k.(string)
		if !ok {
			key = fmt.Sprint(k)
		}
		f.skipSpace()
		if f.i >= len(f.s) || f.s[f.i] != ':' {
			return nil, fmt.Errorf("expected ':' after key %q in a flow mapping", key)
		}
		f.i++
		if m[key], err = f.value(false); err != nil {
			return nil, err
		}
		if err := f.next('}'); err != nil {
			return nil, err
		}
		if f.s[f.i-1] == '}' {
			return m, nil
		}
	}
}

func (f *flowParser) sequence() (any, error) {
	f.i++ // [
	seq := []any{}
	for {
		f.skipSpace()
		if f.i < len(f.s) && f.s[f.i] == ']' {
			f.i++
			return seq, nil
		}
		v, err := f.value(false)
		if err != nil {
			return nil, err
		}
		seq = append(seq, v)
		if err := f.next(']'); err != nil {
			return nil, err
		}
		if f.s[f.i-1] == ']' {
			return seq, nil
		}
	}
}

// next consumes ',' or the closing character.
func (f *flowParser) next(closing byte) error {
	f.skipSpace()
	if f.i < len(f.s) && (f.s[f.i] == ',' || f.s[f.i] == closing) {
		f.i++
		return nil
	}
	return fmt.Errorf("expected ',' or %q in a flow collection (which must fit on one line)", closing)
}

// quoted reads a quoted scalar at the start of s; n is its length.
func quoted(s string) (string, int, error) {
	q := s[0]
	for i := 1; i < len(s); i++ {
		switch {
		case q == '"' && s[i] == '\\':
			i++
		case s[i] == q && q == '\'' && i+1 < len(s) && s[i+1] == '\'':
			i++
		case s[i] == q:
			if q == '\'' {
				return strings.ReplaceAll(s[1:i], "''", "'"), i + 1, nil
			}
			v, err := strconv.Unquote(s[:i+1])
			if err != nil {
				return "", 0, fmt.Errorf("invalid double-quoted string %s: %v", s[:i+1], err)
			}
			return v, i + 1, nil
		}
	}
	return "", 0, fmt.Errorf("unterminated quoted string %s (multi-line scalars are not supported)", s)
}

// plain types a plain scalar: null and booleans as YAML has them, anything
// else (numbers too) a string, which is what every kubeconfig field we
// read is.
func plain(s string) any {
	switch s {
	case "", "~", "null", "Null", "NULL":
		return nil
	case "true", "True", "TRUE":
		return true
	case "false", "False", "FALSE":
		return false
	}
	return s
}
