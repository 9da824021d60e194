package store

import (
	"bytes"
	stdjson "encoding/json"
	"testing"
	"time"

	"github.com/orion-sched/orion/internal/core"
)

// Records are encoded by segmentio/encoding/json (see marshal). What etcd
// holds must stay exactly what encoding/json wrote before the switch, so
// that etcdctl readers, hand-written values and replicas of an earlier
// version read the same bytes: every record kind, with the characters the
// two libraries could escape differently and maps whose keys must sort.
func TestRecordsEncodeAsEncodingJSON(t *testing.T) {
	at := time.Date(2026, 11, 25, 21, 0, 0, 123456789, time.UTC)
	code := 3
	d := dagEntry("d<&>", 3).D
	d.Tasks[0].Env = map[string]string{"Z": "last", "A": "first \u2028 \u2029 <b>&amp;</b>", "M": "é ✓ \x01 \"q\" \\"}
	d.Tasks[1].Selector = map[string]string{"zone": "b", "arch": "amd64"}
	d.Tasks[2].DependsOn = []string{"t0", "t1"}
	d.Tasks[2].Command = "echo '<x>' && exit 3"
	d.FinishedAt = &at
	task := &core.TaskRecord{Status: core.Failed, Run: 2, Attempt: 4, Retries: 3, Worker: "w-1", StartedAt: &at, FinishedAt: &at,
		ExitCode: &code, Error: "exit status 3 <stderr>", OutputTail: "line 1\nline 2\t\u00e9\ufffd", Event: "fail", Outcome: "fail",
		History: []core.AttemptSummary{{Attempt: 3, Worker: "w-0", StartedAt: &at, Outcome: "timeout"}}}
	for name, v := range map[string]any{"dag": d, "task": task, "empty task": &core.TaskRecord{}} {
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
		if !bytes.Equal(got, bytes.TrimSuffix(want.Bytes(), []byte("\n"))) {
			t.Errorf("%s encodes differently from encoding/json:\n got %s\nwant %s", name, got, want.Bytes())
		}
	}
}
