package engine

import (
	"fmt"
	"slices"

	"go.uber.org/zap"

	"github.com/orion-sched/orion/internal/core"
	"github.com/orion-sched/orion/internal/dag"
)

// A poison entry is one that etcd refuses alone for what it holds (a
// record larger than its request limit): a failure that would repeat
// identically. Before, the leader re-read etcd after it (the outcome of a
// failed commit is unknown in general), dropped every worker stream, and
// proposed the same record again from the same results: tens of re-reads
// a second, every write answered "not leader", for good. Now it is known
// to have applied nothing, and the core writes something smaller in its
// place, or gives the task (or DAG) up for the term (core.Poisoned). The
// leader stays; the other entries go on.
//
// Records are bounded by construction (core.MaxTaskRecordBytes), so this
// happens only when the members' --max-request-bytes is below what the
// leader was told (etcd_max_request_bytes), or their request limit is
// smaller than any record.
func (e *Engine) onPoison(en core.Entry, cause error) {
	repl, drop, out := e.c.Poisoned(en, cause.Error(), e.clock.Now())
	e.m.PoisonEntries.WithLabelValues(out.String()).Inc()
	fields := []zap.Field{zap.String("dag", en.DAG), zap.String("outcome", out.String()), zap.Error(cause)}
	if en.Task != "" {
		fields = append(fields, zap.String("task", en.Task))
	}
	switch {
	case repl != nil:
		e.log.Warn("etcd refused a record as too large; writing a smaller one in its place", fields...)
		// First in line, where the refused one was, and alone: entries
		// behind it may depend on it, and a refusal of it must not fail
		// others.
		e.pending = append(append(make([]core.Entry, 0, len(e.pending)+1), *repl), e.pending...)
		e.solo++
	case en.Task != "":
		e.log.Error("etcd refused a task's record in every form; leaving the task as it is until the next leader", fields...)
		// Its result, if a worker reported one, was never recorded: not
		// acknowledged, the worker sends it to the next leader.
		e.acks.drop(func(r resultRef) bool { return r.id.DAG == en.DAG && r.id.Task == en.Task })
		e.pending = slices.DeleteFunc(e.pending, func(p core.Entry) bool {
			return p.T != nil && slices.ContainsFunc(drop, func(d core.Entry) bool { return d.DAG == p.DAG && d.Task == p.Task })
		})
	default:
		e.log.Error("etcd refused a DAG record as too large; leaving the DAG as it is until the next leader", fields...)
		msg := fmt.Sprintf("etcd refused DAG %s's record as too large (%v): it is larger than the members' --max-request-bytes; "+
			"set etcd_max_request_bytes to the members' value, or raise theirs", en.DAG, cause)
		e.failWaitersOf(en.DAG, &dag.ValidationError{Code: dag.CodeTooLarge, Message: msg, Details: []string{msg}})
	}
	e.acks.rearranged()
}
