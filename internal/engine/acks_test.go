package engine

import (
	"fmt"
	"testing"

	"github.com/orion-sched/orion/internal/model"
)

func ref(n int) resultRef {
	return resultRef{worker: "w", id: model.AttemptID{DAG: "d", Task: fmt.Sprint(n), Attempt: 1}}
}

func names(rs []resultRef) string {
	s := ""
	for _, r := range rs {
		s += r.id.Task
	}
	return s
}

// Under a steady load the pending queue never empties: an acknowledgement
// still goes out with the batch that takes the last entry pending when it
// was reported, not with one that takes everything.
func TestAcksGoWithTheBatchThatCompletesThem(t *testing.T) {
	var q ackQueue
	q.add(ref(1)) // its proposals: within the 10 pending now
	if got := names(q.taken(4, 6)); got != "" {
		t.Fatalf("first batch carried %q", got) // 1 waits for everything pending when it closed
	}
	// 1 closed on the 6 left; 2 is reported meanwhile (10 more proposed).
	q.add(ref(2))
	if got := names(q.taken(4, 12)); got != "" {
		t.Fatalf("second batch carried %q", got)
	}
	if got := names(q.taken(2, 10)); got != "1" {
		t.Fatalf("third batch carried %q, want 1", got)
	}
	// 2 now waits for the 10 left; 3 is reported.
	q.add(ref(3))
	if got := names(q.taken(9, 1)); got != "" {
		t.Fatalf("fourth batch carried %q", got)
	}
	if got := names(q.taken(1, 0)); got != "23" {
		t.Fatalf("the batch that takes everything carried %q, want 23", got)
	}
	if q.len() != 0 {
		t.Fatalf("%d left", q.len())
	}
}

// A failed transaction's acknowledgements, and everything waiting, wait
// for all that is pending when the next batch starts: later, never early.
func TestAcksPutBackWaitForAllPending(t *testing.T) {
	var q ackQueue
	q.add(ref(1))
	_ = q.taken(2, 8) // 1 waits for 8
	q.add(ref(2))
	q.putBack([]resultRef{ref(0)}) // a failed batch's acknowledgement
	// The failed entries went back to the front: 12 pending now.
	if got := names(q.taken(8, 4)); got != "" {
		t.Fatalf("carried %q before all that was pending", got)
	}
	if got := names(q.taken(4, 3)); got != "012" {
		t.Fatalf("carried %q, want 012", got)
	}
	q.add(ref(3))
	if got := names(q.takeAll()); got != "3" {
		t.Fatalf("takeAll %q", got)
	}
}
