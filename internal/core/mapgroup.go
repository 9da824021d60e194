package core

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/orion-sched/orion/internal/expr"
	"github.com/orion-sched/orion/internal/model"
)

// Map groups: run-time fan-out (`for_each:`, issue 29).
//
// A task with a for_each is a map group. When its trigger rule says run
// (it becomes ready), the leader evaluates its items from committed state
// (a literal, a parameter, an upstream task's outputs) and proposes ONE
// record: the group running, event "expand", with the items in it
// (TaskRecord.Items). Applying that record, on the leader as on every
// standby, creates the group's instances, process[0], process[1], …, each
// ready, in a slice allocated once (never appended to the DAG's tasks,
// whose elements are pointed to). Instances are tasks like any other, with
// records of their own at /orion/v1/tasks/<dag>/<group>[<i>]; their spec is
// the group's (never stored per instance) with their item and index in the
// templates' env and, for a shell task, ORION_ITEM and ORION_INDEX.
//
// The group ends when its instances have: the leader proposes its final
// record, succeeded if every instance succeeded or was skipped (or failed
// under the group's continue_on_failure), failed otherwise. Its dependants
// wait on it as on any task, and read tasks.<group>.outputs as the list
// of its instances' outputs, in index order.
//
// Items that are not an array, or more than max_items, or larger than a
// record may hold, or more than max_live_tasks leaves room for, fail the
// group for good with a message naming the bound (it would fail again); an
// empty array skips it (event "empty"), as Airflow does.
//
// A retry of the DAG keeps an expansion (its items are in the group's
// record, as Airflow's clear keeps map indexes) and re-runs the instances
// that did not succeed; a group that never expanded expands when reached.
// Restore rebuilds the instances from the group's record.
//
// Cost: the expansion's apply is O(items), once; each instance's end costs
// O(1) (the group's counters), and the group's end one pass over its
// instances to name the failed ones.

// DefaultMaxItemsBytes bounds a group's items as its record holds them when
// Config.MaxItemsBytes is not set.
const DefaultMaxItemsBytes = 1 << 20

// SkipEmpty is the event of a map group skipped because its items are an
// empty array.
const SkipEmpty = "empty"

// EnvItem and EnvIndex are a shell instance's item (as templates render
// it: a string as it is, anything else as JSON) and index.
const (
	EnvItem  = "ORION_ITEM"
	EnvIndex = "ORION_INDEX"
)

// group is an expanded map group.
type group struct {
	idx    int32             // the group's task
	raw    json.RawMessage   // the items as committed
	items  []json.RawMessage // each item, within raw
	inst   []task            // the instances, by index
	ids    []string          // their ids, "process[3]", by index
	counts [numStatuses]int32
	// reserved: leader: dispatches of instances proposed and not applied
	// (max_active).
	reserved int32
	cls      *class // leader: the class its instances queue in when max_active bounds them
}

// left counts the instances not ended.
func (g *group) left() int32 {
	return g.counts[Pending] + g.counts[Ready] + g.counts[Running] + g.counts[Retrying]
}

// failures counts the instances whose end fails the group.
func (g *group) failures(cont bool) int32 {
	n := g.counts[UpstreamFailed] + g.counts[Cancelled]
	if !cont {
		n += g.counts[Failed]
	}
	return n
}

// isGroup reports whether t is a map group (not one of its instances).
func isGroup(t *task) bool { return t.grp == nil && t.spec().ForEach.IsSet() }

// each calls fn for every task of the DAG, the instances of each expanded
// group right after it: a walk for the rare events that touch every task
// (a cancellation, a retry, a new leader, a deletion), never per event.
func (d *dagRun) each(fn func(t *task)) {
	for i := range d.tasks {
		fn(&d.tasks[i])
		if len(d.groups) > 0 {
			if g := d.groups[int32(i)]; g != nil {
				for j := range g.inst {
					fn(&g.inst[j])
				}
			}
		}
	}
}

// instance finds a task by an instance id, "process[3]".
func (d *dagRun) instance(id string) *task {
	name, i, ok := model.ParseInstanceID(id)
	if !ok {
		return nil
	}
	j, ok := d.indexOf(name)
	if !ok {
		return nil
	}
	g := d.groups[j]
	if g == nil || i >= len(g.inst) {
		return nil
	}
	return &g.inst[i]
}

