package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// for_each through the real binary, as a user runs it: over a literal,
// over a param, over an upstream task's output (the ETL example), an
// empty list (the group is skipped), too many items (the group fails,
// naming max_items), and what submission refuses (a 400 naming the
// field). `orion get` shows a group as one line with its instances'
// counts, lists its instances, and shows one by its id.
func TestForEach(t *testing.T) {
	n := newNode(t, "--slots", "4", "--max-items", "5")
	n.start()
	work := t.TempDir()
	file := filepath.Join(work, "fan.yaml")
	body := `id: fan
params:
  regions: [eu, us, ap]
tasks:
  - id: list
    command: echo 'many=[1,2,3,4,5,6]' > "$ORION_OUTPUTS"
  - id: literal
    for_each: [{n: 1}, {n: 2}]
    command: echo "{{ item.n * 10 }} $ORION_ITEM $ORION_INDEX" >> ` + work + `/literal.out
  - id: param
    for_each: "{{ params.regions }}"
    max_active: 1
    command: echo "{{ index }}={{ item }}" >> ` + work + `/param.out
  - id: empty
    for_each: []
    command: echo never >> ` + work + `/empty.out
  - id: after_empty
    depends_on: [empty]
    command: echo never >> ` + work + `/empty.out
  - id: toomany
    depends_on: [list]
    for_each: "{{ tasks.list.outputs.many }}"
    command: echo never >> ` + work + `/toomany.out
`
	if err := os.WriteFile(file, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := n.orion("submit", "-f", file, "--wait", "--timeout", "60s")
	if err == nil || !strings.Contains(out, "failed") {
		t.Fatalf("orion submit --wait: %v, want the DAG failed (toomany)\n%s", err, out)
	}
	lines := func(name string) []string {
		b, _ := os.ReadFile(filepath.Join(work, name))
		l := strings.Split(strings.TrimSpace(string(b)), "\n")
		if len(l) == 1 && l[0] == "" {
			return nil
		}
		return l
	}
	if got := strings.Join(sorted(lines("literal.out")), "|"); got != `10 {"n":1} 0|20 {"n":2} 1` {
		t.Errorf("literal instances wrote %q", got)
	}
	if got := strings.Join(lines("param.out"), "|"); got != "0=eu|1=us|2=ap" { // max_active 1: in index order
		t.Errorf("param instances wrote %q", got)
	}
	if got := lines("empty.out"); got != nil {
		t.Errorf("an empty for_each ran %q", got)
	}
	if got := lines("toomany.out"); got != nil {
		t.Errorf("a for_each over max_items ran %q", got)
	}

	out, err = n.orion("get", "dag", "fan")
	if err != nil {
		t.Fatalf("orion get dag: %v\n%s", err, out)
	}
	for _, want := range []string{"and 5 mapped instances", "(map of 2: succeeded=2)", "(map of 3: succeeded=3)", "skipped (empty)",
		"for_each yields 6 items; the limit is 5 (max_items)"} {
		if !strings.Contains(out, want) {
			t.Errorf("orion get dag fan: no %q in\n%s", want, out)
		}
	}
	if out, err = n.orion("get", "task", "fan", "param"); err != nil || !strings.Contains(out, "Instances 0 to 2 of 3:") ||
		!strings.Contains(out, "param[2]  succeeded") {
		t.Errorf("orion get task fan param: %v\n%s", err, out)
	}
	if out, err = n.orion("get", "task", "fan/param[1]"); err != nil || !strings.Contains(out, `Instance:    1 of map group param, item "us"`) {
		t.Errorf("orion get task fan/param[1]: %v\n%s", err, out)
	}
	code, raw := n.do("GET", "/api/v1/dags/fan/tasks/param/instances?offset=1&limit=1", "", nil)
	var page struct {
		Instances []struct {
			ID     string `json:"id"`
			Status string `json:"status"`
		} `json:"instances"`
		Total int `json:"total"`
	}
	if err := json.Unmarshal(raw, &page); code != 200 || err != nil || page.Total != 3 || len(page.Instances) != 1 ||
		page.Instances[0].ID != "param[1]" || page.Instances[0].Status != "succeeded" {
		t.Errorf("instances page: %d %s", code, raw)
	}
	if code, raw := n.do("GET", "/api/v1/dags/fan/tasks/list/instances", "", nil); code != 404 || !strings.Contains(string(raw), "not a map group") {
		t.Errorf("instances of a task without for_each: %d %s", code, raw)
	}

	// The ETL example: list partitions, load each, merge.
	if out, err := n.orion("submit", "-f", fixture("etl-params.yaml"), "-p", "region=us", "--wait", "--timeout", "60s"); err != nil {
		t.Fatalf("etl-params.yaml: %v\n%s", err, out)
	}
	if out, err := n.orion("get", "task", "etl-params/report"); err != nil || !strings.Contains(out, "Outputs:\n  total  1540\n") ||
		!strings.Contains(out, "1540 rows into orders_us and customers_us") {
		t.Errorf("etl-params/report: %v\n%s", err, out)
	}

	// What submission can judge, it refuses, naming the field.
	for body, want := range map[string]string{
		"id: b1\ntasks:\n- {id: a, command: x, for_each: {a: 1}}\n":                                           `task \"a\": for_each: want a JSON array`,
		"id: b2\ntasks:\n- {id: a, command: x, for_each: '{{ 1 + }}'}\n":                                      `task \"a\": for_each:`,
		"id: b3\ntasks:\n- {id: a, command: x, for_each: '{{ tasks.b.outputs.x }}'}\n- {id: b, command: x}\n": `task \"a\": for_each: tasks.b is not upstream of a`,
		"id: b4\ntasks:\n- {id: a, command: x, for_each: [1, 2, 3, 4, 5, 6]}\n":                               `task \"a\": for_each lists 6 items; the limit is 5 (max_items)`,
		"id: b5\ntasks:\n- {id: a, command: x, for_each: '{{ params.p }}'}\n":                                 `task \"a\": for_each: params.p is not declared`,
	} {
		code, out := n.do("POST", "/api/v1/dags", "application/yaml", []byte(body))
		if code != 400 || !strings.Contains(string(out), want) || !strings.Contains(string(out), `"code":"invalid_dag"`) {
			t.Errorf("%q: %d %s\nwant 400 saying %s", body, code, out, want)
		}
	}
}

func sorted(l []string) []string {
	out := append([]string(nil), l...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}
