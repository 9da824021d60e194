package seedapi

import (
	"strings"
	"testing"

	"github.com/orion-sched/orion/internal/dag"
)

// FuzzParseSubmission feeds arbitrary bodies to the seed's array format.
// Whatever the body, parsing must not panic, an error must name its code,
// and an accepted submission must hold within its limits: the task count,
// the decoded-size budget, and the same submission must map to the same DAG
// (a retried request is recognised as identical).
//
//	go test ./internal/http/seedapi -run '^$' -fuzz FuzzParseSubmission -fuzztime 10m
func FuzzParseSubmission(f *testing.F) {
	f.Add([]byte(`[{"id":"a","payload":"x"},{"id":"b","payload":"sleep","dependencies":["a"]}]`), "key-1")
	f.Add([]byte(`[{"id":"a","payload":"fail","priority":3,"max_retries":1,"status":"PENDING","start_time":null}]`), "k")
	f.Add([]byte(`[{"id":"a","payload":"`+strings.Repeat("é", 300)+`"}]`), "")
	f.Add([]byte(`[{"id":"a","dependencies":["a"]}]`), "key with spaces")
	f.Add([]byte(`[]`), "k")
	f.Add([]byte(`{"id":"a"}`), "k")
	const budget = 4 << 10
	limits := dag.Limits{MaxTasks: 50, MaxDecodedBytes: budget}
	f.Fuzz(func(t *testing.T, body []byte, key string) {
		d, tasks, ve := ParseSubmission(key, body, limits, false)
		if ve != nil {
			if ve.Code == "" || ve.Message == "" {
				t.Fatalf("error without code or message: %+v", ve)
			}
			return
		}
		if len(d.Tasks) != len(tasks) || len(d.Tasks) > 50 {
			t.Fatalf("%d tasks from %d submitted", len(d.Tasks), len(tasks))
		}
		if n := d.DecodedBytes(); n > budget {
			t.Fatalf("accepted a DAG of %d decoded bytes; the budget is %d", n, budget)
		}
		again, _, _ := ParseSubmission(key, body, limits, false)
		if string(again.Canonical()) != string(d.Canonical()) {
			t.Fatal("the same submission mapped to two DAGs")
		}
	})
}
