package core

import (
	"encoding/json"
	"fmt"
	"strings"
)

// What the API shows of map groups (mapgroup.go): a group as one task with
// its instances' counts, an instance with its group, index and item, and
// a group's instances a page at a time.

// MapGroup is a map group's expansion: Expanded once its items are
// committed, Count instances, Counts by status.
type MapGroup struct {
	Expanded bool
	Count    int
	Counts   StatusCounts
}

// MapInstance says which instance of which group a task is, and its item.
type MapInstance struct {
	Group string
	Index int
	Item  json.RawMessage
}

// InstanceList is a page of a group's instances.
type InstanceList struct {
	Instances []TaskView
	Offset    int
	Limit     int
	Total     int
}

// Instance pages: the default and the most one page lists.
const (
	DefaultInstancePage = 100
	MaxInstancePage     = 1000
)

// mapView completes the view of a group or an instance.
func (t *task) mapView(v *TaskView) {
	if g := t.grp; g != nil {
		v.Instance = &MapInstance{Group: t.dag.tasks[t.idx].id(), Index: int(t.ii), Item: g.items[t.ii]}
		return
	}
	if !t.spec().ForEach.IsSet() {
		return
	}
	m := &MapGroup{}
	if g := t.dag.groups[t.idx]; g != nil {
		m.Expanded, m.Count = true, len(g.inst)
		for s := Status(0); s < numStatuses; s++ {
			m.Counts[s] = int(g.counts[s])
		}
	}
	v.Map = m
}

// Instances returns a page of a map group's instances from offset, at most
// limit (MaxInstancePage; 0: DefaultInstancePage); ok is
// false when there is no such DAG or task, or the task is not a map group.
func (c *Core) Instances(dagID, taskID string, offset, limit int) (*InstanceList, bool) {
	d := c.dags[dagID]
	if d == nil {
		return nil, false
	}
	i, ok := d.indexOf(taskID)
	if !ok || !isGroup(&d.tasks[i]) {
		return nil, false
	}
	if limit <= 0 {
		limit = DefaultInstancePage
	}
	limit = min(limit, MaxInstancePage)
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
