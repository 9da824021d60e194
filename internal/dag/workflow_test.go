package dag

import (
	"strings"
	"testing"

	"github.com/orion-sched/orion/internal/model"
)

const paramsYAML = `
id: etl
params:
  region: eu
  day:
  n: 3
  tags: [a, b]
  meta: {owner: data}
tasks:
  - id: list
    command: ls /data/{{ params.region }}/{{ params.day }}
  - id: load
    command: load --rows {{ tasks.list.outputs.rows }} --n {{ params.n * 2 }}
    env:
      REGION: "{{ upper(params.region) }}"
      PLAIN: "no template"
    depends_on: [list]
  - id: call
    kind: http
    url: "https://{{ params.region }}.example.com/x"
    method: "{{ params.n > 2 ? 'post' : 'get' }}"
    pool: "pool-{{ params.region }}"
    selector: {zone: "{{ params.region }}-1", disk: ssd}
    outputs:
      body: raw
      json: {first: ".items[0]", ok: status}
    depends_on: [load]
`

// A DAG file declares params (a default, or nothing for a required one),
// overrides set them, pool and selector render at submission, and the
// other templates stay as written in the stored spec.
func TestParamsAndTemplates(t *testing.T) {
	d, err := Parse([]byte(paramsYAML), "application/yaml")
	if err != nil {
		t.Fatal(err)
	}
	d.Normalize()
	want := map[string]string{"region": `"eu"`, "day": `null`, "n": `3`, "tags": `["a","b"]`, "meta": `{"owner":"data"}`}
	for k, v := range want {
		if string(d.Params[k]) != v {
			t.Errorf("param %s = %s, want %s", k, d.Params[k], v)
		}
	}
	err = Validate(d, Limits{})
	if err == nil || !strings.Contains(err.Error(), "param day is required") {
		t.Fatalf("a required param left unset: %v", err)
	}
	if err := Bind(d, map[string]string{"day": "2026-11-27", "region": "us"}); err != nil {
		t.Fatal(err)
	}
	if err := Validate(d, Limits{}); err != nil {
		t.Fatal(err)
	}
	if string(d.Params["day"]) != `"2026-11-27"` || string(d.Params["region"]) != `"us"` {
		t.Errorf("params after Bind: %v", d.Params)
	}
	call := d.Tasks[2]
	if call.Pool != "pool-us" || call.Selector["zone"] != "us-1" || call.Selector["disk"] != "ssd" {
		t.Errorf("pool %q selector %v: want them rendered", call.Pool, call.Selector)
	}
	if call.URL != "https://{{ params.region }}.example.com/x" || call.Method != "{{ params.n > 2 ? 'post' : 'get' }}" {
		t.Errorf("url %q method %q: want them kept as templates", call.URL, call.Method)
	}
	if call.Outputs == nil || call.Outputs.Body != "raw" || call.Outputs.JSON["first"] != ".items[0]" {
		t.Errorf("outputs %+v", call.Outputs)
	}
	// The same DAG in JSON decodes to the same spec.
	b := d.Canonical()
	again, err := Parse(b, "application/json")
	if err != nil {
		t.Fatal(err)
	}
	again.Normalize()
	if string(again.Canonical()) != string(b) {
		t.Errorf("JSON round trip differs:\n%s\n%s", again.Canonical(), b)
	}
}

