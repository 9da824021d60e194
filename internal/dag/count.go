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

// MaxYAMLBytes bounds a DAG or schedule document sent as YAML, whatever
// max_body_bytes allows JSON. Decoding YAML builds a node per scalar before
// anything can be counted, about 200 bytes of memory per byte of a body of
// small nodes (measured: 4 MiB of `- id: a` lines or of `[a,a,...]` peaked
// at 850-900 MB), against a few bytes per byte for JSON, whose tasks are
// counted before it is decoded. At 1 MiB (the body limit of earlier
// versions) a YAML request costs at most what a JSON one of max_body_bytes
// does; a larger DAG is sent as JSON, which `orion submit -f` does by itself.
const MaxYAMLBytes = 1 << 20

// CheckYAMLSize refuses a YAML document (by its content type, or sniffed:
// not starting with '{') larger than MaxYAMLBytes, before it is decoded.
func CheckYAMLSize(body []byte, contentType string) error {
	if len(body) <= MaxYAMLBytes {
		return nil
	}
	f, err := FormatOf(contentType)
	if err != nil {
		return nil // Parse says so
	}
	trimmed := bytes.TrimLeft(bytes.TrimPrefix(body, []byte("\xef\xbb\xbf")), " \t\r\n")
	if f == FormatJSON || (f == FormatSniff && len(trimmed) > 0 && trimmed[0] == '{') {
		return nil
	}
	msg := fmt.Sprintf("a YAML document is limited to %d bytes (this one has %d): YAML costs about 200 bytes of memory per byte to decode. "+
		"Send a larger DAG as JSON, up to max_body_bytes (orion submit -f converts a large YAML file to JSON itself)", MaxYAMLBytes, len(body))
	return &ValidationError{Code: CodeTooLarge, Message: msg, Details: []string{msg}}
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
