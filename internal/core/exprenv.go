package core

import "github.com/orion-sched/orion/internal/expr"

// exprEnv builds what t's expressions read, from committed state only, so
// that leader and standby, or a leader and its successor, read the same.
//
// This one serves conditions on the statuses of upstream tasks: it gives
// the DAG's id and run and, for each task t's condition names, its status;
// parameters and outputs are empty (issue 29's first part fills them).
func (c *Core) exprEnv(t *task) expr.Env {
	d := t.dag
	env := expr.Env{
		Params: map[string]any{},
		Tasks:  map[string]any{},
		Index:  -1,
		DAG:    map[string]any{"id": d.id, "run": float64(d.rec.Run)},
		Run:    map[string]any{},
	}
	if p := d.conds[t.idx]; p != nil {
		for _, id := range p.Refs().Tasks {
			if j, ok := d.index[id]; ok {
				env.Tasks[id] = map[string]any{"status": d.tasks[j].status.String(), "outputs": map[string]any{}}
			}
		}
	}
	return env
}
