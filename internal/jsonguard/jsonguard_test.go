package jsonguard

import (
	"strings"
	"testing"
)

func TestShallow(t *testing.T) {
	for _, c := range []struct {
		in   string
		max  int
		want bool
	}{
		{`{"a":[1,{"b":2}]}`, 3, true},
		{`{"a":[1,{"b":2}]}`, 2, false},
		{`"[[[[[["`, 1, true},       // brackets in a string
		{`{"a":"\"[[[["}`, 1, true}, // after an escaped quote, still in the string
		{`{"a":"\\"}[[[`, 2, false}, // an escaped backslash ends the escape: the string closed
		{`[]]]]][[`, 2, true},       // invalid JSON nesting is the decoder's to refuse
		{strings.Repeat("[", MaxDepth), MaxDepth, true},
		{strings.Repeat("[", MaxDepth+1), MaxDepth, false},
		{``, 0, true},
	} {
		if got := Shallow([]byte(c.in), c.max); got != c.want {
			t.Errorf("Shallow(%q, %d) = %v, want %v", c.in, c.max, got, c.want)
		}
	}
}
