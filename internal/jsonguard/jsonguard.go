// Package jsonguard tells whether a JSON text is safe to give to a decoder
// that recurses without a limit.
package jsonguard

// MaxDepth is how deeply a JSON text may nest before it is left to
// encoding/json. segmentio/encoding/json, which decodes submissions and
// records faster, recurses once per level with no limit of its own, so a
// body of a few MiB of '[' would overflow the goroutine's stack and crash
// the process; encoding/json refuses more than 10,000 levels with an error.
// A DAG, its records and its tasks nest 4 levels deep.
const MaxDepth = 32

// Shallow reports whether the JSON text b nests arrays and objects at
// most max levels deep. It reads b once, without validating it (the
// decoder does): brackets inside strings are skipped.
func Shallow(b []byte, max int) bool {
	depth, inString, escaped := 0, false, false
	for _, c := range b {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '[' || c == '{':
			if depth++; depth > max {
				return false
			}
		case c == ']' || c == '}':
			depth--
		}
	}
	return true
}
