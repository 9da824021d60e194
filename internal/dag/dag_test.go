package dag

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/orion-sched/orion/internal/model"
	fastjson "github.com/segmentio/encoding/json"
)

const fixtures = "../../test/fixtures"

func load(t *testing.T, body, contentType string) (*model.DAG, error) {
	t.Helper()
	return Load([]byte(body), contentType, Limits{})
}

func asVE(t *testing.T, err error) *ValidationError {
	t.Helper()
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("error %v (%T) is not a *ValidationError", err, err)
	}
	return ve
}

func TestGoodFixtures(t *testing.T) {
	for _, name := range []string{"etl.yaml", "seed-pipeline.yaml", "diamond.json", "mixed.yaml", "etl-params.yaml", "deploy-pipeline.yaml"} {
		t.Run(name, func(t *testing.T) {
			d, err := ParseFile(filepath.Join(fixtures, name))
			if err != nil {
				t.Fatal(err)
			}
			d.Normalize()
			if err := Validate(d, Limits{}); err != nil {
				t.Fatal(err)
			}
			// Fixtures are run by end-to-end tests; keep them quick.
			for _, task := range d.Tasks {
				if task.Kind == model.KindSleep && task.Duration.D() > 2*time.Second {
					t.Errorf("task %s sleeps %s", task.ID, task.Duration.D())
				}
			}
		})
	}
}

