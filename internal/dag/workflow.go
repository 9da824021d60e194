package dag

// Parameters, templates and outputs (issue 29): what a submission binds
// (Bind) and what Validate checks of them.

import (
	"encoding/json"
	"sort"
	"strings"

	"github.com/orion-sched/orion/internal/expr"
	"github.com/orion-sched/orion/internal/model"
)

// taskTemplates calls fn for each field of t that holds a `{{ ... }}`
// template, with its name as messages give it (env.NAME, selector.KEY) and
// its text, in a fixed order. The core renders them when it dispatches an
// attempt; pool and selector are rendered at submission (Bind).
func taskTemplates(t *model.Task, fn func(field, text string)) {
	for _, f := range []struct{ name, text string }{
		{"command", t.Command}, {"interpreter", t.Interpreter}, {"workdir", t.Workdir},
		{"url", t.URL}, {"method", t.Method}, {"pool", t.Pool},
	} {
		if expr.HasTemplate(f.text) {
			fn(f.name, f.text)
		}
	}
	for _, k := range sortedKeys(t.Env) {
		if v := t.Env[k]; expr.HasTemplate(v) {
			fn("env."+k, v)
		}
	}
	for _, k := range sortedKeys(t.Selector) {
		if v := t.Selector[k]; expr.HasTemplate(v) {
			fn("selector."+k, v)
		}
	}
}

// ParseParamFlags reads overrides written name=value (orion submit -p,
// ?param=): the value is the rest after the first '='.
func ParseParamFlags(flags []string) (map[string]string, error) {
	out := make(map[string]string, len(flags))
	var p problems
	for _, f := range flags {
		name, value, ok := strings.Cut(f, "=")
		name = strings.TrimSpace(name)
		switch {
		case !ok || name == "":
			p.addf("param %q: want name=value", model.CutHead(f, 80))
		default:
			if _, dup := out[name]; dup {
				p.addf("param %s is given twice", name)
			}
			out[name] = value
		}
	}
	if err := p.err(CodeInvalid); err != nil {
		return nil, err
	}
	return out, nil
}

// Bind readies a parsed, normalized DAG for submission: it sets the
// parameters overrides give (each must be declared: see
// model.ParamValue for how a value is read) and renders the templates of
// pool and selector, which decide where a task may run and so are known
// before it is queued: they may read params, dag and run, not tasks. What
// is left unset is Validate's to report. It returns a *ValidationError
// naming every problem.
func Bind(d *model.DAG, overrides map[string]string) error {
	var p problems
	names := make([]string, 0, len(overrides))
	for k := range overrides {
		names = append(names, k)
	}
	sort.Strings(names)
	if len(names) > 0 {
		params := make(model.Params, len(d.Params)) // the caller's map may be shared
		for k, v := range d.Params {
			params[k] = v
		}
		for _, name := range names {
			declared, ok := d.Params[name]
			if !ok {
				p.addf("param %s is not declared by the DAG (%s)", name, declaredList(d.Params))
				continue
			}
			params[name] = model.ParamValue(declared, overrides[name])
		}
		d.Params = params
	}
	if err := p.err(CodeInvalid); err != nil {
		return err
	}
	env := submissionEnv(d)
	tasks := make([]*model.Task, 0, len(d.Tasks)+3)
	labels := make([]taskLabel, 0, cap(tasks))
	for i := range d.Tasks {
		tasks = append(tasks, &d.Tasks[i])
		labels = append(labels, taskLabel{i: i, id: d.Tasks[i].ID, name: d.Tasks[i].Name})
	}
	for _, h := range d.Handlers() {
		tasks, labels = append(tasks, h.Task), append(labels, handlerLabel(h.ID))
	}
	for n, t := range tasks {
		label := labels[n]
		render := func(field, text string) (string, bool) {
			tpl, err := expr.ParseTemplate(text)
			if err != nil {
				p.addf("%s: %s: %v", label, field, err)
				return "", false
			}
			out, err := tpl.Render(env, model.MaxPathBytes)
			if err != nil {
				p.addf("%s: %s: %v (pool and selector are rendered at submission: they read params, dag and run, not tasks)", label, field, err)
				return "", false
			}
			return out, true
		}
		if expr.HasTemplate(t.Pool) {
			if v, ok := render("pool", t.Pool); ok {
				t.Pool = v
			}
		}
		if len(t.Selector) > 0 {
			var sel map[string]string
			for _, k := range sortedKeys(t.Selector) {
				v := t.Selector[k]
				if !expr.HasTemplate(v) {
					continue
				}
				if r, ok := render("selector."+k, v); ok {
					if sel == nil {
						sel = make(map[string]string, len(t.Selector))
						for k2, v2 := range t.Selector {
							sel[k2] = v2
						}
					}
					sel[k] = r
				}
			}
			if sel != nil {
				t.Selector = sel
			}
		}
	}
	if err := p.err(CodeInvalid); err != nil {
		return err
	}
	return nil
}

func declaredList(params model.Params) string {
	if len(params) == 0 {
		return "it declares no params"
	}
	return "it declares " + strings.Join(params.Names(), ", ")
}

// submissionEnv is what pool and selector templates read: the params, the
// DAG's id and first run, and the scheduled run's times.
func submissionEnv(d *model.DAG) expr.Env {
	return expr.Env{Params: d.Params.Values(), Index: -1, DAG: map[string]any{"id": d.ID, "run": 1}, Run: d.Scheduled.Env()}
}