// Every mistake in a template or a reference is a 400 that names the task
// and the field.
func TestTemplateErrors(t *testing.T) {
	base := func() *model.DAG {
		return &model.DAG{ID: "d", Name: "d", Params: model.Params{"region": []byte(`"eu"`)}, Tasks: []model.Task{
			{ID: "a", Kind: model.KindShell, Command: "true", MaxRetries: 0},
			{ID: "b", Kind: model.KindShell, Command: "true", DependsOn: []string{"a"}},
			{ID: "c", Kind: model.KindShell, Command: "true"},
		}}
	}
	for name, c := range map[string]struct {
		edit func(d *model.DAG)
		want string
	}{
		"syntax":       {func(d *model.DAG) { d.Tasks[1].Command = "x {{ params.( }}" }, `task "b": command: {{ params.( }}`},
		"unclosed":     {func(d *model.DAG) { d.Tasks[1].Command = "x {{ params.region" }, `task "b": command: "x {{ params.region": a {{ without its }}`},
		"unknown name": {func(d *model.DAG) { d.Tasks[1].Workdir = "{{ foo }}" }, `task "b": workdir: {{ foo }}: unknown name foo`},
		"undeclared":   {func(d *model.DAG) { d.Tasks[1].Env = map[string]string{"X": "{{ params.zone }}"} }, `task "b": env.X: params.zone is not declared (it declares region)`},
		"unknown task": {func(d *model.DAG) { d.Tasks[1].Command = "{{ tasks.nope.outputs.x }}" }, `task "b": command: tasks.nope: there is no task "nope"`},
		"not upstream": {func(d *model.DAG) { d.Tasks[1].Command = "{{ tasks.c.outputs.x }}" }, `task "b": command: tasks.c is not upstream of b`},
		"itself":       {func(d *model.DAG) { d.Tasks[1].Command = "{{ tasks.b.status }}" }, `tasks.b is not upstream of b`},
		"downstream":   {func(d *model.DAG) { d.Tasks[0].Command = "{{ tasks.b.outputs.x }}" }, `task "a": command: tasks.b is not upstream of a`},
		"bad url": {func(d *model.DAG) {
			d.Tasks[2] = model.Task{ID: "c", Kind: model.KindHTTP, URL: "ftp://x", Method: "GET", ExpectStatus: 200}
		}, "url \"ftp://x\" is invalid"},
		"outputs shell": {func(d *model.DAG) { d.Tasks[2].Outputs = &model.HTTPOutputs{Body: "x"} }, "only an http task declares outputs"},
		"output name":   {func(d *model.DAG) { d.Tasks[2] = httpTask("c", &model.HTTPOutputs{Body: "a-b"}) }, `outputs.body: "a-b" is not a valid output name`},
		"output path": {func(d *model.DAG) {
			d.Tasks[2] = httpTask("c", &model.HTTPOutputs{JSON: map[string]string{"x": ".a[z]"}})
		}, "outputs.json.x: \".a[z]\": [z] is not an index"},
		"output twice": {func(d *model.DAG) {
			d.Tasks[2] = httpTask("c", &model.HTTPOutputs{Body: "x", JSON: map[string]string{"x": "."}})
		}, "outputs.json.x: x is also outputs.body"},
		"param name":       {func(d *model.DAG) { d.Params["a-b"] = []byte(`1`) }, `param "a-b": the name is invalid`},
		"params too large": {func(d *model.DAG) { d.Params["big"] = []byte(`"` + strings.Repeat("x", model.MaxParamsBytes) + `"`) }, "params are 65"},
	} {
		d := base()
		c.edit(d)
		d.Normalize()
		err := Validate(d, Limits{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v\nwant an error saying %s", name, err, c.want)
		}
	}
	// A transitive upstream is readable.
	d := base()
	d.Tasks[2].DependsOn = []string{"b"}
	d.Tasks[2].Command = "{{ tasks.a.outputs.x }} {{ tasks.b.status }}"
	d.Normalize()
	if err := Validate(d, Limits{}); err != nil {
		t.Errorf("a transitive upstream: %v", err)
	}
	// A stored record is not compiled again on every replica.
	d.Tasks[2].Command = "{{ nope( }}"
	if err := Validate(d, Limits{Stored: true}); err != nil {
		t.Errorf("stored: %v", err)
	}
}

func httpTask(id string, o *model.HTTPOutputs) model.Task {
	return model.Task{ID: id, Kind: model.KindHTTP, URL: "http://x", Method: "GET", ExpectStatus: 200, Outputs: o}
}

func TestBindErrors(t *testing.T) {
	d := &model.DAG{ID: "d", Name: "d", Params: model.Params{"region": []byte(`"eu"`)}, Tasks: []model.Task{
		{ID: "a", Kind: model.KindShell, Command: "true", Pool: "{{ tasks.x.outputs.p }}"},
	}}
	err := Bind(d, map[string]string{"zone": "a"})
	if err == nil || !strings.Contains(err.Error(), "param zone is not declared by the DAG (it declares region)") {
		t.Errorf("undeclared override: %v", err)
	}
	err = Bind(d, nil)
	if err == nil || !strings.Contains(err.Error(), `task "a": pool: {{ tasks.x.outputs.p }}: `) ||
		!strings.Contains(err.Error(), `(pool and selector are rendered at submission: they read params, dag and run, not tasks)`) {
		t.Errorf("pool reading a task: %v", err)
	}
	if _, err := ParseParamFlags([]string{"a=1", "novalue", "a=2"}); err == nil ||
		!strings.Contains(err.Error(), `param "novalue": want name=value`) || !strings.Contains(err.Error(), "param a is given twice") {
		t.Errorf("flags: %v", err)
	}
	m, err := ParseParamFlags([]string{"q=a=b", "e="})
	if err != nil || m["q"] != "a=b" || m["e"] != "" {
		t.Errorf("flags: %v %v", m, err)
	}
}

// Params count toward the decoded-size budget.
func TestParamsBudget(t *testing.T) {
	d := &model.DAG{ID: "d", Name: "d", Params: model.Params{"p": []byte(`"` + strings.Repeat("x", 5000) + `"`)},
		Tasks: []model.Task{{ID: "a", Kind: model.KindNoop}}}
	d.Normalize()
	if err := Validate(d, Limits{MaxDecodedBytes: 1000}); err == nil || asVE(t, err).Code != CodeTooLarge {
		t.Errorf("params over the budget: %v", err)
	}
}
