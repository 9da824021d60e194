package core

import (
	"encoding/json"

	"github.com/orion-sched/orion/internal/expr"
	"github.com/orion-sched/orion/internal/model"
)

// exprEnv builds what t's expressions read, from committed state only, so
// that whoever evaluates them (the leader now, a new leader later) gets the
// same value: the DAG's parameters, and the status and committed outputs of
// the tasks t's templates and `when:` name (upstream of t: submission checks it), the
// DAG's id and run, and a scheduled run's tick and interval. Only the named
// tasks are looked up, so its cost does not grow with the DAG. Index is -1:
// t is not a mapped instance.
func (c *Core) exprEnv(t *task) expr.Env {
	d := t.dag
	env := expr.Env{Params: d.paramValues(), Index: -1,
		DAG: map[string]any{"id": d.id, "run": d.rec.Run}, Run: d.rec.Scheduled.Env()}
	if t.grp != nil {
		env.Item, env.Index = t.item(), int(t.ii)
	}
	tt := d.templates(t)
	var cond []string // the tasks t's `when:` and for_each name, once compiled
	if p := d.conds[t.idx]; p != nil {
		cond = p.Refs().Tasks
	}
	if t.grp == nil && t.spec().ForEach.IsSet() {
		if p := d.forEach[t.idx]; p != nil {
			cond = append(cond[:len(cond):len(cond)], p.Refs().Tasks...)
		}
	}
	if len(tt.tasks)+len(cond) > 0 {
		env.Tasks = make(map[string]any, len(tt.tasks)+len(cond))
		add := func(up *task) {
			var outputs any
			if isGroup(up) {
				outputs = d.groupOutputs(up)
			} else {
				outputs = d.outputValues(up)
			}
			env.Tasks[up.id()] = map[string]any{"status": up.status.String(), "outputs": outputs}
		}
		for _, j := range tt.tasks {
			add(&d.tasks[j])
		}
		for _, id := range cond {
			if j, ok := d.indexOf(id); ok {
				add(&d.tasks[j])
			}
		}
	}
	return env
}

// paramValues are the DAG's parameters decoded, once per DAG on the leader:
// they are part of the submitted spec, which never changes under an id.
func (d *dagRun) paramValues() map[string]any {
	if d.params == nil {
		d.params = d.rec.Params.Values()
	}
	return d.params
}

// outputValues are t's committed outputs decoded (an empty map before it
// succeeded), kept while its record stays the same: a task read by many
// dependants is decoded once.
func (d *dagRun) outputValues(t *task) map[string]any {
	if t.status != Succeeded || t.rec == nil || len(t.rec.Outputs) == 0 {
		return map[string]any{}
	}
	if v, ok := d.outputs[t.idx]; ok && v.rec == t.rec {
		return v.values
	}
	values := make(map[string]any, len(t.rec.Outputs))
	for k, raw := range t.rec.Outputs {
		var x any
		if json.Unmarshal(raw, &x) == nil {
			values[k] = x
		}
	}
	if d.outputs == nil {
		d.outputs = make(map[int32]decodedOutputs)
	}
	d.outputs[t.idx] = decodedOutputs{rec: t.rec, values: values}
	return values
}

// decodedOutputs are a task's outputs decoded from one of its records (a
// map group's: the list of its instances' outputs).
type decodedOutputs struct {
	rec    *TaskRecord
	values map[string]any
	list   []any
}

// taskTemplates are a task's compiled templates, the leader's cache: built
// the first time the task is dispatched, never stored (a stored spec keeps
// its templates as text).
type taskTemplates struct {
	fields []fieldTemplate
	tasks  []int32 // the tasks the templates name, by index
	err    string  // a template that does not compile (only a record written by hand has one)
	// rendered is the spec rendered for attempt renderedFor of run
	// renderedRun, from its dispatch proposal to its effect: keyed by both,
	// since attempt numbers go on across a DAG's retry while what a render
	// reads (its upstream's outputs) may differ, and a proposal that was
	// never applied (abandoned, poisoned, a term ended) must not lend its
	// render to a later one.
	rendered    *model.Task
	renderedFor int
	renderedRun int
	// renderedTask is the task it was rendered for: a map group's
	// instances share their group's templates (mapgroup.go).
	renderedTask *task
}

// fieldTemplate is one templated field: "command", "env.NAME", ...
type fieldTemplate struct {
	field string
	tpl   *expr.Template
}

// noTemplates is the cache entry of a task without any template.
var noTemplates = &taskTemplates{}

// templates returns t's compiled templates.
func (d *dagRun) templates(t *task) *taskTemplates {
	if d.tpls == nil {
		d.tpls = make([]*taskTemplates, len(d.tasks))
	}
	if tt := d.tpls[t.idx]; tt != nil {
		return tt
	}
	tt := compileTemplates(d, t.spec())
	d.tpls[t.idx] = tt
	return tt
}

func compileTemplates(d *dagRun, s *model.Task) *taskTemplates {
	var tt *taskTemplates
	add := func(field, text string) {
		if !expr.HasTemplate(text) {
			return
		}
		if tt == nil {
			tt = &taskTemplates{}
		}
		if tt.err != "" {
			return
		}
		tpl, err := expr.ParseTemplate(text)
		if err != nil {
			tt.err = field + ": " + err.Error()
			return
		}
		tt.fields = append(tt.fields, fieldTemplate{field: field, tpl: tpl})
		for _, id := range tpl.Refs().Tasks {
			if j, ok := d.indexOf(id); ok && !containsIdx(tt.tasks, j) {
				tt.tasks = append(tt.tasks, j)
			}
		}
	}
	templated(s, add)
	if tt == nil {
		return noTemplates
	}
	return tt
}

// templated calls fn with each field of s that a template may fill in.
func templated(s *model.Task, fn func(field, text string)) {
	fn("command", s.Command)
	fn("interpreter", s.Interpreter)
	fn("workdir", s.Workdir)
	fn("url", s.URL)
	fn("method", s.Method)
	for _, k := range sortedNames(s.Env) {
		fn("env."+k, s.Env[k])
	}
}

// readsNothing reports whether no task of the DAG file reads another's
// state: no `when:`, no for_each, no template. Such a DAG's tasks never
// wait for what they read (readsUnended), which a takeover, queueing
// every ready task, then need not ask task by task.
func readsNothing(tasks []model.Task) bool {
	none := true
	for i := range tasks {
		s := &tasks[i]
		if s.When != "" || s.ForEach.IsSet() {
			return false
		}
		templated(s, func(_, text string) {
			if expr.HasTemplate(text) {
				none = false
			}
		})
		if !none {
			return false
		}
	}
	return true
}

func containsIdx(list []int32, j int32) bool {
	for _, x := range list {
		if x == j {
			return true
		}
	}
	return false
}
