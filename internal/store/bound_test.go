package store

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/orion-sched/orion/internal/core"
	"github.com/orion-sched/orion/internal/model"
)

// minMaxRequest is the smallest etcd_max_request_bytes the configuration
// accepts (internal/config).
const minMaxRequest = 64 << 10

// A task record at every bound at once, each text made of the characters
// JSON writes longest (a control byte is six: \u0001), encodes within
// core.MaxTaskRecordBytes, and that fits the record limit of the smallest
// request limit Orion accepts: no task record can make a transaction too
// large for etcd, whatever a worker, an endpoint or a spec put in it.
func TestWorstTaskRecordFitsTheSmallestRequestLimit(t *testing.T) {
	if lim := (Limits{MaxRequest: minMaxRequest}).RecordLimit(); core.MaxTaskRecordBytes > lim {
		t.Fatalf("MaxTaskRecordBytes %d is over the record limit %d of a %d-byte request limit", core.MaxTaskRecordBytes, lim, minMaxRequest)
	}
	for _, worst := range []string{"\x01", "\xff", "\u2028", "\"", "\\"} {
		rec := worstRecord(worst)
		_, n, err := Ops(&core.Entry{DAG: "d", Task: "t", T: rec})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("worst record of %q: %d bytes (bound %d)", worst, n, core.MaxTaskRecordBytes)
		if n > core.MaxTaskRecordBytes {
			t.Errorf("a task record of %q at every bound encodes to %d bytes, over MaxTaskRecordBytes %d", worst, n, core.MaxTaskRecordBytes)
		}
	}
}

// worstRecord is a task record with every text field at its bound, made
// of worst.
func worstRecord(worst string) *core.TaskRecord {
	text := func(n int) string { return strings.Repeat(worst, n/len(worst)+1)[:n] }
	at := time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.FixedZone("", -(23*3600+59*60)))
	exit := math.MinInt64
	rec := &core.TaskRecord{Status: core.UpstreamFailed, Run: math.MaxInt64, Attempt: math.MaxInt64, Retries: math.MaxInt64,
		Worker: text(model.MaxWorkerIDBytes), StartedAt: &at, FinishedAt: &at, RetryAt: &at, ExitCode: &exit,
		Error: text(model.MaxErrorBytes), OutputTail: text(model.TailBytes), Event: "cascade", Outcome: "timeout",
		Cascade: true, Cause: strings.Repeat("c", 128), HistoryOmitted: math.MaxInt64}
	for i := 0; i < model.HistoryKept; i++ {
		rec.History = append(rec.History, core.AttemptSummary{Attempt: math.MaxInt64, Worker: text(model.MaxWorkerIDBytes),
			StartedAt: &at, FinishedAt: &at, Outcome: "timeout", ExitCode: &exit, Error: text(model.MaxHistoryErrorBytes)})
	}
	return rec
}

// A success record at every bound, outputs included (at the default and
// at the largest max_output_bytes, made of the characters JSON writes
// longest), encodes within core.TaskRecordBound, and that fits etcd's
// default request limit.
func TestWorstTaskRecordWithOutputsFitsItsBound(t *testing.T) {
	for _, bound := range []int{1 << 10, model.DefaultMaxOutputBytes, model.MaxMaxOutputBytes} {
		if lim := DefaultLimits.RecordLimit(); core.TaskRecordBound(bound) > lim {
			t.Errorf("TaskRecordBound(%d) = %d is over the default record limit %d", bound, core.TaskRecordBound(bound), lim)
		}
		for _, worst := range []string{`\u0001`, `\"`, "\u2028"} {
			// Outputs are counted as they encode: fill the bound with
			// values of up to 4,000 such characters.
			o := model.Outputs{}
			for i := 0; ; i++ {
				name := fmt.Sprintf("o%d", i)
				room := (bound - model.OutputsBytes(o) - len(name) - 8) / len(worst)
				if model.OutputsBytes(o) == 0 {
					room -= 1
				}
				if room <= 0 {
					break
				}
				o[name] = json.RawMessage(`"` + strings.Repeat(worst, min(room, 4000)) + `"`)
			}
			o, err := model.CheckOutputs(o, bound)
			if err != nil {
				t.Fatal(err)
			}
			rec := worstRecord("\x01")
			rec.Status, rec.Cascade, rec.Outputs = core.Succeeded, false, o
			_, n, err := Ops(&core.Entry{DAG: "d", Task: "t", T: rec})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("max_output_bytes %d, outputs of %q (%d bytes): a record of %d bytes, bound %d", bound, worst, model.OutputsBytes(o), n, core.TaskRecordBound(bound))
			if n > core.TaskRecordBound(bound) {
				t.Errorf("max_output_bytes %d, outputs of %q: a record of %d bytes, over TaskRecordBound %d", bound, worst, n, core.TaskRecordBound(bound))
			}
		}
	}
}
