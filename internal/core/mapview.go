package core

import (
	"fmt"
	"strings"

	"github.com/orion-sched/orion/internal/http/apitypes"
)

// What the API shows of map groups (mapgroup.go): a group as one task with
// its instances' counts, an instance with its group, index and item, and
// a group's instances a page at a time.

// InstanceList is a page of a group's instances.
type InstanceList = apitypes.InstanceList[Status]

// mapView completes the view of a group or an instance.
func (t *task) mapView(v *TaskView) {
	if g := t.grp; g != nil {
		v.Instance = &apitypes.MapInstance{Group: t.dag.tasks[t.idx].id(), Index: int(t.ii), Item: g.items[t.ii]}
		return
	}
	if !t.spec().ForEach.IsSet() {
		return
	}
	m := &apitypes.MapGroup{Counts: map[string]int{}}
	if g := t.dag.groups[t.idx]; g != nil {
		m.Expanded, m.Count = true, len(g.inst)
		for s := Status(0); s < numStatuses; s++ {
			if n := g.counts[s]; n > 0 {
				m.Counts[s.String()] = int(n)
			}
		}
	}
	v.Map = m
}

// Instances returns a page of a map group's instances from offset, at most
// limit (apitypes.MaxInstancePage; 0: apitypes.DefaultInstancePage); ok is
// false when there is no such DAG or task, or the task is not a map group.
func (c *Core) Instances(dagID, taskID string, offset, limit int) (*InstanceList, bool) {
	d := c.dags[dagID]
	if d == nil {
		return nil, false
	}
	i, ok := d.index[taskID]
	if !ok || !isGroup(&d.tasks[i]) {
		return nil, false
	}
	if limit <= 0 {
		limit = apitypes.DefaultInstancePage
	}
	limit = min(limit, apitypes.MaxInstancePage)
	offset = max(offset, 0)
	out := &InstanceList{Instances: []TaskView{}, Offset: offset, Limit: limit}
	if g := d.groups[i]; g != nil {
		out.Total = len(g.inst)
		for j := offset; j < len(g.inst) && j < offset+limit; j++ {
			it := &g.inst[j]
			v := it.view()
			v.Waiting = c.waitReason(it)
			out.Instances = append(out.Instances, v)
		}
	}
	return out, true
}

// dumpGroups prints the instances of d's expanded groups (Dump).
func dumpGroups(b *strings.Builder, d *dagRun) {
	for i := range d.tasks {
		g := d.groups[int32(i)]
		if g == nil {
			continue
		}
		fmt.Fprintf(b, "  group %s items=%d left=%d\n", d.tasks[i].id(), len(g.inst), g.left())
		for j := range g.inst {
			t := &g.inst[j]
			fmt.Fprintf(b, "    %s %s attempt=%d retries=%d", t.id(), t.status, t.attempt(), t.retries())
			if t.rec != nil {
				fmt.Fprintf(b, " event=%s worker=%s", t.rec.Event, t.rec.Worker)
			}
			b.WriteByte('\n')
		}
	}
}