// find returns the task of an id: one of the DAG's tasks or an instance.
func (d *dagRun) find(id string) *task {
	if i, ok := d.indexOf(id); ok {
		return &d.tasks[i]
	}
	return d.instance(id)
}

// splitItems reads a group record's items: a JSON array.
func splitItems(raw json.RawMessage) ([]json.RawMessage, error) {
	if len(raw) == 0 {
		return nil, fmt.Errorf("an expansion record without items")
	}
	items, err := model.SplitItems(raw)
	if err != nil {
		return nil, fmt.Errorf("items: %v", err)
	}
	return items, nil
}

// checkExpand validates a group's record before it is applied: the
// expansion's items (the same as a kept expansion's on a retry), and that
// only an expansion makes a group run. It returns the items to expand.
func (c *Core) checkExpand(e *Entry, t *task) ([]json.RawMessage, error) {
	rec := e.T
	if rec.Status != Running || t.status == Running {
		return nil, nil
	}
	if rec.Event != EventExpand || rec.Expanded != rec.Run {
		return nil, applyErr(e, "a map group runs by an expansion record of its run, not %q of run %d", rec.Event, rec.Expanded)
	}
	if g := t.dag.groups[t.idx]; g != nil {
		if !bytes.Equal(g.raw, rec.Items) {
			return nil, applyErr(e, "an expansion's items differ from the group's kept expansion")
		}
		return g.items, nil
	}
	items, err := splitItems(rec.Items)
	if err != nil {
		return nil, applyErr(e, "%v", err)
	}
	if len(items) == 0 {
		return nil, applyErr(e, "an expansion without items (an empty array skips the group)")
	}
	return items, nil
}

// EventExpand is the event of a map group's expansion record.
const EventExpand = "expand"

// expanded applies a group's expansion: it creates the instances, ready.
// A retry's expansion keeps them: those that did not succeed in an earlier
// run are reset and made ready (a retry of the DAG leaves them as they
// ended, so that a group the retry does not expand again, skipped or
// failed upstream, leaves nothing of them to run).
func (c *Core) expanded(t *task, items []json.RawMessage) {
	d := t.dag
	g := d.groups[t.idx]
	if g == nil {
		g = c.materialize(t, t.rec.Items, items)
	}
	for i := range g.inst {
		it := &g.inst[i]
		if it.status.Terminal() && it.status != Succeeded {
			c.setStatus(it, Pending) // the retry's reset, derived
		}
		if it.status == Pending {
			c.setStatus(it, Ready)
		}
	}
}

// materialize creates group t's instances, pending, and counts them.
func (c *Core) materialize(t *task, raw json.RawMessage, items []json.RawMessage) *group {
	d := t.dag
	n := len(items)
	g := &group{idx: t.idx, raw: raw, items: items, inst: make([]task, n), ids: make([]string, n)}
	id := t.id()
	for i := range g.inst {
		it := &g.inst[i]
		it.dag, it.idx, it.grp, it.ii = d, t.idx, g, int32(i)
		g.ids[i] = model.InstanceID(id, i)
	}
	g.counts[Pending] = int32(n)
	if d.groups == nil {
		d.groups = make(map[int32]*group)
	}
	d.groups[t.idx] = g
	d.instances += n
	d.remaining += n
	d.counts[Pending] += int32(n)
	c.counts[Pending] += n
	if d.rec.Status == DAGRunning {
		c.live.tasks += n // taken off with the DAG's when it finishes (liveCount.add)
	}
	return g
}

// groupOf returns the group whose class an instance queues in, when its
// max_active bounds it.
func limitedGroup(t *task) *group {
	if t.grp != nil && t.spec().MaxActive > 0 {
		return t.grp
	}
	return nil
}

// groupFull reports why t, an instance, may not start now: its group's
// max_active is reached; "" otherwise.
func groupFull(t *task) string {
	g := limitedGroup(t)
	if g == nil {
		return ""
	}
	lim := t.spec().MaxActive
	if n := int(g.counts[Running] + g.reserved); n >= lim {
		return fmt.Sprintf("map group at max_active: %d of %d running", n, lim)
	}
	return ""
}

