package dag

import (
	"errors"
	"testing"
)

func TestCountJSONTasks(t *testing.T) {
	for in, want := range map[string]int{
		`{"name":"a","tasks":[]}`: 0,
		`{"name":"a","tasks":[{"id":"x","env":{"a":"[{"}},{"id":"y"}]}`:     2,
		`{"tasks":[1, 2 ,3],"notify":[{"url":"u"}]}`:                        3,
		`{"TASKS":[{},{}],"tasks":[{}]}`:                                    3,
		`{"t\u0061sks":[{},{}]}`:                                            2,
		`{"name":"tasks","on_exit":{"depends_on":["a","b"]},"tasks":[{}]}`:  1,
		`{"name":"x","params":[{"name":"tasks"}],"tasks":[{"id":"a"},"b"]}`: 2,
	} {
		if got := countJSONTasks([]byte(in)); got != want {
			t.Errorf("%s: %d tasks, want %d", in, got, want)
		}
	}
	for in, want := range map[string]int{`[]`: 0, `[{"name":"a"},{"name":"[b"}]`: 2, ` [1,[2,3],{}]`: 3, `{"tasks":[{}]}`: 0} {
		if got := CountJSONArray([]byte(in)); got != want {
			t.Errorf("%s: %d elements, want %d", in, got, want)
		}
	}
	body := wideDAG(1000, false)
	if got := countJSONTasks(body); got != 1004 {
		t.Errorf("the wide DAG counts %d tasks", got)
	}
	var ve *ValidationError
	if err := CheckTaskCount(body, "application/json", 1003); !errors.As(err, &ve) || ve.Code != CodeTooMany {
		t.Errorf("1004 tasks against a limit of 1003: %v", err)
	}
	if err := CheckTaskCount(body, "", 1004); err != nil {
		t.Errorf("1004 tasks against a limit of 1004: %v", err)
	}
	if err := CheckTaskCount(wideDAG(1000, true), "application/yaml", 10); err != nil {
		t.Errorf("YAML is left to Validate: %v", err)
	}
}