func TestETLFixture(t *testing.T) {
	d, err := ParseFile(filepath.Join(fixtures, "etl.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	d.Normalize()
	if d.ID != "etl-demo" || len(d.Tasks) != 6 {
		t.Fatalf("id %q, %d tasks", d.ID, len(d.Tasks))
	}
	deps := d.DepIndices()
	idx := d.TaskIndex()
	if got := deps[idx["transform"]]; !reflect.DeepEqual(got, []int{idx["extract_orders"], idx["extract_customers"]}) {
		t.Errorf("transform deps %v", got)
	}
	if v := d.Tasks[idx["validate"]]; v.Timeout.D() != 5*time.Second || v.MaxRetries != 1 {
		t.Errorf("validate: timeout %s retries %d", v.Timeout.D(), v.MaxRetries)
	}
	if n := d.Tasks[idx["notify"]]; n.MaxRetries != 0 || n.Timeout.D() != model.DefaultTimeout {
		t.Errorf("notify: explicit max_retries 0 must stay 0 (got %d); timeout %s", n.MaxRetries, n.Timeout.D())
	}
	if tr := d.Tasks[idx["transform"]]; tr.MaxRetries != model.DefaultMaxRetries {
		t.Errorf("transform: absent max_retries should default to %d, got %d", model.DefaultMaxRetries, tr.MaxRetries)
	}
}

func TestSeedFixture(t *testing.T) {
	d, err := ParseFile(filepath.Join(fixtures, "seed-pipeline.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	d.Normalize()
	if err := Validate(d, Limits{}); err != nil {
		t.Fatal(err)
	}
	want := []struct {
		id, interp string
		deps       []string
		retries    int
	}{
		{"extract", "", nil, 3},
		{"transform", "python3", []string{"extract"}, 2},
		{"load", "", []string{"transform"}, 1},
	}
	if d.Name != "example_pipeline" || len(d.Tasks) != len(want) {
		t.Fatalf("name %q, %d tasks", d.Name, len(d.Tasks))
	}
	for i, w := range want {
		got := d.Tasks[i]
		if got.ID != w.id || got.Name != "" || got.Kind != model.KindShell || got.Interpreter != w.interp ||
			!reflect.DeepEqual(got.DependsOn, w.deps) || got.MaxRetries != w.retries {
			t.Errorf("task %d = %+v, want %+v", i, got, w)
		}
	}
}

// The exact seed text from the original project must keep parsing.
func TestSeedFormatVerbatim(t *testing.T) {
	const seed = `name: example_pipeline
tasks:
  - name: extract
    type: bash
    command: "echo 'Extracting data...'; sleep 2"
    dependencies: []
    max_retries: 3
  - name: transform
    type: python
    command: |
      print("hi")
    dependencies: ["extract"]
    max_retries: 2
`
	for _, ct := range []string{"", "application/yaml", "application/x-yaml", "text/yaml"} {
		d, err := load(t, seed, ct)
		if err != nil {
			t.Fatalf("%q: %v", ct, err)
		}
		tr := d.Tasks[1]
		if tr.ID != "transform" || tr.Kind != model.KindShell || tr.Interpreter != "python3" ||
			tr.Command != "print(\"hi\")\n" || !reflect.DeepEqual(tr.DependsOn, []string{"extract"}) {
			t.Errorf("%q: transform = %+v", ct, tr)
		}
	}
}

func TestBadFixtures(t *testing.T) {
	cases := []struct {
		file, code string
		want       []string // substrings of the message
	}{
		{"cycle.yaml", CodeCycle, []string{"cycle: a → c → b → a"}},
		{"unknown-dep.json", CodeInvalid, []string{`task "b"`, `unknown task "ghost"`}},
		{"dup-id.yaml", CodeInvalid, []string{`task "a": duplicate id`}},
		{"self-dep.yaml", CodeInvalid, []string{`task "a": depends on itself`}},
		{"bad-kind.json", CodeInvalid, []string{`task "a"`, `unknown kind "docker"`}},
		{"bad-timeout.yaml", CodeInvalid, []string{`task "a"`, "timeout 48h0m0s"}},
		{"empty.json", CodeInvalid, []string{"no tasks"}},
		{"not-json.json", CodeParse, []string{"invalid JSON at line 1"}},
		{"bad-when.yaml", CodeInvalid, []string{`task "b": when: tasks.c: task c is not upstream of this task`, `task "c": when: `}},
		{"bad-trigger-rule.yaml", CodeInvalid, []string{`task "b": trigger_rule "any_success" is unknown`}},
		{"bad-template.yaml", CodeInvalid, []string{`task "a": command: tasks.b is not upstream of a`, `task "b": command: "echo {{ params.region": a {{ without its }}`}},
	}
	seen := map[string]bool{}
	for _, c := range cases {
		seen[c.file] = true
		t.Run(c.file, func(t *testing.T) {
			body, err := os.ReadFile(filepath.Join(fixtures, "bad", c.file))
			if err != nil {
				t.Fatal(err)
			}
			ct := "application/yaml"
			if strings.HasSuffix(c.file, ".json") {
				ct = "application/json"
			}
			_, err = Load(body, ct, Limits{})
			if err == nil {
				t.Fatal("accepted")
			}
			ve := asVE(t, err)
			if ve.Code != c.code {
				t.Errorf("code %q, want %q (%v)", ve.Code, c.code, err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("message %q lacks %q", err, w)
				}
			}
		})
	}
	// Every file in bad/ must be covered, so a new one cannot go untested.
	entries, err := os.ReadDir(filepath.Join(fixtures, "bad"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !seen[e.Name()] {
			t.Errorf("bad/%s has no test case", e.Name())
		}
	}
}

func TestContentTypes(t *testing.T) {
	const js = `{"name":"n","tasks":[{"id":"a"}]}`
	const ym = "name: n\ntasks:\n  - id: a\n"
	cases := []struct {
		body, ct string
		ok       bool
		code     string
	}{
		{js, "application/json", true, ""},
		{js, "application/json; charset=utf-8", true, ""},
		{js, "application/vnd.orion+json", true, ""},
		{js, "", true, ""},
		{"  \n\t" + js, "", true, ""},
		{"\xef\xbb\xbf" + js, "", true, ""},
		{js, "application/yaml", true, ""}, // JSON is YAML
		{ym, "application/yaml", true, ""},
		{ym, "application/x-yaml", true, ""},
		{ym, "text/yaml", true, ""},
		{ym, "", true, ""},
		{ym, "text/plain", true, ""},
		{ym, "application/x-www-form-urlencoded", true, ""},
		{ym, "application/json", false, CodeParse},
		{ym, "application/xml", false, CodeUnsupportedMedia},
		{ym, "bad/;;", false, CodeUnsupportedMedia},
		{"", "", false, CodeParse},
		{"   \n", "application/json", false, CodeParse},
		{"", "application/yaml", false, CodeParse},
		{"# only a comment\n", "application/yaml", false, CodeParse},
	}
	for _, c := range cases {
		_, err := load(t, c.body, c.ct)
		if (err == nil) != c.ok {
			t.Errorf("%q as %q: err %v, want ok=%v", c.body, c.ct, err, c.ok)
			continue
		}
		if err != nil {
			if ve := asVE(t, err); ve.Code != c.code {
				t.Errorf("%q as %q: code %q, want %q (%v)", c.body, c.ct, ve.Code, c.code, err)
			}
		}
	}
}

func TestParseErrors(t *testing.T) {
	cases := []struct {
		name, body, ct string
		want           []string
	}{
		{"json unknown task field", `{"name":"n","tasks":[{"id":"a","bogus":1}]}`, "application/json", []string{`unknown field "bogus"`}},
		{"json unknown dag field", `{"name":"n","extra":true,"tasks":[]}`, "application/json", []string{`unknown field "extra"`}},
		{"yaml unknown task field", "name: n\ntasks:\n  - id: a\n    bogus: 1\n", "", []string{`line 4`, `unknown task field "bogus"`}},
		{"yaml unknown dag field", "name: n\nextra: 1\ntasks: []\n", "", []string{`line 2`, `unknown DAG field "extra"`}},
		{"json wrong type", `{"name":"n","tasks":[{"id":"a","priority":"high"}]}`, "", []string{"tasks.priority", "string"}},
		{"yaml wrong type", "name: n\ntasks:\n  - id: a\n    priority: high\n", "", []string{"line 4", "high"}},
		{"json syntax", "{\"name\":\"n\",\n\"tasks\":[,]}", "", []string{"line 2"}},
		{"json truncated", `{"name":"n"`, "", []string{"unexpected end"}},
		{"json trailing", `{"name":"n","tasks":[]} {}`, "", []string{"after the DAG"}},
		{"yaml two docs", "name: a\ntasks: []\n---\nname: b\n", "", []string{"more than one document"}},
		{"yaml list", "- a\n- b\n", "", []string{"a DAG"}},
		{"yaml dup key", "name: a\nname: b\n", "", []string{`"name" already defined`}},
		{"bad duration json", `{"name":"n","tasks":[{"id":"a","timeout":"soon"}]}`, "", []string{`"soon" is not a duration`}},
		{"bad duration yaml", "name: n\ntasks:\n  - id: a\n    timeout: soon\n", "", []string{"line 4", `"soon" is not a duration`}},
		{"huge duration", `{"name":"n","tasks":[{"id":"a","timeout":1e300}]}`, "", []string{"out of range"}},
		{"bad fail json", `{"name":"n","tasks":[{"id":"a","fail":"0.5"}]}`, "", []string{"fail"}},
		{"bad fail yaml", "name: n\ntasks:\n  - id: a\n    fail: maybe\n", "", []string{"line 4", "fail maybe"}},
		{"bad fail yaml list", "name: n\ntasks:\n  - id: a\n    fail: [1]\n", "", []string{"fail"}},
		{"unknown type", "name: n\ntasks:\n  - name: a\n    type: ruby\n    command: x\n", "", []string{`task "a"`, `unknown type "ruby"`}},
		{"kind/type conflict", "name: n\ntasks:\n  - id: a\n    kind: http\n    type: bash\n", "", []string{`task "a"`, "disagree"}},
		{"both dep aliases", "name: n\ntasks:\n  - id: a\n    depends_on: []\n    dependencies: []\n", "", []string{`task "a"`, "not both"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse([]byte(c.body), c.ct)
			if err == nil {
				t.Fatal("accepted")
			}
			ve := asVE(t, err)
			if ve.Code != CodeParse && ve.Code != CodeInvalid {
				t.Errorf("code %q", ve.Code)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("message %q lacks %q", err, w)
				}
			}
			// Internal type names must not leak to users.
			if strings.Contains(err.Error(), "raw") {
				t.Errorf("message %q mentions an internal type", err)
			}
		})
	}
}

// Duration, Probability and max_retries must read the same in both formats.
func TestScalarsBothFormats(t *testing.T) {
	cases := []struct {
		name, jsonVal, yamlVal string
		check                  func(model.Task) bool
	}{
		{"duration go syntax", `"1m30s"`, `1m30s`, func(t model.Task) bool { return t.Duration.D() == 90*time.Second }},
		{"duration int seconds", `2`, `2`, func(t model.Task) bool { return t.Duration.D() == 2*time.Second }},
		{"duration float seconds", `0.25`, `0.25`, func(t model.Task) bool { return t.Duration.D() == 250*time.Millisecond }},
		{"duration quoted seconds", `"3"`, `"3"`, func(t model.Task) bool { return t.Duration.D() == 3*time.Second }},
		{"duration null", `null`, `null`, func(t model.Task) bool { return t.Duration == 0 }},
		{"fail true", `true`, `true`, func(t model.Task) bool { return t.Fail == 1 }},
		{"fail false", `false`, `false`, func(t model.Task) bool { return t.Fail == 0 }},
		{"fail prob", `0.3`, `0.3`, func(t model.Task) bool { return t.Fail == 0.3 }},
		{"fail int", `1`, `1`, func(t model.Task) bool { return t.Fail == 1 }},
	}
	for _, c := range cases {
		field := "duration"
		if strings.HasPrefix(c.name, "fail") {
			field = "fail"
		}
		js := fmt.Sprintf(`{"name":"n","tasks":[{"id":"a","kind":"sleep",%q:%s}]}`, field, c.jsonVal)
		ym := fmt.Sprintf("name: n\ntasks:\n  - id: a\n    kind: sleep\n    %s: %s\n", field, c.yamlVal)
		for format, body := range map[string]string{"json": js, "yaml": ym} {
			d, err := Parse([]byte(body), "")
			if err != nil {
				t.Errorf("%s %s: %v", c.name, format, err)
				continue
			}
			if !c.check(d.Tasks[0]) {
				t.Errorf("%s %s: got %+v", c.name, format, d.Tasks[0])
			}
		}
	}
}

func TestMaxRetriesAbsentVsZero(t *testing.T) {
	cases := []struct {
		body string
		want int
	}{
		{`{"name":"n","tasks":[{"id":"a"}]}`, model.DefaultMaxRetries},
		{`{"name":"n","tasks":[{"id":"a","max_retries":0}]}`, 0},
		{`{"name":"n","tasks":[{"id":"a","max_retries":null}]}`, model.DefaultMaxRetries},
		{`{"name":"n","tasks":[{"id":"a","max_retries":7}]}`, 7},
		{"name: n\ntasks:\n  - id: a\n", model.DefaultMaxRetries},
		{"name: n\ntasks:\n  - id: a\n    max_retries: 0\n", 0},
		{"name: n\ntasks:\n  - id: a\n    max_retries: 7\n", 7},
	}
	for _, c := range cases {
		d, err := load(t, c.body, "")
		if err != nil {
			t.Fatalf("%s: %v", c.body, err)
		}
		if got := d.Tasks[0].MaxRetries; got != c.want {
			t.Errorf("%s: max_retries %d, want %d", c.body, got, c.want)
		}
	}
}

func TestNormalize(t *testing.T) {
	d := &model.DAG{ID: "x1", Name: "  ", Tasks: []model.Task{
		{ID: "a", Command: "echo"},
		{Name: " b ", Env: map[string]string{}, DependsOn: []string{}},
		{ID: "c", Name: "C task", Kind: "HTTP", URL: "http://example.com", Method: "post"},
		{ID: "d", Name: "d", Kind: "Sleep"},
		{ID: "e", Kind: model.KindShell, Timeout: model.Duration(time.Second)},
	}}
	d.Normalize()
	if d.Name != "x1" {
		t.Errorf("name %q: an unnamed DAG takes its id", d.Name)
	}
	want := []model.Task{
		{ID: "a", Kind: model.KindShell, Command: "echo", Timeout: model.Duration(model.DefaultTimeout)},
		{ID: "b", Kind: model.KindNoop, Timeout: model.Duration(model.DefaultTimeout)},
		{ID: "c", Name: "C task", Kind: model.KindHTTP, URL: "http://example.com", Method: "POST", ExpectStatus: 200, Timeout: model.Duration(model.DefaultTimeout)},
		{ID: "d", Kind: model.KindSleep, Timeout: model.Duration(model.DefaultTimeout)},
		{ID: "e", Kind: model.KindShell, Timeout: model.Duration(time.Second)},
	}
	if !reflect.DeepEqual(d.Tasks, want) {
		t.Errorf("normalized\n got %+v\nwant %+v", d.Tasks, want)
	}
	before := string(d.Canonical())
	d.Normalize()
	if !reflect.DeepEqual(d.Tasks, want) || string(d.Canonical()) != before {
		t.Error("Normalize is not idempotent")
	}
	d2 := &model.DAG{Tasks: []model.Task{{ID: "a", Kind: model.KindHTTP, URL: "http://x"}}}
	d2.Normalize()
	if d2.Tasks[0].Method != "GET" {
		t.Errorf("http method default %q", d2.Tasks[0].Method)
	}
}

// validDAG returns a DAG that passes Validate; rule tests break one thing.
func validDAG() *model.DAG {
	d := &model.DAG{ID: "d1", Name: "valid", Tasks: []model.Task{
		{ID: "a", Kind: model.KindShell, Command: "true", MaxRetries: 3},
		{ID: "b", Kind: model.KindHTTP, URL: "https://example.com/health", DependsOn: []string{"a"}},
		{ID: "c", Kind: model.KindSleep, Duration: model.Duration(time.Second), Fail: 0.5, DependsOn: []string{"a"}},
		{ID: "d", Kind: model.KindNoop, DependsOn: []string{"b", "c"}, Priority: -5},
	}}
	d.Normalize()
	return d
}

func TestValidateRules(t *testing.T) {
	if err := Validate(validDAG(), Limits{}); err != nil {
		t.Fatalf("valid DAG rejected: %v", err)
	}
	cases := []struct {
		name   string
		mutate func(d *model.DAG)
		code   string
		want   []string
	}{
		{"no name no id", func(d *model.DAG) { d.ID, d.Name = "", " " }, CodeInvalid, []string{"dag name is required"}},
		{"long name", func(d *model.DAG) { d.Name = strings.Repeat("n", MaxNameLen+1) }, CodeInvalid, []string{"dag name is longer"}},
		{"no tasks", func(d *model.DAG) { d.Tasks = nil }, CodeInvalid, []string{"no tasks"}},
		{"bad dag id slash", func(d *model.DAG) { d.ID = "a/b" }, CodeInvalid, []string{`dag id "a/b" is invalid`}},
		{"bad dag id dot", func(d *model.DAG) { d.ID = ".." }, CodeInvalid, []string{`dag id ".." is invalid`}},
		{"bad dag id long", func(d *model.DAG) { d.ID = strings.Repeat("x", 129) }, CodeInvalid, []string{"dag id"}},
		{"missing task id", func(d *model.DAG) { d.Tasks[1].ID = "" }, CodeInvalid, []string{"task #2: id is required"}},
		{"bad task id", func(d *model.DAG) { d.Tasks[0].ID = "ex tract" }, CodeInvalid, []string{`task "ex tract": id is invalid`}},
		{"bad task id slash", func(d *model.DAG) { d.Tasks[0].ID = "a/b" }, CodeInvalid, []string{`task "a/b": id is invalid`}},
		{"dup id", func(d *model.DAG) { d.Tasks[2].ID = "b" }, CodeInvalid, []string{`task "b": duplicate id (tasks #2 and #3)`}},
		{"unknown dep", func(d *model.DAG) { d.Tasks[3].DependsOn = []string{"b", "zz"} }, CodeInvalid, []string{`task "d": depends on unknown task "zz"`}},
		{"self dep", func(d *model.DAG) { d.Tasks[1].DependsOn = []string{"b"} }, CodeInvalid, []string{`task "b": depends on itself`}},
		{"dup dep", func(d *model.DAG) { d.Tasks[3].DependsOn = []string{"b", "c", "b"} }, CodeInvalid, []string{`task "d": depends on "b" more than once`}},
		{"dup dep long list", func(d *model.DAG) { d.Tasks[3].DependsOn = append([]string{"b"}, slices.Repeat([]string{"c"}, 17)...) }, CodeInvalid, []string{`task "d": depends on "c" more than once`}},
		{"empty dep", func(d *model.DAG) { d.Tasks[3].DependsOn = []string{""} }, CodeInvalid, []string{`task "d": empty entry in depends_on`}},
		{"bad kind", func(d *model.DAG) { d.Tasks[3].Kind = "lambda" }, CodeInvalid, []string{`task "d": unknown kind "lambda"`}},
		{"empty kind unnormalized", func(d *model.DAG) { d.Tasks[3].Kind = "" }, CodeInvalid, []string{`task "d": unknown kind ""`}},
		{"shell no command", func(d *model.DAG) { d.Tasks[0].Command = "  " }, CodeInvalid, []string{`task "a": shell task needs a command`}},
		{"shell nul", func(d *model.DAG) { d.Tasks[0].Command = "a\x00b" }, CodeInvalid, []string{`task "a": command contains a NUL`}},
		{"bad interpreter", func(d *model.DAG) { d.Tasks[0].Interpreter = "python3 -u" }, CodeInvalid, []string{`task "a": interpreter`}},
		{"bad env", func(d *model.DAG) { d.Tasks[0].Env = map[string]string{"A=B": "x"} }, CodeInvalid, []string{`task "a": env "A=B"`}},
		{"env_from bad secret", func(d *model.DAG) { d.Tasks[0].EnvFrom = []model.SecretRef{{Secret: "../etc", Key: "k", As: "V"}} },
			CodeInvalid, []string{`task "a": env_from[0]: secret "../etc" is invalid`}},
		{"env_from dotdot key", func(d *model.DAG) { d.Tasks[0].EnvFrom = []model.SecretRef{{Secret: "db", Key: "..data", As: "V"}} },
			CodeInvalid, []string{`task "a": env_from[0]: key "..data" is invalid`}},
		{"env_from bad var", func(d *model.DAG) { d.Tasks[0].EnvFrom = []model.SecretRef{{Secret: "db", Key: "k", As: "1V"}} },
			CodeInvalid, []string{`task "a": env_from[0]: as "1V" is invalid`}},
		{"env_from orion var", func(d *model.DAG) {
			d.Tasks[0].EnvFrom = []model.SecretRef{{Secret: "db", Key: "k", As: "ORION_DAG_ID"}}
		},
			CodeInvalid, []string{`names starting with ORION_ are Orion's`}},
		{"env_from twice", func(d *model.DAG) {
			d.Tasks[0].Env = map[string]string{"V": "x"}
			d.Tasks[0].EnvFrom = []model.SecretRef{{Secret: "db", Key: "k", As: "W"}, {Secret: "db", Key: "j", As: "W"}, {Secret: "db", Key: "k", As: "V"}}
		}, CodeInvalid, []string{`env_from[1]: W is set twice`, `env_from[2]: V is set twice`}},
		{"env_from too many", func(d *model.DAG) {
			for i := range model.MaxSecretRefs + 1 {
				d.Tasks[0].EnvFrom = append(d.Tasks[0].EnvFrom, model.SecretRef{Secret: "db", Key: "k", As: fmt.Sprintf("V%d", i)})
			}
		}, CodeInvalid, []string{`task "a": env_from has 33 entries; at most 32`}},
		{"env_from on http", func(d *model.DAG) { d.Tasks[1].EnvFrom = []model.SecretRef{{Secret: "db", Key: "k", As: "V"}} },
			CodeInvalid, []string{`task "b": env_from is for shell tasks, not http`}},
		{"http no url", func(d *model.DAG) { d.Tasks[1].URL = "" }, CodeInvalid, []string{`task "b": http task needs a url`}},
		{"http relative url", func(d *model.DAG) { d.Tasks[1].URL = "/health" }, CodeInvalid, []string{`task "b": url "/health" is invalid`}},
		{"http ftp url", func(d *model.DAG) { d.Tasks[1].URL = "ftp://x/y" }, CodeInvalid, []string{`task "b": url "ftp://x/y"`}},
		{"http garbage url", func(d *model.DAG) { d.Tasks[1].URL = "http://[::1" }, CodeInvalid, []string{`task "b": url`}},
		{"http bad method", func(d *model.DAG) { d.Tasks[1].Method = "FETCH" }, CodeInvalid, []string{`task "b": method "FETCH"`}},
		{"http bad status", func(d *model.DAG) { d.Tasks[1].ExpectStatus = 42 }, CodeInvalid, []string{`task "b": expect_status 42`}},
		{"priority high", func(d *model.DAG) { d.Tasks[0].Priority = MaxPriority + 1 }, CodeInvalid, []string{`task "a": priority 1000001`}},
		{"priority low", func(d *model.DAG) { d.Tasks[0].Priority = -MaxPriority - 1 }, CodeInvalid, []string{`task "a": priority -1000001`}},
		{"retries negative", func(d *model.DAG) { d.Tasks[0].MaxRetries = -1 }, CodeInvalid, []string{`task "a": max_retries -1`}},
		{"retries high", func(d *model.DAG) { d.Tasks[0].MaxRetries = 101 }, CodeInvalid, []string{`task "a": max_retries 101`}},
		{"timeout negative", func(d *model.DAG) { d.Tasks[0].Timeout = model.Duration(-time.Second) }, CodeInvalid, []string{`task "a": timeout -1s`}},
		{"timeout zero unnormalized", func(d *model.DAG) { d.Tasks[0].Timeout = 0 }, CodeInvalid, []string{`task "a": timeout 0s`}},
		{"timeout long", func(d *model.DAG) { d.Tasks[0].Timeout = model.Duration(25 * time.Hour) }, CodeInvalid, []string{`task "a": timeout 25h0m0s`}},
		{"sleep negative", func(d *model.DAG) { d.Tasks[2].Duration = model.Duration(-time.Second) }, CodeInvalid, []string{`task "c": duration -1s`}},
		{"sleep long", func(d *model.DAG) { d.Tasks[2].Duration = model.Duration(25 * time.Hour) }, CodeInvalid, []string{`task "c": duration 25h0m0s`}},
		{"fail high", func(d *model.DAG) { d.Tasks[2].Fail = 1.5 }, CodeInvalid, []string{`task "c": fail 1.5`}},
		{"fail negative", func(d *model.DAG) { d.Tasks[2].Fail = -0.1 }, CodeInvalid, []string{`task "c": fail -0.1`}},
		{"fail NaN", func(d *model.DAG) { d.Tasks[2].Fail = model.Probability(math.NaN()) }, CodeInvalid, []string{`task "c": fail NaN`}},
		{"max_active_tasks negative", func(d *model.DAG) { d.MaxActiveTasks = -1 }, CodeInvalid, []string{"max_active_tasks -1 is out of range"}},
		{"bad pool", func(d *model.DAG) { d.Tasks[0].Pool = "g p u" }, CodeInvalid, []string{`task "a": pool "g p u" is invalid`}},
		{"bad selector key", func(d *model.DAG) { d.Tasks[0].Selector = map[string]string{"a=b": "x"} }, CodeInvalid, []string{`task "a": selector key "a=b" is invalid`}},
		{"empty selector value", func(d *model.DAG) { d.Tasks[0].Selector = map[string]string{"zone": ""} }, CodeInvalid, []string{`task "a": selector zone: value "" is invalid`}},
		{"unsatisfiable selector", func(d *model.DAG) {
			d.Tasks[0].Pool, d.Tasks[0].Selector = "gpu", map[string]string{"pool": "cpu"}
		}, CodeInvalid, []string{`task "a": selector is unsatisfiable: pool "gpu" and selector pool "cpu"`}},
		{"cycle", func(d *model.DAG) { d.Tasks[0].DependsOn = []string{"d"} }, CodeCycle, []string{"cycle: a → d → b → a"}},
		{"cycle plus other", func(d *model.DAG) { d.Tasks[0].DependsOn = []string{"d"}; d.Tasks[3].Priority = 2e6 }, CodeInvalid, []string{"cycle: a → d", `task "d": priority`}},
		{"too many", func(d *model.DAG) {
			for i := 0; i < DefaultMaxTasks; i++ {
				d.Tasks = append(d.Tasks, model.Task{ID: fmt.Sprintf("t%d", i), Kind: model.KindNoop, Timeout: model.Duration(time.Second)})
			}
		}, CodeTooMany, []string{"100004 tasks; the limit is 100000"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := validDAG()
			c.mutate(d)
			err := Validate(d, Limits{})
			if err == nil {
				t.Fatal("accepted")
			}
			ve := asVE(t, err)
			if ve.Code != c.code {
				t.Errorf("code %q, want %q (%v)", ve.Code, c.code, err)
			}
			for _, w := range c.want {
				if !strings.Contains(ve.Message, w) {
					t.Errorf("message %q lacks %q", ve.Message, w)
				}
				found := false
				for _, line := range ve.Details {
					found = found || strings.Contains(line, w)
				}
				if !found {
					t.Errorf("details %q lack %q", ve.Details, w)
				}
			}
		})
	}
}

func TestValidateReportsEverything(t *testing.T) {
	body := `name: many
tasks:
  - id: a
    kind: http
  - id: a
    command: echo
    depends_on: [ghost, a]
  - id: bad/id
    kind: sleep
    duration: -1s
    fail: 2
    max_retries: 500
`
	_, err := load(t, body, "")
	ve := asVE(t, err)
	want := []string{
		`task "a": http task needs a url`,
		`task "a": duplicate id`,
		`task "a": depends on unknown task "ghost"`,
		`task "a": depends on itself`,
		`task "bad/id": id is invalid`,
		`task "bad/id": duration -1s`,
		`task "bad/id": fail 2`,
		`task "bad/id": max_retries 500`,
	}
	all := strings.Join(ve.Details, "\n")
	for _, w := range want {
		if !strings.Contains(all, w) {
			t.Errorf("details lack %q:\n%s", w, all)
		}
	}
	if ve.Code != CodeInvalid || !strings.HasPrefix(ve.Message, fmt.Sprintf("%d problems: ", len(ve.Details))) {
		t.Errorf("code %q message %q", ve.Code, ve.Message)
	}
}

func TestDetailsCapped(t *testing.T) {
	d := &model.DAG{Name: "n"}
	for i := 0; i < 300; i++ {
		d.Tasks = append(d.Tasks, model.Task{ID: fmt.Sprintf("t%d", i), Kind: "bogus", Timeout: model.Duration(time.Second)})
	}
	ve := asVE(t, Validate(d, Limits{}))
	if len(ve.Details) != maxDetails+1 || !strings.Contains(ve.Details[maxDetails], "200 more problems") {
		t.Errorf("%d details, last %q", len(ve.Details), ve.Details[len(ve.Details)-1])
	}
	if len(ve.Message) > 2000 {
		t.Errorf("message is %d bytes", len(ve.Message))
	}
}

func TestLimits(t *testing.T) {
	d := validDAG()
	if err := Validate(d, Limits{MaxTasks: 4}); err != nil {
		t.Errorf("4 tasks at limit 4: %v", err)
	}
	if ve := asVE(t, Validate(d, Limits{MaxTasks: 3})); ve.Code != CodeTooMany {
		t.Errorf("code %q", ve.Code)
	}
	if err := Validate(nil, Limits{}); err == nil {
		t.Error("nil DAG accepted")
	}
}

func chain(n int, closeLoop bool) *model.DAG {
	d := &model.DAG{Name: "chain"}
	for i := 0; i < n; i++ {
		t := model.Task{ID: fmt.Sprintf("t%d", i), Kind: model.KindNoop}
		if i > 0 {
			t.DependsOn = []string{fmt.Sprintf("t%d", i-1)}
		}
		d.Tasks = append(d.Tasks, t)
	}
	if closeLoop {
		d.Tasks[0].DependsOn = []string{fmt.Sprintf("t%d", n-1)}
	}
	d.Normalize()
	return d
}

func TestCycles(t *testing.T) {
	if err := Validate(chain(DefaultMaxTasks, false), Limits{}); err != nil {
		t.Fatalf("100,000-task chain: %v", err)
	}
	// A cycle through 100,000 tasks is named by its ends, not all of them.
	ve := asVE(t, Validate(chain(DefaultMaxTasks, true), Limits{}))
	if ve.Code != CodeCycle || len(ve.Message) > 400 || !strings.HasPrefix(ve.Message, "cycle: t0 → t99999 → t99998") ||
		!strings.Contains(ve.Message, "→ … 99983 more … →") || !strings.HasSuffix(ve.Message, "t1 → t0") {
		t.Errorf("code %q, message %q", ve.Code, ve.Message)
	}
	ve = asVE(t, Validate(chain(1000, true), Limits{}))
	if ve.Code != CodeCycle || !strings.HasPrefix(ve.Message, "cycle: t0 → t999 → t998") || !strings.HasSuffix(ve.Message, "t1 → t0") {
		t.Errorf("code %q, message %.80q...", ve.Code, ve.Message)
	}

	// Two disjoint cycles are both reported.
	d := &model.DAG{Name: "two", Tasks: []model.Task{
		{ID: "a", DependsOn: []string{"b"}}, {ID: "b", DependsOn: []string{"a"}},
		{ID: "c", DependsOn: []string{"d"}}, {ID: "d", DependsOn: []string{"c"}},
		{ID: "e", DependsOn: []string{"a", "c"}},
	}}
	d.Normalize()
	ve = asVE(t, Validate(d, Limits{}))
	if ve.Code != CodeCycle || !reflect.DeepEqual(ve.Details, []string{"cycle: a → b → a", "cycle: c → d → c"}) {
		t.Errorf("code %q details %q", ve.Code, ve.Details)
	}

	// Dense graphs with many cycles: reporting stays bounded.
	d = &model.DAG{Name: "dense"}
	for i := 0; i < 50; i++ {
		var deps []string
		for j := 0; j < 50; j++ {
			if j != i {
				deps = append(deps, fmt.Sprintf("t%d", j))
			}
		}
		d.Tasks = append(d.Tasks, model.Task{ID: fmt.Sprintf("t%d", i), DependsOn: deps})
	}
	d.Normalize()
	ve = asVE(t, Validate(d, Limits{}))
	if ve.Code != CodeCycle || len(ve.Details) != maxCycles {
		t.Errorf("code %q, %d details", ve.Code, len(ve.Details))
	}
}

func TestCanonical(t *testing.T) {
	js := `{"id":"x","name":"n","tasks":[
		{"id":"a","command":"echo hi","env":{"B":"2","A":"1"},"timeout":"300s"},
		{"id":"b","kind":"sleep","duration":1.5,"depends_on":["a"],"max_retries":3}]}`
	ym := `id: x
name: n
tasks:
  - name: a
    type: sh
    command: echo hi
    env: {A: "1", B: "2"}
  - id: b
    kind: sleep
    duration: 1500ms
    dependencies: [a]
`
	dj, err := load(t, js, "")
	if err != nil {
		t.Fatal(err)
	}
	dy, err := load(t, ym, "")
	if err != nil {
		t.Fatal(err)
	}
	cj, cy := dj.Canonical(), dy.Canonical()
	if !bytes.Equal(cj, cy) {
		t.Errorf("same DAG, different canonical forms:\n%s\n%s", cj, cy)
	}
	if !bytes.Equal(cj, dj.Canonical()) {
		t.Error("Canonical is not deterministic")
	}
	rt, err := Parse(cj, "application/json")
	if err != nil {
		t.Fatalf("canonical form does not parse back: %v\n%s", err, cj)
	}
	if !bytes.Equal(rt.Canonical(), cj) {
		t.Errorf("round trip changed the canonical form:\n%s\n%s", cj, rt.Canonical())
	}
	dy.Tasks[1].Priority = 1
	if bytes.Equal(cj, dy.Canonical()) {
		t.Error("a changed priority left the canonical form equal")
	}

	// Canonical normalizes a copy and leaves the caller's DAG alone.
	raw := &model.DAG{ID: "y", Tasks: []model.Task{{ID: "a", Command: "x"}}}
	c1 := raw.Canonical()
	if raw.Name != "" || raw.Tasks[0].Kind != "" || raw.Tasks[0].Timeout != 0 {
		t.Errorf("Canonical modified its receiver: %+v", raw)
	}
	raw.Normalize()
	if !bytes.Equal(c1, raw.Canonical()) {
		t.Error("Canonical differs before and after Normalize")
	}
}

func TestDepIndicesDependents(t *testing.T) {
	d, err := ParseFile(filepath.Join(fixtures, "diamond.json"))
	if err != nil {
		t.Fatal(err)
	}
	d.Normalize()
	if err := Validate(d, Limits{}); err != nil {
		t.Fatal(err)
	}
	if got, want := d.DepIndices(), [][]int{nil, {0}, {0}, {1, 2}}; !reflect.DeepEqual(got, want) {
		t.Errorf("DepIndices %v, want %v", got, want)
	}
	if got, want := d.Dependents(), [][]int{{1, 2}, {3}, {3}, nil}; !reflect.DeepEqual(got, want) {
		t.Errorf("Dependents %v, want %v", got, want)
	}
	if d.Tasks[2].Duration.D() != 500*time.Millisecond || d.Tasks[2].Priority != 1 {
		t.Errorf("task c %+v", d.Tasks[2])
	}
}

func TestNewID(t *testing.T) {
	at := time.Date(2026, 11, 22, 15, 4, 5, 0, time.FixedZone("X", 3600))
	id := NewID(at)
	if !regexp.MustCompile(`^20261122-140405-[0-9a-f]{6}$`).MatchString(id) {
		t.Errorf("NewID = %q (want UTC time and 6 hex digits)", id)
	}
	if !ValidID(id) {
		t.Errorf("NewID %q is not a valid id", id)
	}
	seen := map[string]bool{}
	var ids []string
	for i := 0; i < 200; i++ {
		id := NewID(at.Add(time.Duration(i/10) * time.Second))
		if seen[id] {
			t.Fatalf("duplicate id %q", id)
		}
		seen[id] = true
		ids = append(ids, id)
	}
	for i := 10; i < len(ids); i += 10 {
		if ids[i-10] >= ids[i] {
			t.Errorf("%q sorts after %q", ids[i-10], ids[i])
		}
	}
	if !sort.SliceIsSorted(ids, func(i, j int) bool { return ids[i][:15] < ids[j][:15] }) {
		t.Error("time prefixes are not sorted")
	}
}

func FuzzParse(f *testing.F) {
	for _, name := range []string{"etl.yaml", "seed-pipeline.yaml", "diamond.json", "mixed.yaml", "bad/cycle.yaml", "bad/not-json.json"} {
		b, err := os.ReadFile(filepath.Join(fixtures, name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, "")
	}
	f.Add([]byte(`{"name":"n","tasks":[{"id":"a","fail":1e999}]}`), "application/json")
	f.Add([]byte("name: n\ntasks:\n  - id: a\n    fail: .nan\n    duration: .inf\n"), "application/yaml")
	f.Add([]byte("a: &a [*a]\n"), "text/yaml")
	f.Add([]byte("name: x\ntasks:\n  - {id: a, command: &c echo}\n  - {id: b, command: *c, depends_on: [a]}\n"), "application/yaml")
	f.Add([]byte(aliasBomb(50, 200)), "application/yaml")
	f.Add([]byte("name: x\ntasks:\n  - {id: a, env: &e {A: b}}\n  - {id: b, env: *e}\n"), "text/yaml")
	// The expansion budget is an invariant: whatever the body, an accepted
	// DAG's decoded text is within the limit and every field within its own.
	const budget = 4 << 10
	f.Fuzz(func(t *testing.T, body []byte, contentType string) {
		d, err := Parse(body, contentType)
		if err != nil {
			asVE(t, err)
			return
		}
		d.Normalize()
		if err := Validate(d, Limits{MaxTasks: 50, MaxDecodedBytes: budget}); err != nil {
			asVE(t, err)
			return
		}
		if n := d.DecodedBytes(); n > budget {
			t.Fatalf("accepted a DAG of %d decoded bytes; the budget is %d", n, budget)
		}
		for i := range d.Tasks {
			if tk := &d.Tasks[i]; len(tk.Command) > MaxCommandBytes || tk.EnvBytes() > MaxEnvBytes || len(tk.URL) > MaxURLBytes {
				t.Fatalf("task %s is over a field limit", tk.ID)
			}
		}
		// A valid DAG must survive its canonical form unchanged.
		c := d.Canonical()
		d2, err := Parse(c, "application/json")
		if err != nil {
			t.Fatalf("canonical form of a valid DAG does not parse: %v\n%s", err, c)
		}
		if !bytes.Equal(d2.Canonical(), c) {
			t.Fatalf("canonical round trip differs:\n%s\n%s", c, d2.Canonical())
		}
		_ = d.Dependents()
	})
}

func TestPoolsAndLimitsParse(t *testing.T) {
	body := `
name: pools
max_active_tasks: 2
tasks:
  - id: train
    command: ./train.sh
    pool: gpu
  - id: sync
    command: ./sync.sh
    selector: {pool: gpu, zone: a}
  - id: any
    kind: noop
`
	for _, ct := range []string{"application/yaml", "application/json"} {
		b := body
		if ct == "application/json" {
			b = `{"name":"pools","max_active_tasks":2,"tasks":[{"id":"train","command":"./train.sh","pool":"gpu"},` +
				`{"id":"sync","command":"./sync.sh","selector":{"pool":"gpu","zone":"a"}},{"id":"any","kind":"noop"}]}`
		}
		d, err := load(t, b, ct)
		if err != nil {
			t.Fatalf("%s: %v", ct, err)
		}
		if d.MaxActiveTasks != 2 {
			t.Errorf("%s: max_active_tasks %d", ct, d.MaxActiveTasks)
		}
		if got := model.FormatLabels(d.Tasks[0].Requires()); got != "pool=gpu" || d.Tasks[0].PoolName() != "gpu" {
			t.Errorf("%s: train requires %q", ct, got)
		}
		if got := model.FormatLabels(d.Tasks[1].Requires()); got != "pool=gpu,zone=a" || d.Tasks[1].PoolName() != "gpu" {
			t.Errorf("%s: sync requires %q", ct, got)
		}
		if d.Tasks[2].Requires() != nil || d.Tasks[2].PoolName() != "" {
			t.Errorf("%s: any requires %v", ct, d.Tasks[2].Requires())
		}
	}
	// A DAG that uses none of this encodes as it always did.
	d, err := load(t, "name: x\ntasks: [{id: a}]\n", "application/yaml")
	if err != nil {
		t.Fatal(err)
	}
	if c := string(d.Canonical()); strings.Contains(c, "pool") || strings.Contains(c, "selector") || strings.Contains(c, "max_active") {
		t.Errorf("canonical form of a plain DAG mentions pools: %s", c)
	}
}

// ValidID, checked by hand, agrees with the rule as a regular expression.
func TestValidIDMatchesItsRule(t *testing.T) {
	rule := regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)
	ids := []string{"", "a", "A", "0", ".", "..", "-a", "_a", ".a", "a.b-c_d", "a/b", "a b", "é", "aé",
		"a\x00", "a\n", strings.Repeat("x", 128), strings.Repeat("x", 129), "Z9", "a:b", "a~"}
	for c := 0; c < 256; c++ {
		ids = append(ids, string([]byte{byte(c)}), "a"+string([]byte{byte(c)}))
	}
	for _, id := range ids {
		if got, want := ValidID(id), rule.MatchString(id); got != want {
			t.Errorf("ValidID(%q) = %v, the rule says %v", id, got, want)
		}
	}
}

// FuzzParseDecodersAgree: a JSON body the fast decoder accepts decodes to
// what encoding/json decodes it to, and encoding/json accepts it too; what
// the fast one refuses is left to encoding/json (and its messages).
//
//	go test ./internal/dag -run '^$' -fuzz FuzzParseDecodersAgree -fuzztime 5m
func FuzzParseDecodersAgree(f *testing.F) {
	for _, name := range []string{"diamond.json", "bad/not-json.json"} {
		b, err := os.ReadFile(filepath.Join(fixtures, name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, s := range []string{
		`{"name":"n","tasks":[{"id":"a","fail":1e999}]}`,
		`{"name":"n","tasks":[{"id":"a","priority":1e2,"timeout":"\u0033s"}]}`,
		`{"NAME":"n","Tasks":[{"ID":"a","ſelector":{"k":"v"},"Kind":"noop"}]}`,
		`{"name":"n","name":"m","tasks":[{"id":"a","env":{"A":"1","A":"2"}}]}`,
		`{"name":"n\ud800","tasks":[{"id":"a","max_retries":null,"duration":1.5}]} ` + "\u00a0",
		`{"name":"n","tasks":[]} {}`,
		`{"name":"n","tasks":[{"id":"a","depends_on":null,"dependencies":["b"],"type":"bash","command":"echo \"x\""}]}`,
		`{"max_active_tasks":-1,"tasks":[{"fail":true,"expect_status":200.0}]}`,
		`{"name":"n","params":{"a":1.50,"b":null,"c":[ 1, {"d":"\u00e9"} ],"a":"x"},"tasks":[{"id":"a","kind":"http","outputs":{"body":"b","json":{"x":".a[0]"}}}]}`,
		`{"name":"n","params":null,"tasks":[{"id":"a","outputs":null}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var fast rawDAG
		rest, err := fastjson.Parse(body, &fast, fastjson.DisallowUnknownFields)
		if err != nil || len(bytes.TrimLeft(rest, " \t\r\n")) != 0 {
			return
		}
		var strict rawDAG
		if err := decodeJSONStrictly(body, &strict); err != nil {
			t.Fatalf("the fast decoder accepts what encoding/json refuses (%v):\n%q", err, body)
		}
		if !reflect.DeepEqual(fast, strict) {
			t.Fatalf("the decoders disagree on %q:\nfast   %+v\nstrict %+v", body, fast, strict)
		}
	})
}

// A body nested deeper than the fast decoder is given goes to encoding/json,
// which refuses it with a message; the process does not overflow its stack.
func TestDeeplyNestedBodyIsRefused(t *testing.T) {
	for _, body := range []string{
		`{"name":"n","tasks":[{"id":"a","env":{"a":` + strings.Repeat("[", 4<<20),
		`{"name":"n","tasks":` + strings.Repeat("[", 4<<20),
		`{"x":` + strings.Repeat(`{"a":`, 1<<20),
	} {
		_, err := Parse([]byte(body), "application/json")
		if err == nil || !strings.Contains(err.Error(), "invalid JSON") {
			t.Errorf("%.40q…: %v", body, err)
		}
	}
}
