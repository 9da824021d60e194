package expr

import (
	"errors"
	"fmt"
	"strings"
)

// A Template is a string with `{{ expression }}` parts: "run-{{ params.day }}".
// Text outside the braces is literal; a literal "{{" is written
// `{{ "{{" }}`. A string without "{{" is a template with no parts, which
// renders to itself at no cost.
type Template struct {
	src   string
	parts []part
	refs  Refs
}

type part struct {
	text string   // literal text, when prog is nil
	prog *Program // an expression
}

// HasTemplate reports whether s has a `{{` that would make it a template.
func HasTemplate(s string) bool { return strings.Contains(s, "{{") }

// ParseTemplate compiles the expressions of a template.
func ParseTemplate(s string) (*Template, error) {
	t := &Template{src: s}
	rest := s
	for {
		i := strings.Index(rest, "{{")
		if i < 0 {
			if rest != "" {
				t.parts = append(t.parts, part{text: rest})
			}
			return t, nil
		}
		if i > 0 {
			t.parts = append(t.parts, part{text: rest[:i]})
		}
		rest = rest[i+2:]
		j := closing(rest)
		if j < 0 {
			return nil, fmt.Errorf("%q: a {{ without its }}", abbreviate(s))
		}
		p, err := Compile(rest[:j])
		if err != nil {
			return nil, fmt.Errorf("{{%s}}: %v", abbreviate(rest[:j]), err)
		}
		t.parts = append(t.parts, part{prog: p})
		t.refs.Params = appendAll(t.refs.Params, p.refs.Params)
		t.refs.Tasks = appendAll(t.refs.Tasks, p.refs.Tasks)
		rest = rest[j+2:]
	}
}

// closing finds the "}}" that ends an expression, skipping those inside its
// string literals (`{{ "}}" }}`).
func closing(s string) int {
	var quote byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0:
			if c == '\\' {
				i++
			} else if c == quote {
				quote = 0
			}
		case c == '"' || c == '\'' || c == '`':
			quote = c
		case c == '}' && i+1 < len(s) && s[i+1] == '}':
			return i
		}
	}
	return -1
}

func appendAll(list, more []string) []string {
	for _, s := range more {
		list = appendNew(list, s)
	}
	return list
}

// Source is the template's text.
func (t *Template) Source() string { return t.src }

// Refs lists what the template's expressions name.
func (t *Template) Refs() Refs { return t.refs }

// Static reports whether the template has no expression.
func (t *Template) Static() bool {
	for _, p := range t.parts {
		if p.prog != nil {
			return false
		}
	}
	return true
}

// ErrTooLong is what a render longer than its bound fails with.
var ErrTooLong = errors.New("rendered text too long")

// Render evaluates the template over env. The result may be at most max
// bytes (0: no bound), checked as it is built, so an expression yielding a
// large value fails before it is copied whole.
func (t *Template) Render(env Env, max int) (string, error) {
	if t.Static() {
		if max > 0 && len(t.src) > max {
			return "", fmt.Errorf("%w: %d bytes, at most %d", ErrTooLong, len(t.src), max)
		}
		return t.src, nil
	}
	var b strings.Builder
	for _, p := range t.parts {
		s := p.text
		if p.prog != nil {
			v, err := p.prog.Eval(env)
			if err != nil {
				return "", fmt.Errorf("{{%s}}: %v", abbreviate(p.prog.src), err)
			}
			if s, err = String(v); err != nil {
				return "", fmt.Errorf("{{%s}} %v", abbreviate(p.prog.src), err)
			}
		}
		if max > 0 && b.Len()+len(s) > max {
			return "", fmt.Errorf("%w: more than %d bytes", ErrTooLong, max)
		}
		b.WriteString(s)
	}
	return b.String(), nil
}

// abbreviate keeps error messages short when an expression is long.
func abbreviate(s string) string {
	const n = 80
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
