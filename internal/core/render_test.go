package core

import (
	"strings"
	"testing"
	"time"

	"github.com/orion-sched/orion/internal/model"
)

// dispatched returns the attempt the leader sends for d's task id, after
// committing everything proposed.
func (h *harness) dispatched(id string) model.Attempt {
	h.t.Helper()
	h.c.Schedule(h.now)
	h.flush("")
	h.commit(0)
	h.out.Reset()
	for _, a := range h.sent {
		if a.Task == id {
			return a
		}
	}
	h.t.Fatalf("no dispatch of %s\n%s", id, h.c.Dump())
	return model.Attempt{}
}

// Every templated field of a task renders, in the attempt only: env values,
// the url and method of an http task; a scheduled run's tick and interval
// are there as run.*; the stored spec keeps its templates.
func TestRenderFields(t *testing.T) {
	h := leaderRig(t, "w1")
	tick := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	d := model.DAG{ID: "d", Name: "d", Params: model.Params{"host": []byte(`"api.example.com"`), "verb": []byte(`"post"`)},
		Scheduled: &model.ScheduledRun{Schedule: "nightly", Tick: tick, IntervalStart: tick.Add(-24 * time.Hour), IntervalEnd: tick},
		Tasks: []model.Task{{ID: "call", Kind: model.KindHTTP, URL: "https://{{ params.host }}/load?day={{ run.tick }}",
			Method: "{{ params.verb }}", ExpectStatus: 200, Timeout: model.Duration(time.Minute),
			Env: map[string]string{"FROM": "{{ run.interval_start }}", "PLAIN": "x"}}}}
	h.submitSpec(d)
	h.commit(0)
	a := h.dispatched("call")
	if a.Spec.URL != "https://api.example.com/load?day=2026-11-27T00:00:00Z" || a.Spec.Method != "POST" {
		t.Errorf("url %q method %q", a.Spec.URL, a.Spec.Method)
	}
	if a.Spec.Env["FROM"] != "2026-11-26T00:00:00Z" || a.Spec.Env["PLAIN"] != "x" {
		t.Errorf("env %v", a.Spec.Env)
	}
	if a.MaxOutputBytes != model.DefaultMaxOutputBytes {
		t.Errorf("max output bytes %d", a.MaxOutputBytes)
	}
	stored := h.taskOf("d", "call").spec()
	if stored.URL != d.Tasks[0].URL || stored.Env["FROM"] != "{{ run.interval_start }}" {
		t.Errorf("the stored spec changed: %+v", stored)
	}
}

// A rendered field is checked as submission checks it when written: a url
// must be an absolute http(s) URL, a method one of the known ones, and a
// render may not grow a field past its bound.
func TestRenderChecks(t *testing.T) {
	for name, c := range map[string]struct {
		task model.Task
		want string
	}{
		"url":     {model.Task{Kind: model.KindHTTP, URL: "{{ params.s }}", Method: "GET"}, `cannot render url: renders "x y": want an absolute http:// or https:// URL`},
		"method":  {model.Task{Kind: model.KindHTTP, URL: "http://x", Method: "{{ params.s }}"}, `cannot render method: renders "X Y": want GET`},
		"nul":     {model.Task{Kind: model.KindShell, Command: "{{ params.nul }}"}, "cannot render command: renders with a NUL byte"},
		"too big": {model.Task{Kind: model.KindShell, Workdir: "{{ params.big }}{{ params.big }}", Command: "true"}, "cannot render workdir: rendered text too long: more than 4096 bytes"},
		"interp":  {model.Task{Kind: model.KindShell, Interpreter: "{{ params.s }}", Command: "true"}, `cannot render interpreter: renders "x y": want a program name`},
		"compile": {model.Task{Kind: model.KindShell, Command: "{{ nope( }}"}, "cannot render command: {{ nope( }}"},
	} {
		h := leaderRig(t, "w1")
		c.task.ID, c.task.Timeout, c.task.ExpectStatus = "a", model.Duration(time.Minute), 200
		h.submitSpec(model.DAG{ID: "d", Name: "d", Tasks: []model.Task{c.task}, Params: model.Params{
			"s": []byte(`"x y"`), "nul": []byte(`"a\u0000b"`), "big": []byte(`"` + strings.Repeat("x", 3000) + `"`)}})
		h.commit(0)
		h.c.Schedule(h.now)
		h.commit(0)
		tk := h.taskOf("d", "a")
		if tk.status != Failed || !strings.Contains(tk.rec.Error, c.want) || tk.rec.Attempt != 1 {
			t.Errorf("%s: %s attempt %d error %q\nwant failed with %q", name, tk.status, tk.rec.Attempt, tk.rec.Error, c.want)
		}
	}
}

// Outputs are bounded by the configured max, which attempts carry to
// their workers.
func TestMaxOutputBytesConfigured(t *testing.T) {
	h := newHarness(t, Config{MaxOutputBytes: 1000})
	h.c.AddWorker("w1", 1, nil)
	h.c.BecomeLeader(h.now)
	h.submitSpec(model.DAG{ID: "d", Name: "d", Tasks: []model.Task{{ID: "a", Kind: model.KindShell, Command: "true", Timeout: model.Duration(time.Minute)}}})
	h.commit(0)
	if a := h.dispatched("a"); a.MaxOutputBytes != 1000 {
		t.Errorf("attempt carries %d", a.MaxOutputBytes)
	}
	r := result("d", "a", 1, "w1", model.Succeeded)
	r.Outputs = model.Outputs{"x": []byte(`"` + strings.Repeat("y", 1000) + `"`)}
	h.c.Report(r, h.now)
	h.commit(0)
	if tk := h.taskOf("d", "a"); tk.status != Failed || !strings.Contains(tk.rec.Error, "exceed max_output_bytes (1000)") {
		t.Errorf("%s %q", tk.status, tk.rec.Error)
	}
}