// expandGroup is what the leader does with a group that became ready:
// it evaluates the items (or keeps the expansion of an earlier run) and
// proposes the expansion, the group's skip (no items) or its failure.
func (c *Core) expandGroup(t *task) {
	if !dispatchable(t) {
		return // its DAG's record in flight: applyDAG looks at it again
	}
	d := t.dag
	raw, n := json.RawMessage(nil), 0
	if g := d.groups[t.idx]; g != nil {
		raw, n = g.raw, len(g.items)
	} else {
		var err error
		raw, err = c.evalItems(t)
		if err != nil {
			c.proposeExpandFailed(t, "for_each: "+err.Error()+" (no retry: it reads committed state, so it would fail again)")
			return
		}
		items, err := model.SplitItems(raw)
		if err != nil {
			c.proposeExpandFailed(t, "for_each: "+err.Error())
			return
		}
		n = len(items)
		switch {
		case n == 0:
			c.proposeSkip(t, SkipEmpty)
			return
		case n > c.cfg.MaxItems:
			c.proposeExpandFailed(t, fmt.Sprintf("for_each yields %d items; the limit is %d (max_items)", n, c.cfg.MaxItems))
			return
		case len(raw) > c.cfg.MaxItemsBytes:
			c.proposeExpandFailed(t, fmt.Sprintf("for_each yields %d bytes of items; a group's record holds at most %d (etcd_max_request_bytes)",
				len(raw), c.cfg.MaxItemsBytes))
			return
		}
		if m := c.cfg.MaxLiveTasks; m > 0 {
			if live := c.live.tasks + c.pendingLive.tasks; live+n > m {
				c.proposeExpandFailed(t, fmt.Sprintf("for_each yields %d items, and with the %d tasks of the DAGs running that is more than this server holds at once (max_live_tasks %d)",
					n, live, m))
				return
			}
		}
	}
	if d.groups[t.idx] == nil {
		// Counted with the live tasks until the record applies, so that
		// expansions proposed together cannot overshoot max_live_tasks.
		t.expanding = int32(n)
		c.pendingLive.tasks += n
	}
	rec := c.nextRecord(t)
	rec.Status, rec.Event, rec.Outcome = Running, EventExpand, ""
	rec.Attempt = t.attempt() + 1
	rec.Items, rec.Expanded = raw, d.rec.Run
	rec.Worker, rec.ExitCode, rec.Error, rec.OutputTail, rec.RetryAt, rec.FinishedAt = "", nil, "", "", nil, nil
	rec.StartedAt = timePtr(c.now)
	c.proposeTask(t, rec)
}

// settleExpansion ends the pending count of t's expansion: its record (or
// another) applied, or its DAG is gone.
func (c *Core) settleExpansion(t *task) {
	if t.expanding > 0 {
		c.pendingLive.tasks -= int(t.expanding)
		t.expanding = 0
	}
}

