package executor

import (
	"fmt"
	"hash/fnv"
	"strings"
)

// maxSegment bounds an escaped path segment well below NAME_MAX (255).
const maxSegment = 200

// pathSegment maps a DAG or task id to a single safe path segment. Ids are
// validated upstream, so the common case returns s unchanged; anything else is
// escaped injectively: bytes outside [A-Za-z0-9._-] (including '%') become
// %XX, "." and ".." are fully escaped, "" becomes "%", and an over-long
// result is cut and suffixed with "~" and a hash of the id.
func pathSegment(s string) string {
	plain := s != "" && s != "." && s != ".." && len(s) <= maxSegment
	for i := 0; plain && i < len(s); i++ {
		plain = segmentByte(s[i])
	}
	if plain {
		return s
	}
	if s == "" {
		return "%"
	}
	var b strings.Builder
	dots := s == "." || s == ".."
	for i := 0; i < len(s); i++ {
		c := s[i]
		if segmentByte(c) && !dots {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	out := b.String()
	if len(out) > maxSegment {
		h := fnv.New64a()
		h.Write([]byte(s))
		cut := maxSegment - 17
		// Don't split a %XX escape.
		if i := strings.LastIndexByte(out[:cut], '%'); i >= 0 && i > cut-3 {
			cut = i
		}
		out = fmt.Sprintf("%s~%016x", out[:cut], h.Sum64())
	}
	return out
}

func segmentByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
}
