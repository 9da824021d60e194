package model

import "fmt"

// Worker identity bounds. A worker id is what the log records as an
// attempt's worker and what a term record lists, so its size is part of
// every task record's: it is bounded where a worker introduces itself.
const (
	// MaxWorkerID is the longest worker id: a name (MaxWorkerName) and
	// the "/PID-RANDOM" an orion worker or replica adds to it.
	MaxWorkerID = 255
	// MaxWorkerName is the longest name an `orion worker --name` or an
	// `orion server --name` may have, leaving room for the suffix.
	MaxWorkerName = 200
)

// WorkerIDRule says what ValidWorkerID accepts, for error messages.
const WorkerIDRule = "1-255 letters, digits, '.', '_', '/' or '-', starting with a letter or digit"

// WorkerNameRule says what ValidWorkerName accepts.
const WorkerNameRule = "1-200 letters, digits, '.', '_' or '-', starting with a letter or digit"

// ValidWorkerID reports whether s may identify a worker: the characters of
// a label (ValidLabel) over up to MaxWorkerID bytes. `orion worker` and the
// replicas name their slots NAME/PID-RANDOM, which it accepts for any valid
// name; no control character, space or quote ever reaches a log line or a
// record through it.
func ValidWorkerID(s string) bool { return validName(s, MaxWorkerID, true) }

// ValidWorkerName reports whether s may be a worker's or a replica's name,
// the prefix of its worker ids: as an id, without '/', up to
// MaxWorkerName bytes.
func ValidWorkerName(s string) bool { return validName(s, MaxWorkerName, false) }

// CheckWorkerID explains why s is not a valid worker id, or returns nil.
func CheckWorkerID(s string) error {
	if ValidWorkerID(s) {
		return nil
	}
	return fmt.Errorf("worker id %s is invalid: want %s", quoteShort(s), WorkerIDRule)
}

func validName(s string, maxLen int, slash bool) bool {
	if len(s) == 0 || len(s) > maxLen || !alnum(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		c := s[i]
		if !alnum(c) && c != '.' && c != '_' && c != '-' && !(slash && c == '/') {
			return false
		}
	}
	return true
}

func alnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// quoteShort quotes s for an error message, cut to its first 64 bytes (an
// id refused for its size can be megabytes long) with its length said.
func quoteShort(s string) string {
	if len(s) <= 64 {
		return fmt.Sprintf("%q", s)
	}
	return fmt.Sprintf("%q... (%d bytes)", s[:64], len(s))
}
