package dag

import (
	"strings"
	"testing"

	"github.com/orion-sched/orion/internal/model"
)

// for_each reads as a YAML sequence (the items) or a string holding one
// expression, in YAML and JSON alike, and max_active beside it.
func TestForEachParses(t *testing.T) {
	d, err := Parse([]byte(`
name: etl
params: {parts: [a, b]}
tasks:
  - id: list
    command: ls
  - id: literal
    command: echo {{ item }}
    for_each: [1, "two", {three: 3}]
    max_active: 2
  - id: param
    command: echo {{ item }}
    for_each: "{{ params.parts }}"
  - id: upstream
    command: echo {{ item }} {{ index }}
    for_each: "{{ tasks.list.outputs.parts }}"
    depends_on: [list]
`), "application/yaml")
	if err != nil {
		t.Fatal(err)
	}
	d.Normalize()
	if err := Validate(d, Limits{}); err != nil {
		t.Fatal(err)
	}
	if got := string(d.Tasks[1].ForEach); got != `[1,"two",{"three":3}]` || d.Tasks[1].MaxActive != 2 {
		t.Errorf("literal for_each = %s max_active %d", got, d.Tasks[1].MaxActive)
	}
	if got, ok := d.Tasks[2].ForEach.Expression(); !ok || got != "{{ params.parts }}" {
		t.Errorf("param for_each = %q %v", got, ok)
	}
	j, err := Parse([]byte(`{"name":"j","tasks":[{"id":"a","command":"echo {{ item }}","for_each":["x","y"]}]}`), "application/json")
	if err != nil {
		t.Fatal(err)
	}
	if got := string(j.Tasks[0].ForEach); got != `["x","y"]` {
		t.Errorf("JSON for_each = %s", got)
	}
}

// A bad for_each is a 400 that names the task and the field: not an array
// nor one expression, a bad expression, a reference to a task that is not
// upstream or a param not declared, a literal over max_items, max_active
// without for_each, for_each on a handler.
func TestForEachErrors(t *testing.T) {
	for _, c := range []struct{ name, tasks, want string }{
		{"object", `[{"id":"a","command":"x","for_each":{"a":1}}]`, `task "a": for_each: want a JSON array`},
		{"number", `[{"id":"a","command":"x","for_each":3}]`, `task "a": for_each: want a JSON array`},
		{"text", `[{"id":"a","command":"x","for_each":"a,b"}]`, `task "a": for_each: "a,b" is not one {{ expression }}`},
		{"two templates", `[{"id":"a","command":"x","for_each":"{{ 1 }}{{ 2 }}"}]`, `is not one {{ expression }}`},
		{"syntax", `[{"id":"a","command":"x","for_each":"{{ params. }}"}]`, `task "a": for_each:`},
		{"param", `[{"id":"a","command":"x","for_each":"{{ params.nope }}"}]`, `task "a": for_each: params.nope is not declared`},
		{"unknown task", `[{"id":"a","command":"x","for_each":"{{ tasks.zz.outputs.p }}"}]`, `task "a": for_each: tasks.zz: there is no task "zz"`},
		{"not upstream", `[{"id":"a","command":"x"},{"id":"b","command":"x","for_each":"{{ tasks.a.outputs.p }}"}]`,
			`task "b": for_each: tasks.a is not upstream of b`},
		{"too many", `[{"id":"a","command":"x","for_each":[1,2,3,4]}]`, `task "a": for_each lists 4 items; the limit is 3 (max_items)`},
		{"max_active alone", `[{"id":"a","command":"x","max_active":2}]`, `task "a": max_active bounds a map's instances: give for_each too`},
		{"max_active negative", `[{"id":"a","command":"x","for_each":[1],"max_active":-1}]`, `task "a": max_active -1 is out of range`},
	} {
		t.Run(c.name, func(t *testing.T) {
			d, err := Parse([]byte(`{"name":"n","tasks":`+c.tasks+`}`), "application/json")
			if err != nil {
				t.Fatal(err)
			}
			d.Normalize()
			err = Validate(d, Limits{MaxItems: 3})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error with %q", err, c.want)
			}
		})
	}
	d := &model.DAG{Name: "h", Tasks: []model.Task{{ID: "a", Kind: model.KindNoop}},
		OnExit: &model.Task{Kind: model.KindNoop, ForEach: model.ForEach(`[1]`)}}
	d.Normalize()
	if err := Validate(d, Limits{}); err == nil || !strings.Contains(err.Error(), "on_exit: for_each and max_active are for a DAG's tasks") {
		t.Fatalf("for_each on a handler: %v", err)
	}
}

func TestInstanceIDs(t *testing.T) {
	if got := model.InstanceID("process", 12); got != "process[12]" {
		t.Fatal(got)
	}
	for id, want := range map[string]bool{"process[0]": true, "p[12]": true, "p[01]": false, "p[]": false, "[1]": false, "p[-1]": false, "p": false, "p[1]x": false} {
		_, _, ok := model.ParseInstanceID(id)
		if ok != want {
			t.Errorf("ParseInstanceID(%q) ok = %v, want %v", id, ok, want)
		}
	}
	items, err := model.SplitItems([]byte(` [ 1, "a" , {"b":[2]} ] `))
	if err != nil || len(items) != 3 || string(items[2]) != `{"b":[2]}` || string(items[1]) != `"a"` {
		t.Fatalf("SplitItems: %q %v", items, err)
	}
}
