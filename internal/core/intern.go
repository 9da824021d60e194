package core

import (
	"unsafe"

	"github.com/orion-sched/orion/internal/model"
)

// Interning what records repeat. A record decoded from etcd (a standby's,
// or any replica's after a restore) holds a string of its own for each of
// its words: its event, its outcome, its worker's id; a decoded spec one
// for each task's kind. The core keeps a record per task of every live
// DAG, so it points those strings at one shared copy as it applies them:
// the same value, a few tens of bytes less per task.

// maxInterned bounds the worker ids interned: beyond it (ids are not
// bounded in number over time) a record keeps its own copy.
const maxInterned = 4096

// word returns the shared copy of a record's event or outcome.
func word(s string) string {
	switch s {
	case "dispatch":
		return "dispatch"
	case "succeed":
		return "succeed"
	case "fail":
		return "fail"
	case "timeout":
		return "timeout"
	case "retry":
		return "retry"
	case "requeue":
		return "requeue"
	case "orphan":
		return "orphan"
	case "cascade":
		return "cascade"
	case "cancel":
		return "cancel"
	case "expand":
		return "expand"
	case "handover":
		return "handover"
	case "reset":
		return "reset"
	case SkipEmpty:
		return SkipEmpty
	case SkipCondition:
		return SkipCondition
	case SkipTriggerRule:
		return SkipTriggerRule
	case SkipNotNeeded:
		return SkipNotNeeded
	}
	return s
}

// kind returns the shared copy of a task's kind.
func kind(k model.Kind) model.Kind {
	switch k {
	case model.KindShell:
		return model.KindShell
	case model.KindNoop:
		return model.KindNoop
	case model.KindSleep:
		return model.KindSleep
	case model.KindHTTP:
		return model.KindHTTP
	case model.KindPod:
		return model.KindPod
	}
	return k
}

// same reports whether a and b are one string in memory (not only equal).
func same(a, b string) bool {
	return len(a) == len(b) && (len(a) == 0 || unsafe.StringData(a) == unsafe.StringData(b))
}

// intern points rec's repeated strings at their shared copies. It writes
// only a field whose copy differs, so the leader's own records, built from
// the shared copies, are left untouched.
func (c *Core) intern(rec *TaskRecord) {
	if s := word(rec.Event); !same(s, rec.Event) {
		rec.Event = s
	}
	if s := word(rec.Outcome); !same(s, rec.Outcome) {
		rec.Outcome = s
	}
	if rec.Worker == "" {
		return
	}
	s, ok := c.workerIDs[rec.Worker]
	if !ok {
		if len(c.workerIDs) >= maxInterned {
			return
		}
		if c.workerIDs == nil {
			c.workerIDs = make(map[string]string)
		}
		s = rec.Worker
		c.workerIDs[s] = s
	}
	if !same(s, rec.Worker) {
		rec.Worker = s
	}
}

// internSpec points a decoded spec's kinds at their shared copies.
func internSpec(tasks []model.Task) {
	for i := range tasks {
		if k := kind(tasks[i].Kind); !same(string(k), string(tasks[i].Kind)) {
			tasks[i].Kind = k
		}
	}
}
