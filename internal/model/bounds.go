package model

import (
	"strconv"
	"unicode/utf8"
)

// Bounds of the text a task record holds. Each is enforced where the text
// enters (the executor that produced it, the worker stream that carried it,
// the leader that writes the record), so a record has a size it cannot
// exceed whoever supplies its content: the user's spec (a long URL copied
// into an error), a worker, or an endpoint a task calls. core.MaxTaskRecordBytes
// is the resulting bound on a whole record.
const (
	// MaxErrorBytes bounds a result's error text. Errors quote what the
	// task was given or met (a URL, a status line), so a longer one is cut
	// in the middle: its start says what failed, its end why.
	MaxErrorBytes = 1024
	// MaxHistoryErrorBytes bounds the error of each earlier attempt kept in
	// a record's history.
	MaxHistoryErrorBytes = 512
	// HistoryKept is how many earlier attempts a record lists in full; the
	// ones before them are only counted (TaskRecord.HistoryOmitted), so a
	// task retried a hundred times rewrites a record of constant size
	// instead of one that grows with every attempt.
	HistoryKept = 5
	// MaxWorkerIDBytes bounds a worker id: it is written into every record
	// of the attempts the worker runs. The scheduler gives no work to a
	// worker with a longer one.
	MaxWorkerIDBytes = 256
)

// Bounded returns r with its error and output tail cut to MaxErrorBytes
// and TailBytes, each marked where it was cut. A worker's result passes
// through it where it enters the leader; the executors cut their own
// results the same way. Within bounds, r is returned as is.
func (r Result) Bounded() Result {
	r.Error = CutMiddle(r.Error, MaxErrorBytes)
	r.OutputTail = CutTail(r.OutputTail, TailBytes)
	return r
}

// cutMarker is the mark left where text was cut; n is how many bytes went.
func cutMarker(n int) string { return "[orion: " + strconv.Itoa(n) + " bytes cut]" }

// minCut is the smallest limit at which a cut is marked; below it the text
// is only cut (a marker would not fit beside any text).
const minCut = 64

// CutHead returns s if it has at most n bytes, else its start followed by a
// marker saying how many bytes were cut, n bytes in all, never splitting a
// UTF-8 sequence.
func CutHead(s string, n int) string {
	if len(s) <= n {
		return s
	}
	if n < minCut {
		return s[:runeStartBefore(s, max(n, 0))]
	}
	// The marker's digits depend on the amount cut, which depends on the
	// marker: size it for the most that can go (all of s).
	keep := runeStartBefore(s, n-len(cutMarker(len(s)))-1)
	return s[:keep] + " " + cutMarker(len(s)-keep)
}

// CutTail returns s if it has at most n bytes, else a marker followed by
// the end of s, n bytes in all, never splitting a UTF-8 sequence. It keeps
// the end of an output, where a failure usually shows.
func CutTail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	if n < minCut {
		return s[runeStartAfter(s, len(s)-max(n, 0)):]
	}
	from := runeStartAfter(s, len(s)-(n-len(cutMarker(len(s)))-1))
	return cutMarker(from) + " " + s[from:]
}

// CutMiddle returns s if it has at most n bytes, else its start and its
// end around a marker, n bytes in all, never splitting a UTF-8 sequence.
func CutMiddle(s string, n int) string {
	if len(s) <= n {
		return s
	}
	if n < minCut {
		return CutHead(s, n)
	}
	room := n - len(cutMarker(len(s))) - 2
	head := runeStartBefore(s, room/2)
	tail := runeStartAfter(s, len(s)-(room-head))
	return s[:head] + " " + cutMarker(tail-head) + " " + s[tail:]
}

// runeStartBefore is the largest i <= n at which a UTF-8 sequence of s
// starts (or len(s)): s[:i] splits none.
func runeStartBefore(s string, n int) int {
	if n >= len(s) {
		return len(s)
	}
	i := n
	for i > 0 && n-i < utf8.UTFMax && !utf8.RuneStart(s[i]) {
		i--
	}
	if !utf8.RuneStart(s[i]) {
		return n // not UTF-8 here anyway: any cut is as good
	}
	return i
}

// runeStartAfter is the smallest i >= n at which a UTF-8 sequence of s
// starts (or len(s)): s[i:] splits none.
func runeStartAfter(s string, n int) int {
	if n <= 0 {
		return 0
	}
	i := n
	for i < len(s) && i-n < utf8.UTFMax && !utf8.RuneStart(s[i]) {
		i++
	}
	if i < len(s) && !utf8.RuneStart(s[i]) {
		return n
	}
	return i
}