// validateParams checks the parameters: names, that each has a value, and
// their size.
func validateParams(p *problems, d *model.DAG, stored bool) {
	for _, name := range d.Params.Names() {
		v := d.Params[name]
		switch {
		case !model.ValidName(name):
			p.addf("param %q: the name is invalid: want %s", model.CutHead(name, 80), model.NameRule)
		case model.IsNull(v):
			p.addf("param %s is required: set it at submission (orion submit -p %s=VALUE, or ?param=%s=VALUE)", name, name, name)
		case !json.Valid(v):
			p.addf("param %s: the value is not JSON", name)
		}
	}
	if n := d.Params.Bytes(); !stored && n > model.MaxParamsBytes {
		p.addf("params are %d bytes; the limit is %d", n, model.MaxParamsBytes)
	}
}

// validateWorkflow checks what a task reads and publishes: each template
// compiles, names only declared params and tasks upstream of its task
// (a task can read only what is committed before it starts), and an http
// task's outputs have valid names and paths. A handler runs once every task
// has ended, so it may read any of them.
func validateWorkflow(p *problems, d *model.DAG, index map[string]int) {
	var deps [][]int // built on the first reference to a task
	for i := range d.Tasks {
		t := &d.Tasks[i]
		validateTemplates(p, d, index, taskLabel{i: i, id: t.ID, name: t.Name}, t, func(j int) bool {
			if deps == nil {
				deps = depIndices(d, index)
			}
			return isUpstream(deps, i, j)
		})
	}
	for _, h := range d.Handlers() {
		validateTemplates(p, d, index, handlerLabel(h.ID), h.Task, func(int) bool { return true })
	}
	for i := range d.Notify {
		if n := &d.Notify[i]; expr.HasTemplate(n.URL) {
			p.addf("notify[%d]: url: a notification's url is not a template", i)
		}
	}
}

// validateTemplates checks t's templates and outputs; upstream says whether
// the task of index j is upstream of t.
func validateTemplates(p *problems, d *model.DAG, index map[string]int, label taskLabel, t *model.Task, upstream func(j int) bool) {
	taskTemplates(t, func(field, text string) {
		tpl, err := expr.ParseTemplate(text)
		if err != nil {
			p.addf("%s: %s: %v", label, field, err)
			return
		}
		refs := tpl.Refs()
		for _, name := range refs.Params {
			if _, ok := d.Params[name]; !ok {
				p.addf("%s: %s: params.%s is not declared (%s)", label, field, name, declaredList(d.Params))
			}
		}
		for _, id := range refs.Tasks {
			j, ok := index[id]
			switch {
			case !ok:
				p.addf("%s: %s: tasks.%s: there is no task %q", label, field, id, id)
			case field == "pool" || strings.HasPrefix(field, "selector."):
				// Bind renders them, so only a template Bind could not
				// render gets here; it said why.
			case !upstream(j):
				p.addf("%s: %s: tasks.%s is not upstream of %s: a template reads only the tasks its task depends on, directly or through others", label, field, id, t.ID)
			}
		}
	})
	validateOutputs(p, label, t)
}

// depIndices is DAG.DepIndices over an index already built.
func depIndices(d *model.DAG, index map[string]int) [][]int {
	out := make([][]int, len(d.Tasks))
	for i := range d.Tasks {
		for _, dep := range d.Tasks[i].DependsOn {
			if j, ok := index[dep]; ok {
				out[i] = append(out[i], j)
			}
		}
	}
	return out
}

// isUpstream reports whether task j is a transitive dependency of task i: a
// walk up from i that stops as soon as it meets j (most templates read a
// direct dependency, found at the first step).
func isUpstream(deps [][]int, i, j int) bool {
	seen := map[int]bool{i: true}
	queue := append([]int(nil), deps[i]...)
	for len(queue) > 0 {
		k := queue[0]
		queue = queue[1:]
		if k == j {
			return true
		}
		if seen[k] {
			continue
		}
		seen[k] = true
		queue = append(queue, deps[k]...)
	}
	return false
}

// validateOutputs checks an http task's outputs declaration.
func validateOutputs(p *problems, label taskLabel, t *model.Task) {
	o := t.Outputs
	if o == nil {
		return
	}
	if t.Kind != model.KindHTTP {
		p.addf("%s: outputs: only an http task declares outputs (a shell task writes name=value lines or a JSON object to the file $ORION_OUTPUTS names)", label)
		return
	}
	if o.Body != "" && !model.ValidName(o.Body) {
		p.addf("%s: outputs.body: %q is not a valid output name: want %s", label, model.CutHead(o.Body, 80), model.NameRule)
	}
	for _, name := range sortedKeys(o.JSON) {
		switch {
		case !model.ValidName(name):
			p.addf("%s: outputs.json: %q is not a valid output name: want %s", label, model.CutHead(name, 80), model.NameRule)
		case name == o.Body:
			p.addf("%s: outputs.json.%s: %s is also outputs.body", label, name, name)
		default:
			if _, err := model.ParseJSONPath(o.JSON[name]); err != nil {
				p.addf("%s: outputs.json.%s: %v", label, name, err)
			}
		}
	}
}
