package core

import (
	"sort"
	"testing"
)

// Both ways a replica rebuilds state from etcd, shared by the randomized
// and the scenario tests: their results must equal the leader's state.

// replayLog applies every committed entry, after a trip through the codec,
// to a fresh core, as a standby following the log does.
func replayLog(t *testing.T, cfg Config, log []Entry) *Core {
	t.Helper()
	fresh := New(cfg)
	for i := range log {
		e := roundTrip(t, log[i])
		e.Rev = log[i].Rev
		if err := fresh.Apply(&e); err != nil {
			t.Fatalf("replay: %v", err)
		}
	}
	return fresh
}

// restoreLog builds a fresh core from the latest value of every key at rev,
// in etcd's key order, as a cold start reads etcd: a DAG record keeps the
// revision that created its key, and deleting a DAG deletes its tasks.
func restoreLog(t *testing.T, cfg Config, rev int64, log []Entry) *Core {
	t.Helper()
	created := map[string]int64{}
	dags := map[string]Entry{}
	tasks := map[string]Entry{}
	for _, e := range log {
		switch {
		case e.Task != "":
			tasks[e.DAG+"/"+e.Task] = e
		case e.Delete:
			delete(dags, e.DAG)
			delete(created, e.DAG)
			for k, te := range tasks {
				if te.DAG == e.DAG {
					delete(tasks, k)
				}
			}
		default:
			if _, ok := created[e.DAG]; !ok {
				created[e.DAG] = e.Rev
			}
			dags[e.DAG] = e
		}
	}
	var ds, ts []Entry
	for _, id := range sortedKeys(dags) {
		e := roundTrip(t, dags[id])
		e.Rev = created[id]
		ds = append(ds, e)
	}
	for _, k := range sortedKeys(tasks) {
		ts = append(ts, roundTrip(t, tasks[k]))
	}
	fresh := New(cfg)
	if errs := fresh.Restore(rev, ds, ts); len(errs) > 0 {
		t.Fatalf("restore: %v", errs)
	}
	return fresh
}

func sortedKeys(m map[string]Entry) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// TestRestoreEqualsReplayAtEveryRevision rebuilds the state at each
// revision of randomized runs with trigger rules, conditions, handlers,
// notifications and map groups (restored mid-expansion, mid-retry), both ways: applying the log up to it, and restoring the
// latest value of every key at it. They must agree at every revision, not
// only at the end: a cold start can happen at any point, and derived
// statuses (ready by a rule's verdict, a handler's readiness) must not
// depend on the order the entries were applied in.
func TestRestoreEqualsReplayAtEveryRevision(t *testing.T) {
	runs := 60
	if testing.Short() {
		runs = 10
	}
	for seed := uint64(1); seed <= uint64(runs); seed++ {
		s := newSim(t, seed+10_000)
		for i := 0; i < 3; i++ {
			if _, err := s.c.Submit(s.randomDAG(), s.now); err != nil {
				t.Fatal(err)
			}
		}
		for i := 0; i < 200; i++ {
			s.step()
		}
		s.drain()
		replayed := New(s.c.cfg)
		for k := 0; k < len(s.log); {
			rev := s.log[k].Rev
			for ; k < len(s.log) && s.log[k].Rev == rev; k++ {
				e := roundTrip(t, s.log[k])
				e.Rev = rev
				if err := replayed.Apply(&e); err != nil {
					t.Fatalf("seed %d: replay at rev %d: %v", seed, rev, err)
				}
			}
			if got, want := restoreLog(t, s.c.cfg, rev, s.log[:k]).Dump(), replayed.Dump(); got != want {
				t.Fatalf("seed %d: at rev %d restore differs from replay\nreplay:\n%s\nrestore:\n%s", seed, rev, want, got)
			}
		}
	}
}
