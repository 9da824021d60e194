package cli

import (
	"net/url"
	"strings"
	"testing"

	"github.com/orion-sched/orion/internal/model"
)

const paramsFile = `id: etl
name: etl
params:
  region: eu
  day:
  version: "1.0"
tasks:
  - id: list
    command: ls {{ params.region }}/{{ params.day }}
  - id: load
    command: load {{ tasks.list.outputs.rows }}
    depends_on: [list]
`

// -p sets declared params: sent as ?param=, checked locally first (a
// required one left unset, or one not declared, is refused before
// anything is sent), read as the server reads it.
func TestSubmitParams(t *testing.T) {
	cleanEnv(t)
	f := newFake(t)
	file := writeFile(t, "etl.yaml", paramsFile)
	r := run(t, "", "submit", "-f", file, "--server", f.URL, "-p", "day=2026-11-27", "--param", "version=1.10")
	must(t, r, 0)
	req := f.requestLog()[0]
	q, _ := url.ParseQuery(req[strings.Index(req, "?")+1:])
	if got := q["param"]; len(got) != 2 || got[0] != "day=2026-11-27" || got[1] != "version=1.10" {
		t.Errorf("request %q", req)
	}
	f.mu.Lock()
	p := f.specs["etl"].Params
	f.mu.Unlock()
	if string(p["day"]) != `"2026-11-27"` || string(p["version"]) != `"1.10"` || string(p["region"]) != `"eu"` {
		t.Errorf("params %v", p)
	}

	for args, want := range map[string]string{
		"":                   "param day is required: set it at submission (orion submit -p day=VALUE",
		"-p day=1 -p zone=a": "param zone is not declared by the DAG (it declares day, region, version)",
		"-p nonsense":        `param "nonsense": want name=value`,
	} {
		before := len(f.requestLog())
		r := run(t, "", append([]string{"submit", "-f", file, "--server", f.URL}, strings.Fields(args)...)...)
		must(t, r, 2)
		contains(t, "stderr", r.err, want)
		if len(f.requestLog()) != before {
			t.Errorf("%q: a DAG that cannot run was sent", args)
		}
	}
}

// get dag lists the params its runs use; get task the outputs a task
// published, strings as they are and other values as JSON.
func TestGetShowsParamsAndOutputs(t *testing.T) {
	cleanEnv(t)
	f := newFake(t)
	file := writeFile(t, "etl.yaml", paramsFile)
	must(t, run(t, "", "submit", "-f", file, "--server", f.URL, "-p", "day=2026-11-27"), 0)
	f.mu.Lock()
	f.dags["etl"].Tasks[0].Outputs = model.Outputs{"rows": []byte(`42`), "files": []byte(`"a.csv\nb.csv"`), "parts": []byte(`["a","b"]`)}
	f.noAdvance = true
	f.mu.Unlock()
	r := run(t, "", "get", "dag", "etl", "--server", f.URL)
	must(t, r, 0)
	contains(t, "stdout", r.out, "\nParams:\n  day      2026-11-27\n  region   eu\n  version  1.0\n")
	r = run(t, "", "get", "task", "etl/list", "--server", f.URL)
	must(t, r, 0)
	contains(t, "stdout", r.out, "\nOutputs:\n  files  a.csv\\nb.csv\n  parts  [\"a\",\"b\"]\n  rows   42\n")
	r = run(t, "", "get", "task", "etl/list", "--server", f.URL, "-o", "json")
	must(t, r, 0)
	contains(t, "stdout", r.out, `"outputs": {`, `"rows": 42`, `"parts": [`)
}
