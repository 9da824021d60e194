package core

import (
	"fmt"
	"sort"
	"strings"

	"github.com/orion-sched/orion/internal/model"
)

// Templates are rendered when an attempt is dispatched, here in the core,
// from committed state (exprEnv): the attempt's Spec is the rendered spec,
// the stored spec keeps its templates. A render is pure, so one that fails
// would fail again on any leader, for any attempt: the task fails for good
// with a message naming the field, and no retry is spent on it.
//
// Where it happens:
//   - a ready task is rendered before its dispatch is proposed; a render
//     that fails is proposed as the task's failure instead of a dispatch
//     (ready → failed, its attempt number used up);
//   - a dependent dispatched right behind its dependency's success
//     (Schedule: its dispatch is proposed before the success is applied)
//     is rendered when its dispatch record is applied, the success just
//     before it; a render that fails there fails the attempt, which was
//     never sent (running → failed).

// maxMethodBytes bounds a rendered http method.
const maxMethodBytes = 16

// attemptSpec returns the spec t's attempt runs: t's own when it has no
// template (no copy), else a copy with every template rendered.
func (c *Core) attemptSpec(t *task) (*model.Task, error) {
	tt := t.dag.templates(t)
	if tt == noTemplates {
		return t.spec(), nil
	}
	if tt.rendered != nil && tt.renderedTask == t && tt.renderedFor == t.attempt() && tt.renderedRun == t.dag.rec.Run {
		s := tt.rendered
		tt.rendered, tt.renderedTask = nil, nil
		return s, nil
	}
	return c.render(t, tt)
}

// render renders t's templates over its committed environment, each field
// within the bound submission puts on it as written.
func (c *Core) render(t *task, tt *taskTemplates) (*model.Task, error) {
	if tt.err != "" {
		return nil, fmt.Errorf("cannot render %s (no retry: it would fail again)", tt.err)
	}
	env := c.exprEnv(t)
	s := *t.spec()
	var envCopy map[string]string
	envLeft := model.MaxEnvBytes - s.EnvBytes()
	for _, f := range tt.fields {
		max := model.MaxPathBytes
		switch {
		case f.field == "command":
			max = model.MaxCommandBytes
		case f.field == "url":
			max = model.MaxURLBytes
		case f.field == "method":
			max = maxMethodBytes
		case strings.HasPrefix(f.field, "env."):
			max = envLeft + len(f.tpl.Source())
		}
		out, err := f.tpl.Render(env, max)
		if err != nil {
			return nil, renderError(f.field, err)
		}
		switch f.field {
		case "command":
			s.Command = out
		case "interpreter":
			if strings.ContainsAny(out, " \t\r\n") {
				return nil, renderError(f.field, fmt.Errorf("renders %q: want a program name or path, without arguments", model.CutHead(out, 80)))
			}
			s.Interpreter = out
		case "workdir":
			s.Workdir = out
		case "url":
			if !model.ValidHTTPURL(out) {
				return nil, renderError(f.field, fmt.Errorf("renders %q: want an absolute http:// or https:// URL", model.CutHead(out, 200)))
			}
			s.URL = out
		case "method":
			out = strings.ToUpper(strings.TrimSpace(out))
			if !model.ValidHTTPMethod(out) {
				return nil, renderError(f.field, fmt.Errorf("renders %q: want GET, HEAD, POST, PUT, PATCH, DELETE or OPTIONS", out))
			}
			s.Method = out
		default: // env.NAME
			if envCopy == nil {
				envCopy = make(map[string]string, len(s.Env))
				for k, v := range s.Env {
					envCopy[k] = v
				}
				s.Env = envCopy
			}
			k := strings.TrimPrefix(f.field, "env.")
			envLeft -= len(out) - len(envCopy[k])
			envCopy[k] = out
		}
		if strings.IndexByte(out, 0) >= 0 {
			return nil, renderError(f.field, fmt.Errorf("renders with a NUL byte, which exec cannot pass"))
		}
	}
	return &s, nil
}

// renderError says which field failed to render and why, and that it is
// final.
func renderError(field string, err error) error {
	return fmt.Errorf("cannot render %s: %v (no retry: a render reads committed state, so it would fail again)", field, err)
}

// proposeRenderFailure proposes, in place of the dispatch of t's next
// attempt, the failure of that attempt: its template cannot be rendered.
// The attempt's number is used up, as a dispatch would use it.
func (c *Core) proposeRenderFailure(t *task, err error) {
	rec := c.nextRecord(t)
	c.keepHistory(t, rec)
	rec.Status, rec.Event, rec.Outcome = Failed, "fail", "fail"
	rec.Attempt = t.attempt() + 1
	rec.Worker = ""
	rec.StartedAt, rec.RetryAt, rec.ExitCode, rec.OutputTail = nil, nil, nil, ""
	rec.FinishedAt = timePtr(c.now)
	rec.Error = err.Error()
	c.proposeTask(t, rec)
}

// failUnsent proposes the failure of t's current attempt, whose dispatch
// record is applied and which was never sent: its template cannot be
// rendered.
func (c *Core) failUnsent(t *task, err error) {
	rec := c.nextRecord(t)
	rec.Status, rec.Event, rec.Outcome = Failed, "fail", "fail"
	rec.FinishedAt = timePtr(c.now)
	rec.Error = err.Error()
	c.proposeTask(t, rec)
}

// keepHistory moves t's latest attempt into the history of rec, the
// record that starts its next one.
func (c *Core) keepHistory(t *task, rec *TaskRecord) {
	if t.rec == nil || t.rec.Attempt == 0 {
		return
	}
	// A fresh slice (the applied record keeps its own), of the attempts
	// that proposeTask's bound keeps.
	h := t.rec.History[max(0, len(t.rec.History)+1-model.HistoryKept):]
	rec.History = append(append(make([]AttemptSummary, 0, len(h)+1), h...), summarize(t.rec))
	rec.HistoryOmitted += len(t.rec.History) - len(h)
}

func sortedNames(m map[string]string) []string {
	if len(m) == 0 {
		return nil
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// checkOutputs checks a result's outputs where they enter the leader: a
// success keeps them in the form its record holds (model.CheckOutputs), or
// fails with a message saying why they are refused; any other outcome
// publishes nothing.
func checkOutputs(r *model.Result, max int) {
	if r.Outcome != model.Succeeded {
		r.Outputs = nil
		return
	}
	if len(r.Outputs) == 0 {
		return
	}
	o, err := model.CheckOutputs(r.Outputs, max)
	if err != nil {
		r.Outcome, r.Error, r.Outputs = model.Failed, err.Error(), nil
		return
	}
	r.Outputs = o
}
