package dag

import (
	"strings"

	"github.com/orion-sched/orion/internal/expr"
	"github.com/orion-sched/orion/internal/model"
)

// ForEachExpression returns the expression of a for_each written as a
// string: the text must be one `{{ expression }}` and nothing else, since
// its value (an array) is used as it is, not rendered as text.
func ForEachExpression(text string) (string, bool) {
	s := strings.TrimSpace(text)
	if !strings.HasPrefix(s, "{{") || !strings.HasSuffix(s, "}}") || len(s) < 4 {
		return "", false
	}
	inner := s[2 : len(s)-2]
	if strings.Contains(inner, "{{") || strings.Contains(inner, "}}") {
		return "", false
	}
	return strings.TrimSpace(inner), true
}

// validateForEach checks a task's for_each and max_active as written:
// the shape (an array, or one expression), a literal's size against
// max_items, and, at submission (compile), that the expression compiles and
// names only declared params and tasks upstream of its task.
func validateForEach(p *problems, d *model.DAG, index map[string]int, label taskLabel, t *model.Task,
	maxItems int, compile bool, upstream func(j int) bool) {
	if t.MaxActive < 0 {
		p.addf("%s: max_active %d is out of range: want 0 (no limit) or more", label, t.MaxActive)
	}
	if !t.ForEach.IsSet() {
		if t.MaxActive > 0 {
			p.addf("%s: max_active bounds a map's instances: give for_each too", label)
		}
		return
	}
	if maxItems <= 0 {
		maxItems = model.DefaultMaxItems
	}
	if len(t.ForEach) > model.MaxForEachBytes {
		p.addf("%s: for_each is %d bytes; the limit is %d", label, len(t.ForEach), model.MaxForEachBytes)
		return
	}
	if t.ForEach.Literal() {
		items, err := model.SplitItems(t.ForEach)
		switch {
		case err != nil:
			p.addf("%s: for_each: %v", label, err)
		case len(items) > maxItems:
			p.addf("%s: for_each lists %d items; the limit is %d (max_items)", label, len(items), maxItems)
		}
		return
	}
	text, ok := t.ForEach.Expression()
	if !ok {
		p.addf("%s: for_each: want a JSON array, or a string holding one {{ expression }} that yields an array (a param, an upstream task's output)", label)
		return
	}
	src, ok := ForEachExpression(text)
	if !ok {
		p.addf("%s: for_each: %q is not one {{ expression }}: want a JSON array, or a string holding one {{ expression }} that yields an array",
			label, model.CutHead(text, 80))
		return
	}
	if !compile {
		return
	}
	prog, err := expr.Compile(src)
	if err != nil {
		p.addf("%s: for_each: %v", label, err)
		return
	}
	refs := prog.Refs()
	for _, name := range refs.Params {
		if _, ok := d.Params[name]; !ok {
			p.addf("%s: for_each: params.%s is not declared (%s)", label, name, declaredList(d.Params))
		}
	}
	for _, id := range refs.Tasks {
		j, ok := index[id]
		switch {
		case !ok:
			p.addf("%s: for_each: tasks.%s: there is no task %q", label, id, id)
		case !upstream(j):
			p.addf("%s: for_each: tasks.%s is not upstream of %s: for_each reads only the tasks its task depends on, directly or through others", label, id, t.ID)
		}
	}
}

// forEachOnHandler refuses a for_each (or max_active) on a handler: a
// handler is one task run at the DAG's end.
func forEachOnHandler(p *problems, label taskLabel, t *model.Task) {
	if t.ForEach.IsSet() || t.MaxActive != 0 {
		p.addf("%s: for_each and max_active are for a DAG's tasks, not its handlers", label)
	}
}

// validateForEachAll checks every task's for_each and max_active, and that
// no handler has one.
func validateForEachAll(p *problems, d *model.DAG, index map[string]int, limits Limits) {
	compile := !limits.Stored && p.cycles == 0
	var deps [][]int
	for i := range d.Tasks {
		t := &d.Tasks[i]
		if !t.ForEach.IsSet() && t.MaxActive == 0 {
			continue
		}
		validateForEach(p, d, index, taskLabel{i: i, id: t.ID, name: t.Name}, t, limits.MaxItems, compile, func(j int) bool {
			if deps == nil {
				deps = depIndices(d, index)
			}
			return isUpstream(deps, i, j)
		})
	}
	for _, h := range d.Handlers() {
		forEachOnHandler(p, handlerLabel(h.ID), h.Task)
	}
}
