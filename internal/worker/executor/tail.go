package executor

import (
	"strings"
	"unicode/utf8"

	"github.com/orion-sched/orion/internal/model"
)

// tailBuffer is an io.Writer keeping the last TailBytes bytes written. It is
// not safe for concurrent use: one goroutine writes, and String is called once
// that goroutine is done.
type tailBuffer struct {
	buf   [model.TailBytes]byte
	total int64 // bytes written so far
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	n := len(p)
	if len(p) > model.TailBytes {
		t.total += int64(len(p) - model.TailBytes)
		p = p[len(p)-model.TailBytes:]
	}
	pos := int(t.total % model.TailBytes)
	k := copy(t.buf[pos:], p)
	copy(t.buf[:], p[k:])
	t.total += int64(len(p))
	return n, nil
}

// String returns the kept bytes as valid UTF-8: a rune cut by the ring at the
// start is dropped, and invalid sequences (binary output, a rune cut at the
// end) become U+FFFD, never exceeding TailBytes.
func (t *tailBuffer) String() string {
	if t.total <= model.TailBytes {
		return validTail(t.buf[:t.total], false)
	}
	pos := int(t.total % model.TailBytes)
	b := make([]byte, 0, model.TailBytes)
	b = append(b, t.buf[pos:]...)
	b = append(b, t.buf[:pos]...)
	return validTail(b, true)
}

// validTail turns the end of an output into valid UTF-8 of at most TailBytes.
// cutFront says b starts somewhere inside the output, maybe inside a rune.
func validTail(b []byte, cutFront bool) string {
	if cutFront {
		for i := 0; i < utf8.UTFMax-1 && len(b) > 0 && !utf8.RuneStart(b[0]); i++ {
			b = b[1:]
		}
	}
	if utf8.Valid(b) {
		return string(b)
	}
	s := strings.ToValidUTF8(string(b), "\uFFFD")
	if len(s) > model.TailBytes {
		s = s[len(s)-model.TailBytes:]
		for len(s) > 0 && !utf8.RuneStart(s[0]) {
			s = s[1:]
		}
	}
	return s
}

// validHead is validTail for the start of an output: at most n bytes, valid
// UTF-8, a rune cut at the end dropped.
func validHead(b []byte, n int) string {
	if n < 0 {
		n = 0
	}
	if len(b) > n {
		b = b[:n]
		// Drop a rune cut by the limit.
		for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
			if utf8.RuneStart(b[i]) {
				if !utf8.FullRune(b[i:]) {
					b = b[:i]
				}
				break
			}
		}
	}
	if utf8.Valid(b) {
		return string(b)
	}
	s := strings.ToValidUTF8(string(b), "\uFFFD")
	if len(s) > n {
		s = s[:n]
		for len(s) > 0 && !utf8.ValidString(s) {
			s = s[:len(s)-1]
		}
	}
	return s
}
