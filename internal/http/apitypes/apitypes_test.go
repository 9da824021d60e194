package apitypes_test

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/orion-sched/orion/internal/core"
	"github.com/orion-sched/orion/internal/dag"
	"github.com/orion-sched/orion/internal/http/apitypes"
	"github.com/orion-sched/orion/internal/schedule"
)

// The validation codes are spelled in internal/dag and internal/schedule
// too; they must agree.
func TestValidationCodesMatchDag(t *testing.T) {
	for got, want := range map[apitypes.Code]string{
		apitypes.CodeParseError:       dag.CodeParse,
		apitypes.CodeUnsupportedMedia: dag.CodeUnsupportedMedia,
		apitypes.CodeInvalidDAG:       dag.CodeInvalid,
		apitypes.CodeCycle:            dag.CodeCycle,
		apitypes.CodeTooManyTasks:     dag.CodeTooMany,
		apitypes.CodeDAGTooLarge:      dag.CodeTooLarge,
		apitypes.CodeInvalidSchedule:  schedule.CodeInvalid,
	} {
		if string(got) != want {
			t.Errorf("apitypes says %q, dag says %q", got, want)
		}
	}
}

// The status spellings the client compares with are the ones the core's
// typed statuses marshal to.
func TestStatusSpellingsMatchCore(t *testing.T) {
	for s, want := range map[core.Status]string{
		core.Pending: apitypes.StatusPending, core.Ready: apitypes.StatusReady,
		core.Running: apitypes.StatusRunning, core.Retrying: apitypes.StatusRetrying,
		core.Succeeded: apitypes.StatusSucceeded, core.Failed: apitypes.StatusFailed,
		core.UpstreamFailed: apitypes.StatusUpstreamFailed, core.Cancelled: apitypes.StatusCancelled,
		core.Skipped: apitypes.StatusSkipped,
	} {
		if s.String() != want {
			t.Errorf("core status %d is %q, apitypes says %q", s, s.String(), want)
		}
	}
	for s, want := range map[core.DAGStatus]string{
		core.DAGRunning: apitypes.DAGRunning, core.DAGSucceeded: apitypes.DAGSucceeded,
		core.DAGFailed: apitypes.DAGFailed, core.DAGCancelled: apitypes.DAGCancelled,
	} {
		if string(s) != want {
			t.Errorf("core DAG status %q, apitypes says %q", s, want)
		}
	}
}

// What the server encodes with typed statuses, the client decodes with
// strings, and the other way round: one shape.
func TestTypedAndStringViewsShareJSON(t *testing.T) {
	server := apitypes.DAG[core.DAGStatus, core.Status]{
		DAGSummary: apitypes.DAGSummary[core.DAGStatus]{ID: "d", Status: core.DAGFailed, Counts: map[string]int{"failed": 1}},
		Tasks:      []apitypes.Task[core.Status]{{ID: "a", Status: core.UpstreamFailed, DependsOn: []string{}}},
		Revision:   7,
	}
	b, err := json.Marshal(server)
	if err != nil {
		t.Fatal(err)
	}
	var client apitypes.DAG[string, string]
	if err := json.Unmarshal(b, &client); err != nil {
		t.Fatal(err)
	}
	if client.Status != apitypes.DAGFailed || client.Tasks[0].Status != apitypes.StatusUpstreamFailed || client.Revision != 7 {
		t.Fatalf("client decoded %+v from %s", client, b)
	}
	again, err := json.Marshal(client)
	if err != nil {
		t.Fatal(err)
	}
	if string(again) != string(b) {
		t.Fatalf("shapes differ:\nserver %s\nclient %s", b, again)
	}
}

// The core builds the body of a DAG's notification in its own type; users'
// webhooks decode it as apitypes.Notification, the type the API documents.
// The two must stay the same JSON, field for field.
func TestNotificationMatchesCore(t *testing.T) {
	a, b := reflect.TypeFor[apitypes.Notification](), reflect.TypeFor[core.Notification]()
	if a.NumField() != b.NumField() {
		t.Fatalf("apitypes.Notification has %d fields, core.Notification %d", a.NumField(), b.NumField())
	}
	for i := range a.NumField() {
		fa, fb := a.Field(i), b.Field(i)
		if fa.Name != fb.Name || fa.Type != fb.Type || fa.Tag != fb.Tag {
			t.Errorf("field %d: apitypes %s %s `%s`, core %s %s `%s`", i, fa.Name, fa.Type, fa.Tag, fb.Name, fb.Type, fb.Tag)
		}
	}
	if apitypes.MaxNotifiedFailures != core.MaxNotifiedFailures {
		t.Errorf("MaxNotifiedFailures: apitypes %d, core %d", apitypes.MaxNotifiedFailures, core.MaxNotifiedFailures)
	}
	at := time.Date(2026, 11, 28, 7, 0, 0, 0, time.UTC)
	c := core.Notification{DAG: "d", Name: "n", Run: 2, Status: "failed", SubmittedAt: at, EndedAt: &at,
		Counts: map[string]int{"failed": 1}, FailedTasks: []string{"x"}, FailedCount: 1, Delivery: "d/2/0"}
	want, _ := json.Marshal(apitypes.Notification(c))
	got, _ := json.Marshal(c)
	if string(got) != string(want) {
		t.Errorf("core's JSON %s, apitypes' %s", got, want)
	}
}

// The bounds of big DAGs' reads the API documents are the core's.
func TestBigReadBoundsMatchCore(t *testing.T) {
	for name, p := range map[string][2]int{
		"MaxViewTasks":    {apitypes.MaxViewTasks, core.MaxViewTasks},
		"MaxShapeNodes":   {apitypes.MaxShapeNodes, core.MaxShapeNodes},
		"DefaultTaskPage": {apitypes.DefaultTaskPage, core.DefaultTaskPage},
		"MaxTaskPage":     {apitypes.MaxTaskPage, core.MaxTaskPage},
		"TaskPageScan":    {apitypes.TaskPageScan, core.TaskPageScan},
	} {
		if p[0] != p[1] {
			t.Errorf("%s: apitypes %d, core %d", name, p[0], p[1])
		}
	}
	for a, b := range map[string]core.ShapeNodeKind{apitypes.ShapeTask: core.ShapeTask, apitypes.ShapeMap: core.ShapeMap, apitypes.ShapeTasks: core.ShapeTasks} {
		if a != string(b) {
			t.Errorf("shape kind: apitypes %q, core %q", a, b)
		}
	}
}
