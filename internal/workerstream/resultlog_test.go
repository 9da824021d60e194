package workerstream

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/orion-sched/orion/internal/model"
)

func TestResultLogKeepsOrderThroughAcksAndSweeps(t *testing.T) {
	id := func(i int) model.AttemptID { return model.AttemptID{DAG: "d", Task: fmt.Sprint(i), Attempt: 1} }
	var l resultLog
	for i := 0; i < 10; i++ {
		l.add(model.Result{AttemptID: id(i)})
	}
	// Acks of 0..6 sweep the log once they are more than half of it.
	for i := 0; i < 7; i++ {
		l.ack(id(i))
	}
	l.ack(id(42)) // not held: nothing happens
	l.add(model.Result{AttemptID: id(10)})
	l.add(model.Result{AttemptID: id(8), Error: "again"}) // supersedes the first result of 8
	var got []string
	l.each(func(r model.Result) { got = append(got, r.Task+r.Error) })
	want := []string{"7", "9", "10", "8again"}
	if !reflect.DeepEqual(got, want) || l.len() != 4 {
		t.Fatalf("held %v (len %d), want %v", got, l.len(), want)
	}
	for _, i := range []int{7, 8, 9, 10} {
		l.ack(id(i))
	}
	if l.len() != 0 || len(l.items) != 0 {
		t.Fatalf("after every ack: len %d, %d items kept", l.len(), len(l.items))
	}
}
