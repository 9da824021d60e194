package store

import (
	"bytes"
	stdjson "encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/orion-sched/orion/internal/core"
	"github.com/orion-sched/orion/internal/model"
)

// Records are encoded by segmentio/encoding/json (see marshal). What etcd
// holds must stay exactly what encoding/json wrote before the switch, so
// that etcdctl readers, hand-written values and replicas of an earlier
// version read the same bytes: every record kind, with the characters the
// two libraries could escape differently, invalid UTF-8 (an output tail cut
// mid-character), times in other zones, every kind of task field and maps
// whose keys must sort.
func TestRecordsEncodeAsEncodingJSON(t *testing.T) {
	for name, v := range sampleRecords() {
		got, err := marshal(v)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var want bytes.Buffer
		enc := stdjson.NewEncoder(&want)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(v); err != nil {
			t.Fatal(err)
		}
		if got != string(bytes.TrimSuffix(want.Bytes(), []byte("\n"))) {
			t.Errorf("%s encodes differently from encoding/json:\n got %s\nwant %s", name, got, want.Bytes())
		}
	}
}

func sampleRecords() map[string]any {
	at := time.Date(2026, 11, 25, 21, 0, 0, 123456789, time.UTC)
	east := time.Date(2026, 11, 26, 6, 30, 0, 5, time.FixedZone("X", 9*3600+1800))
	code := 3
	d := dagEntry("d<&>", 4).D
	d.MaxActiveTasks = 2
	d.Tasks[0].Env = map[string]string{"Z": "last", "A": "first \u2028 \u2029 <b>&amp;</b>", "M": "é ✓ \x01 \"q\" \\"}
	d.Tasks[1].Selector = map[string]string{"zone": "b", "arch": "amd64"}
	d.Tasks[1].Pool = "gpu"
	d.Tasks[2].DependsOn = []string{"t0", "t1"}
	d.Tasks[2].Kind, d.Tasks[2].Command, d.Tasks[2].Interpreter, d.Tasks[2].Workdir = model.KindShell, "echo '<x>' && exit 3", "python3", "/tmp"
	d.Tasks[3].Kind, d.Tasks[3].Duration, d.Tasks[3].Fail, d.Tasks[3].Priority = model.KindSleep, model.Duration(1500*time.Millisecond), 0.25, 7
	d.Tasks[0].URL, d.Tasks[0].Method, d.Tasks[0].ExpectStatus = "http://h/p?a=1&b=<2>", "POST", 204
	d.FinishedAt, d.SubmittedAt = &east, at
	task := &core.TaskRecord{Status: core.Failed, Run: 2, Attempt: 4, Retries: 3, Worker: "w-1", StartedAt: &east, FinishedAt: &at,
		ExitCode: &code, Error: "exit status 3 <stderr>", OutputTail: "line 1\nline 2\t\u00e9\xff\xfe cut \xe2\x82", Event: "fail", Outcome: "fail",
		Cascade: true, Cause: "t0", RetryAt: &at,
		History: []core.AttemptSummary{{Attempt: 3, Worker: "w-0", StartedAt: &at, Outcome: "timeout", ExitCode: &code, Error: "killed"}}}
	return map[string]any{"dag": d, "task": task, "empty task": &core.TaskRecord{}}
}

// Hand-edited values decode the same way with both libraries: the records
// above once encoded, then with the liberties a person at etcdctl takes
// (other spacing, keys in another case and order, unknown fields, nulls).
func TestRecordsDecodeAsEncodingJSON(t *testing.T) {
	values := []string{
		`{"status":"running","run":1,"attempt":2,"retries":0,"worker":"w","started_at":"2026-11-25T21:00:00+09:30","event":"dispatch"}`,
		`{ "Status" : "succeeded", "RUN":1, "attempt":1, "extra":{"a":[1,2]}, "exit_code":null, "output_tail":"\u00e9\ud800 x", "event":"succeed" }`,
		`{"status":"failed","run":1,"attempt":1,"retries":2,"history":[{"attempt":1,"outcome":"fail","exit_code":1}],"event":"fail","status":"failed"}`,
	}
	for _, v := range sampleRecords() {
		if rec, ok := v.(*core.TaskRecord); ok {
			v, _ := marshal(rec)
			values = append(values, v)
		}
	}
	for _, v := range values {
		var a, b core.TaskRecord // a: through the codec; b: encoding/json
		e := core.Entry{DAG: "d", Task: "t"}
		errA := decodeValue(&e, []byte(v))
		errB := stdjson.Unmarshal([]byte(v), &b)
		if (errA == nil) != (errB == nil) {
			t.Fatalf("%s: segmentio %v, encoding/json %v", v, errA, errB)
		}
		if errA == nil {
			a = *e.T
		}
		if !reflect.DeepEqual(a, b) {
			t.Errorf("%s decodes differently:\nsegmentio     %+v\nencoding/json %+v", v, a, b)
		}
	}
}

// A time outside years 0–9999 is refused before the record is committed,
// as encoding/json refused it: segmentio would write a year no decoder
// reads back.
func TestRecordWithImpossibleYearIsRefused(t *testing.T) {
	far := time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
	for name, v := range map[string]any{
		"task":    &core.TaskRecord{Status: core.Running, Run: 1, Attempt: 1, StartedAt: &far},
		"history": &core.TaskRecord{Status: core.Ready, Run: 1, Attempt: 1, History: []core.AttemptSummary{{Attempt: 1, FinishedAt: &far}}},
		"dag":     &core.DAGRecord{DAG: dagEntry("d", 1).D.DAG, Status: core.DAGRunning, Run: 1, SubmittedAt: far},
	} {
		if _, err := marshal(v); err == nil || !strings.Contains(err.Error(), "outside years") {
			t.Errorf("%s: marshal = %v, want refused", name, err)
		}
		if _, err := stdjson.Marshal(v); err == nil {
			t.Errorf("%s: encoding/json encodes it; the check is no longer needed", name)
		}
	}
}
