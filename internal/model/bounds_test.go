package model

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// Every cut fits its limit, is valid UTF-8 when its input is, says how
// much went, and keeps the part it promises (the start, the end, or both).
func TestCutsFitTheirLimitOnARuneBoundary(t *testing.T) {
	inputs := map[string]string{
		"ascii":     strings.Repeat("x", 5000),
		"two-byte":  strings.Repeat("é", 3000),
		"four-byte": strings.Repeat("😀", 2000),
		"mixed":     strings.Repeat("a😀é", 1111) + "end",
	}
	for name, s := range inputs {
		for _, n := range []int{0, 1, 3, 63, 64, 65, 100, 1024, 4096} {
			for cut, fn := range map[string]func(string, int) string{"head": CutHead, "tail": CutTail, "middle": CutMiddle} {
				got := fn(s, n)
				if len(got) > n {
					t.Errorf("%s %s(%d): %d bytes", name, cut, n, len(got))
				}
				if !utf8.ValidString(got) {
					t.Errorf("%s %s(%d): invalid UTF-8 %q", name, cut, n, got)
				}
				if n >= minCut && !strings.Contains(got, " bytes cut]") {
					t.Errorf("%s %s(%d): not marked: %q", name, cut, n, got)
				}
				if n >= minCut && len(got) < n-utf8.UTFMax*2 {
					t.Errorf("%s %s(%d): kept only %d bytes", name, cut, n, len(got))
				}
			}
		}
	}
	s := "start-" + strings.Repeat("x", 3000) + "-end"
	if got := CutHead(s, 100); !strings.HasPrefix(got, "start-") {
		t.Errorf("CutHead lost the start: %q", got)
	}
	if got := CutTail(s, 100); !strings.HasSuffix(got, "-end") || !strings.HasPrefix(got, "[orion: 2934 bytes cut] ") {
		t.Errorf("CutTail: %q", got)
	}
	if got := CutMiddle(s, 100); !strings.HasPrefix(got, "start-") || !strings.HasSuffix(got, "-end") {
		t.Errorf("CutMiddle lost an end: %q", got)
	}
	if got := CutMiddle("short", 100); got != "short" {
		t.Errorf("a text within its limit changed: %q", got)
	}
}

// A result whose fields came from anywhere leaves Bounded within the
// record's bounds; one within them is untouched.
func TestResultBounded(t *testing.T) {
	big := Result{Error: strings.Repeat("e", 2<<20), OutputTail: strings.Repeat("o", 2<<20)}.Bounded()
	if len(big.Error) > MaxErrorBytes || len(big.OutputTail) > TailBytes {
		t.Fatalf("bounded result: error %d bytes, tail %d", len(big.Error), len(big.OutputTail))
	}
	small := Result{Error: "exit status 1", OutputTail: "hello\n"}
	if b := small.Bounded(); b.Error != small.Error || b.OutputTail != small.OutputTail {
		t.Fatal("a result within bounds changed")
	}
}
