package seedapi

import (
	"testing"
	"time"

	"github.com/orion-sched/orion/internal/core"
	"github.com/orion-sched/orion/internal/http/events"
	"github.com/orion-sched/orion/internal/model"
)

func taskEv(task, status string) *events.Event {
	return &events.Event{Type: events.TypeTask, Rev: 1, DAG: "d", Task: task, Status: status, Time: time.Unix(5, 0)}
}

func TestTranslatorWorkerNumbers(t *testing.T) {
	tr := NewTranslator()
	get := func(ev *events.Event) TaskEvent {
		t.Helper()
		out, ok := tr.Translate(ev)
		if !ok {
			t.Fatalf("%+v not translated", ev)
		}
		return out
	}
	a := get(taskEv("a", "running"))
	b := get(taskEv("b", "running"))
	if a.Type != EventTaskStarted || a.WorkerID != 1 || b.WorkerID != 2 || a.Timestamp != time.Unix(5, 0) {
		t.Fatalf("%+v %+v", a, b)
	}
	if done := get(taskEv("a", "succeeded")); done.Type != EventTaskCompleted || done.WorkerID != 1 {
		t.Fatalf("%+v", done)
	}
	if c := get(taskEv("c", "running")); c.WorkerID != 1 { // the lowest free number again
		t.Fatalf("reused number %d", c.WorkerID)
	}
	if _, ok := tr.Translate(taskEv("b", "ready")); ok { // orphaned: no seed event, number freed
		t.Fatal("ready translated")
	}
	if d := get(taskEv("d", "running")); d.WorkerID != 2 {
		t.Fatalf("number %d", d.WorkerID)
	}
}

func TestTranslatorMapping(t *testing.T) {
	tr := NewTranslator()
	rec := &core.DAGRecord{DAG: model.DAG{ID: "d", Tasks: []model.Task{{ID: "x", MaxRetries: 2}, {ID: "y", MaxRetries: 3}}}, Status: core.DAGRunning, Run: 1}
	ev := events.FromEntry(&core.Entry{Rev: 3, DAG: "d", D: rec})
	out, ok := tr.Translate(&ev)
	if !ok || out.Type != EventDAGSubmitted || len(out.DAGTasks) != 2 || out.DAGID != "d" {
		t.Fatalf("%+v", out)
	}
	retry := taskEv("x", "retrying")
	retry.Retries, retry.Error = 1, "exit status 1"
	out, _ = tr.Translate(retry)
	if out.Type != EventTaskRetry || out.Retry != 1 || out.MaxRetry != 2 || out.Metadata["error"] != "exit status 1" {
		t.Fatalf("%+v", out)
	}
	out, _ = tr.Translate(taskEv("x", "failed"))
	if out.Type != EventTaskFailed || out.MaxRetry != 2 {
		t.Fatalf("%+v", out)
	}
	casc := taskEv("y", "upstream_failed")
	casc.Cause = "x"
	out, _ = tr.Translate(casc)
	if out.Type != EventTaskCascade || out.TaskID != "x" || len(out.DAGTasks) != 1 || out.DAGTasks[0] != "y" {
		t.Fatalf("%+v", out)
	}
	out, _ = tr.Translate(taskEv("z", "cancelled"))
	if out.Type != EventTaskFailed || out.Metadata["reason"] != "cancelled" {
		t.Fatalf("%+v", out)
	}
	fin := events.FromEntry(&core.Entry{Rev: 9, DAG: "d", D: &core.DAGRecord{DAG: rec.DAG, Status: core.DAGFailed, Run: 1}})
	if _, ok := tr.Translate(&fin); ok {
		t.Fatal("a finished DAG has no seed event")
	}

	m := &events.Event{Type: events.TypeMetrics, Metrics: &events.Metrics{
		Tasks:  map[string]int{"pending": 1, "ready": 2, "retrying": 1, "running": 3, "succeeded": 4, "failed": 1, "upstream_failed": 2, "cancelled": 1},
		Totals: events.Totals{Retried: 7}, QueueSize: 2, DroppedEvents: 5,
	}}
	out, _ = tr.Translate(m)
	want := map[string]string{"pending": "4", "running": "3", "completed": "4", "failed": "4", "retried": "7", "queue_size": "2", "dropped_events": "5"}
	for k, v := range want {
		if out.Metadata[k] != v {
			t.Errorf("metrics.update %s = %q, want %q", k, out.Metadata[k], v)
		}
	}

	leader := func(name string) *events.Event {
		return &events.Event{Type: events.TypeLeader, Leader: &name}
	}
	if _, ok := tr.Translate(leader("n1")); ok {
		t.Fatal("the first leader seen is not a change")
	}
	if _, ok := tr.Translate(leader("")); ok {
		t.Fatal("no leader: nothing to redraw yet")
	}
	out, ok = tr.Translate(leader("n2"))
	if !ok || out.Type != EventSystemRecover || out.Metadata["leader"] != "n2" || out.Metadata["previous_leader"] != "n1" {
		t.Fatalf("%+v", out)
	}
	out, ok = tr.Translate(&events.Event{Type: events.TypeResync})
	if !ok || out.Type != EventSystemRecover || out.Metadata["reason"] != "resync" {
		t.Fatalf("%+v", out)
	}
	if _, ok := tr.Translate(&events.Event{Type: events.TypeGap}); ok {
		t.Fatal("a gap is replayed, not reported")
	}
	out, _ = tr.Translate(&events.Event{Type: events.TypeSystem, Event: "crash"})
	if out.Type != EventSystemCrash {
		t.Fatalf("%+v", out)
	}
}