// evalItems evaluates a group's for_each over the committed state: the
// items as a compact JSON array.
func (c *Core) evalItems(t *task) (json.RawMessage, error) {
	fe := t.spec().ForEach
	if fe.Literal() {
		return json.RawMessage(fe), nil
	}
	p, err := c.forEachProgram(t)
	if err != nil {
		return nil, err
	}
	v, err := p.Eval(c.exprEnv(t))
	if err != nil {
		return nil, err
	}
	if s, ok := v.(string); ok {
		// An output written as key=value text holding a JSON array.
		var x []any
		if json.Unmarshal([]byte(s), &x) == nil {
			v = x
		}
	}
	list, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("%s is %s, not an array", p.Source(), describeValue(v))
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(list); err != nil {
		return nil, fmt.Errorf("items cannot be written as JSON: %v", err)
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

func describeValue(v any) string {
	switch v.(type) {
	case nil:
		return "nothing"
	case string:
		return "a string"
	case float64, int, int64:
		return "a number"
	case bool:
		return "true or false"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}

// forEachProgram returns a group's compiled for_each expression, compiled
// once per DAG on the leader (never stored).
func (c *Core) forEachProgram(t *task) (*expr.Program, error) {
	return compiled(&t.dag.forEach, t.idx, func() (string, error) {
		text, _ := t.spec().ForEach.Expression()
		src, ok := forEachSource(text)
		if !ok {
			return "", fmt.Errorf("%q is not one {{ expression }}", model.CutHead(text, 80))
		}
		return src, nil
	})
}

// forEachSource is internal/dag's ForEachExpression (core does not import
// the parser): the expression of a string that is one {{ expression }}.
func forEachSource(text string) (string, bool) {
	s := bytes.TrimSpace([]byte(text))
	if len(s) < 4 || !bytes.HasPrefix(s, []byte("{{")) || !bytes.HasSuffix(s, []byte("}}")) {
		return "", false
	}
	inner := s[2 : len(s)-2]
	if bytes.Contains(inner, []byte("{{")) || bytes.Contains(inner, []byte("}}")) {
		return "", false
	}
	return string(bytes.TrimSpace(inner)), true
}

// forEachRefs lists the tasks a group's for_each names.
func (c *Core) forEachRefs(t *task) []string {
	if t.grp != nil || !t.spec().ForEach.IsSet() || t.spec().ForEach.Literal() {
		return nil
	}
	p, err := c.forEachProgram(t)
	if err != nil {
		return nil
	}
	return p.Refs().Tasks
}

// proposeExpandFailed fails a group whose items cannot be had or are too
// many: for good, as a condition that cannot be evaluated.
func (c *Core) proposeExpandFailed(t *task, msg string) {
	rec := c.nextRecord(t)
	c.keepHistory(t, rec)
	rec.Status, rec.Event, rec.Outcome = Failed, "fail", "fail"
	rec.Attempt = t.attempt() + 1
	rec.Worker, rec.StartedAt, rec.ExitCode, rec.OutputTail, rec.RetryAt = "", nil, nil, "", nil
	rec.FinishedAt = timePtr(c.now)
	rec.Error = msg
	rec.Items = nil
	c.proposeTask(t, rec)
}

// proposeGroupEnd proposes a running group's end once every instance has
// ended.
func (c *Core) proposeGroupEnd(t *task, g *group) {
	rec := c.nextRecord(t)
	rec.FinishedAt = timePtr(c.now)
	if n := g.failures(t.spec().ContinueOnFailure); n > 0 {
		first := ""
		for i := range g.inst {
			if it := &g.inst[i]; it.outcome() == endedBad {
				first = it.id()
				break
			}
		}
		rec.Status, rec.Event = Failed, "fail"
		rec.Error = fmt.Sprintf("%d of %d instances did not succeed (the first: %s)", n, len(g.inst), first)
	} else {
		rec.Status, rec.Event, rec.Error = Succeeded, "succeed", ""
	}
	rec.Outcome = rec.Event
	c.proposeTask(t, rec)
}

// instanceEnded is an instance's end, on every replica: the leader looks
// at its group, which may now end.
func (c *Core) instanceEnded(t *task) {
	if c.leader {
		c.reconcileTask(&t.dag.tasks[t.idx])
	}
}

// groupOutputs is what tasks.<group>.outputs reads: the list of the
// instances' outputs, in index order (an empty object for an instance that
// published none or did not succeed). Once the group has ended the list is
// kept while its record stays the same, as outputValues keeps a task's:
// each of 10,000 instances of a map over another group's outputs would
// otherwise decode all of that group's outputs again.
func (d *dagRun) groupOutputs(t *task) []any {
	g := d.groups[t.idx]
	if g == nil {
		return []any{}
	}
	if v, ok := d.outputs[t.idx]; ok && v.rec == t.rec && v.list != nil {
		return v.list
	}
	out := make([]any, len(g.inst))
	for i := range g.inst {
		out[i] = instanceOutputs(&g.inst[i])
	}
	if t.status.Terminal() && t.rec != nil {
		if d.outputs == nil {
			d.outputs = make(map[int32]decodedOutputs)
		}
		d.outputs[t.idx] = decodedOutputs{rec: t.rec, list: out}
	}
	return out
}

func instanceOutputs(t *task) map[string]any {
	if t.status != Succeeded || t.rec == nil || len(t.rec.Outputs) == 0 {
		return map[string]any{}
	}
	values := make(map[string]any, len(t.rec.Outputs))
	for k, raw := range t.rec.Outputs {
		var x any
		if json.Unmarshal(raw, &x) == nil {
			values[k] = x
		}
	}
	return values
}

// item decodes instance t's item.
func (t *task) item() any {
	var x any
	if t.grp != nil && json.Unmarshal(t.grp.items[t.ii], &x) == nil {
		return x
	}
	return nil
}

// instanceEnv adds an instance's item and index to the environment of its
// shell attempt.
func instanceEnv(t *task, s *model.Task) {
	if t.grp == nil || s.Kind != model.KindShell {
		return
	}
	env := make(map[string]string, len(s.Env)+2)
	for k, v := range s.Env {
		env[k] = v
	}
	item, err := expr.String(t.item())
	if err != nil {
		item = "null"
	}
	env[EnvItem] = item
	env[EnvIndex] = fmt.Sprint(t.ii)
	s.Env = env
}
