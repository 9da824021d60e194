package store

import (
	"fmt"
	"testing"
	"time"

	"github.com/orion-sched/orion/internal/core"
	"github.com/orion-sched/orion/internal/model"
)

// A decoded DAG record holds its tasks in a list of their exact length: the
// decoder grows it as it reads (1,500 tasks into room for 2,560), and a
// replica keeps it, shared by its watch and its core, as long as the DAG
// lives.
func TestDecodedDAGTasksTrimmed(t *testing.T) {
	for _, n := range []int{1, 1500, 5000} {
		spec := model.DAG{ID: "d", Name: "d"}
		for i := 0; i < n; i++ {
			spec.Tasks = append(spec.Tasks, model.Task{ID: fmt.Sprintf("t%d", i), Kind: model.KindNoop, Timeout: model.Duration(time.Minute)})
		}
		v, err := marshal(&core.DAGRecord{DAG: spec, Status: core.DAGRunning, Run: 1})
		if err != nil {
			t.Fatal(err)
		}
		e := core.Entry{DAG: "d"}
		if err := decodeValue(&e, []byte(v)); err != nil {
			t.Fatal(err)
		}
		if got := e.D.Tasks; len(got) != n || cap(got) != n {
			t.Errorf("%d tasks decoded into len %d cap %d", n, len(got), cap(got))
		}
	}
}
