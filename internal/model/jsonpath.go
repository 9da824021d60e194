package model

import (
	"fmt"
	"strconv"
	"strings"
)

// JSONPath is a path into a JSON document, in a small jq-like syntax: keys
// after dots and indexes in brackets, the leading dot optional, "." alone
// the whole document, and a key that is not an identifier quoted in
// brackets:
//
//	.items[0].name   items[0].name   .["content-type"]   .
//
// An http task's outputs.json names one per output.
type JSONPath []pathStep

type pathStep struct {
	key   string
	index int // -1 for a key
}

// MaxJSONPathBytes bounds a path's text.
const MaxJSONPathBytes = 1024

// ParseJSONPath reads a path.
func ParseJSONPath(s string) (JSONPath, error) {
	if len(s) > MaxJSONPathBytes {
		return nil, fmt.Errorf("path of %d bytes; at most %d", len(s), MaxJSONPathBytes)
	}
	src := s
	if s == "." {
		return JSONPath{}, nil
	}
	if s == "" {
		return nil, fmt.Errorf("empty path (\".\" is the whole body)")
	}
	s = strings.TrimPrefix(s, ".")
	var p JSONPath
	first := true
	for s != "" {
		switch {
		case s[0] == '[':
			end := strings.IndexByte(s, ']')
			if len(s) > 1 && s[1] == '"' {
				// A quoted key: find the closing quote, then the bracket.
				q, err := strconv.QuotedPrefix(s[1:])
				if err != nil || len(s) < 2+len(q) || s[1+len(q)] != ']' {
					return nil, fmt.Errorf("%q: a [\"key\"] not closed", src)
				}
				key, _ := strconv.Unquote(q)
				p = append(p, pathStep{key: key, index: -1})
				s = s[2+len(q):]
				break
			}
			if end < 0 {
				return nil, fmt.Errorf("%q: a [ without its ]", src)
			}
			n, err := strconv.Atoi(s[1:end])
			if err != nil || n < 0 {
				return nil, fmt.Errorf("%q: [%s] is not an index (a number from 0) or a quoted key", src, s[1:end])
			}
			p = append(p, pathStep{index: n})
			s = s[end+1:]
		case s[0] == '.' && !first:
			s = s[1:]
			end := strings.IndexAny(s, ".[")
			if end < 0 {
				end = len(s)
			}
			if end == 0 {
				return nil, fmt.Errorf("%q: an empty key", src)
			}
			p = append(p, pathStep{key: s[:end], index: -1})
			s = s[end:]
		case first:
			end := strings.IndexAny(s, ".[")
			if end < 0 {
				end = len(s)
			}
			if end == 0 {
				return nil, fmt.Errorf("%q: an empty key", src)
			}
			p = append(p, pathStep{key: s[:end], index: -1})
			s = s[end:]
		default:
			return nil, fmt.Errorf("%q: want .key or [index] after %q", src, src[:len(src)-len(s)])
		}
		first = false
	}
	return p, nil
}

// Find returns what the path names in v, a document decoded from JSON
// (map[string]any, []any, ...), or an error that says where it stops.
func (p JSONPath) Find(v any) (any, error) {
	for i, st := range p {
		switch x := v.(type) {
		case map[string]any:
			if st.index >= 0 {
				return nil, fmt.Errorf("%s is an object, not a list", p.prefix(i))
			}
			var ok bool
			if v, ok = x[st.key]; !ok {
				return nil, fmt.Errorf("%s has no key %q", p.prefix(i), st.key)
			}
		case []any:
			if st.index < 0 {
				return nil, fmt.Errorf("%s is a list, not an object", p.prefix(i))
			}
			if st.index >= len(x) {
				return nil, fmt.Errorf("%s has %d items, no [%d]", p.prefix(i), len(x), st.index)
			}
			v = x[st.index]
		default:
			return nil, fmt.Errorf("%s is not an object or a list", p.prefix(i))
		}
	}
	return v, nil
}

// prefix writes the first n steps, for errors.
func (p JSONPath) prefix(n int) string {
	if n == 0 {
		return "the body"
	}
	var b strings.Builder
	for _, st := range p[:n] {
		if st.index >= 0 {
			fmt.Fprintf(&b, "[%d]", st.index)
		} else if ValidName(st.key) {
			b.WriteString("." + st.key)
		} else {
			fmt.Fprintf(&b, "[%q]", st.key)
		}
	}
	return b.String()
}
