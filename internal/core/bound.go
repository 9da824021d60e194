package core

import "github.com/orion-sched/orion/internal/model"

// bound cuts the text of a task record the leader proposes to its model
// bounds, whoever supplied it (a worker, an endpoint a task called, an
// earlier version's record), and keeps the last model.HistoryKept earlier
// attempts, counting the others: the record then stays within
// MaxTaskRecordBytes. It costs a few length checks on a record within
// bounds.
func bound(rec *TaskRecord) {
	rec.Error = model.CutMiddle(rec.Error, model.MaxErrorBytes)
	rec.OutputTail = model.CutTail(rec.OutputTail, model.TailBytes)
	if n := len(rec.History) - model.HistoryKept; n > 0 {
		rec.History = rec.History[n:]
		rec.HistoryOmitted += n
	}
	for i := range rec.History {
		if len(rec.History[i].Error) > model.MaxHistoryErrorBytes {
			// The slice may be the applied record's: cut a copy.
			h := append([]AttemptSummary(nil), rec.History...)
			for j := i; j < len(h); j++ {
				h[j].Error = model.CutMiddle(h[j].Error, model.MaxHistoryErrorBytes)
			}
			rec.History = h
			break
		}
	}
}
