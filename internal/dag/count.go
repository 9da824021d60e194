package dag

import (
	"bytes"
	"fmt"
)

// CheckTaskCount refuses, before it is decoded, a JSON DAG with more than
// maxTasks tasks (0: DefaultMaxTasks), as Validate would after decoding it.
// A decoded task takes about a kilobyte, and the smallest task spelled in
// JSON about twenty bytes: a body within max_body_bytes could otherwise
// cost fifty times its size before its count is checked. It reads the
// body once without allocating and counts the elements of the top-level
// "tasks" array; keys that a decoder could read as "tasks" (another case,
// an escape) are counted too, so the count is never below the decoder's.
// Other formats (YAML) are left to Validate.
func CheckTaskCount(body []byte, contentType string, maxTasks int) error {
	f, err := FormatOf(contentType)
	if err != nil {
		return nil // Parse says so
	}
	trimmed := bytes.TrimLeft(bytes.TrimPrefix(body, []byte("\xef\xbb\xbf")), " \t\r\n")
	if f == FormatYAML || len(trimmed) == 0 || (f == FormatSniff && trimmed[0] != '{') {
		return nil
	}
	if maxTasks <= 0 {
		maxTasks = DefaultMaxTasks
	}
	if n := countJSONTasks(trimmed); n > maxTasks {
		msg := fmt.Sprintf("dag has %d tasks; the limit is %d (max_tasks_per_dag)", n, maxTasks)
		return &ValidationError{Code: CodeTooMany, Message: msg, Details: []string{msg}}
	}
	return nil
}

// CountJSONArray counts the elements of a JSON text that is an array (the
// seed API's list of tasks), without decoding it: 0 for anything else.
func CountJSONArray(b []byte) int { return countElements(b, 1) }

// countJSONTasks counts the elements of the arrays held by top-level keys
// that may be "tasks" (see CheckTaskCount). Invalid JSON is the decoder's
// to refuse: the count is then only a bound.
func countJSONTasks(b []byte) int { return countElements(b, 2) }

// countElements counts the elements of the arrays at depth at: the
// document itself (1), or the values of top-level keys that may be
// "tasks" (2).
func countElements(b []byte, at int) int {
	var (
		depth, n          int
		inString, escaped bool
		keyStart          = -1
		key               []byte // the last string closed at depth 1
		counting, empty   bool
	)
	for i, c := range b {
		if inString {
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
				if depth == 1 {
					key = b[keyStart:i]
				}
			}
			continue
		}
		switch c {
		case '"':
			inString, keyStart = true, i+1
			if counting && depth == at && empty {
				n, empty = n+1, false
			}
		case '[', '{':
			if counting && depth == at && empty {
				n, empty = n+1, false
			}
			depth++
			if depth == at && c == '[' && (at == 1 || bytes.EqualFold(key, []byte("tasks")) || bytes.IndexByte(key, '\\') >= 0) {
				counting, empty = true, true
			}
		case ']', '}':
			depth--
			if depth < at {
				counting = false
			}
		case ',':
			if counting && depth == at {
				empty = true // the next value starts an element
			}
		case ' ', '\t', '\r', '\n', ':':
		default:
			if counting && depth == at && empty {
				n, empty = n+1, false
			}
		}
	}
	return n
}
