package store

import (
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
