package expr

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

func env() Env {
	var outputs map[string]any
	_ = json.Unmarshal([]byte(`{"partitions": ["a", "b"], "rows": 42, "ratio": 0.5, "ok": true, "meta": {"k": "v"}}`), &outputs)
	return Env{
		Params: map[string]any{"region": "eu", "day": "2026-11-27", "n": 3.0},
		Tasks: map[string]any{
			"list": map[string]any{"status": "succeeded", "outputs": outputs},
			"process": map[string]any{"status": "succeeded", "outputs": []any{
				map[string]any{"count": 1.0}, map[string]any{"count": 2.0},
			}},
		},
		Item:  "b",
		Index: 1,
		DAG:   map[string]any{"id": "etl", "run": 1.0},
		Run:   map[string]any{"tick": "2026-11-27T00:00:00Z"},
	}
}

func TestRender(t *testing.T) {
	for src, want := range map[string]string{
		"plain text, no braces": "plain text, no braces",
		"":                      "",
		"load {{ params.region }}/{{params.day}}":            "load eu/2026-11-27",
		"{{ tasks.list.outputs.rows }} rows":                 "42 rows",
		"{{ tasks.list.outputs.ratio }}":                     "0.5",
		"{{ tasks.list.outputs.ok }}":                        "true",
		"{{ tasks.list.outputs.partitions }}":                `["a","b"]`,
		"{{ tasks.list.outputs.meta }}":                      `{"k":"v"}`,
		"{{ len(tasks.list.outputs.partitions) }}":           "2",
		"{{ item }}#{{ index }}":                             "b#1",
		"{{ sum(map(tasks.process.outputs, #.count)) }}":     "3",
		"{{ params.n * 2 }}":                                 "6",
		`{{ "{{" }} literal {{ "}}" }}`:                      "{{ literal }}",
		"{{ dag.id }}-{{ dag.run }}":                         "etl-1",
		"{{ run.tick }}":                                     "2026-11-27T00:00:00Z",
		"{{ upper(params.region) }}":                         "EU",
		"{{ tasks.list.status == 'succeeded' ? 'y' : 'n' }}": "y",
		// shellquote: one shell word, whatever the value holds.
		"echo {{ shellquote(params.region) }}":           "echo 'eu'",
		"echo {{ shellquote(\"1; rm -rf / 'x'\") }}":     `echo '1; rm -rf / '\''x'\'''`,
		"echo {{ shellquote(tasks.list.outputs.meta) }}": `echo '{"k":"v"}'`,
	} {
		tpl, err := ParseTemplate(src)
		if err != nil {
			t.Errorf("%q: %v", src, err)
			continue
		}
		got, err := tpl.Render(env(), 0)
		if err != nil || got != want {
			t.Errorf("%q: got %q, %v; want %q", src, got, err, want)
		}
	}
}

// What a template names is known before it runs, so that submission can
// refuse a parameter or task that does not exist.
func TestRefs(t *testing.T) {
	tpl, err := ParseTemplate(`{{ params.region }} {{ params["day"] }} {{ tasks.list.outputs.x }} {{ tasks["b"].status }} {{ params.region }} {{ params[item] }}`)
	if err != nil {
		t.Fatal(err)
	}
	want := Refs{Params: []string{"region", "day"}, Tasks: []string{"list", "b"}}
	if got := tpl.Refs(); !reflect.DeepEqual(got, want) {
		t.Errorf("refs %+v, want %+v", got, want)
	}
}

func TestCompileErrors(t *testing.T) {
	for src, want := range map[string]string{
		"{{ params.region ":      "a {{ without its }}",
		"{{ }}":                  "empty expression",
		"{{ foo.bar }}":          "unknown name foo",
		"{{ params.( }}":         "expected name",
		"{{ now() }}":            "unknown name now",
		`{{ repeat("x", 1e9) }}`: "unknown name repeat",
		"{{ " + strings.Repeat("1+", 3000) + "1 }}": "expression of",
	} {
		_, err := ParseTemplate(src)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%.60q: error %v, want one saying %q", src, err, want)
		}
	}
	deep := "{{ " + strings.Repeat("1+", 1000) + "1 }}"
	if _, err := ParseTemplate(deep); err == nil {
		t.Error("an expression over the node bound compiled")
	}
}

func TestRenderErrors(t *testing.T) {
	for src, want := range map[string]string{
		"{{ params.missing }}":                "has no value",
		"{{ tasks.list.outputs.nothing }}":    "has no value",
		"{{ tasks.nope.outputs.x }}":          "",
		"{{ map(1..1000000, # * 2) }}":        "memory budget exceeded",
		"{{ map(1..1000, map(1..1000, #)) }}": "memory budget exceeded",
		"{{ params.region + 1 }}":             "invalid operation",
	} {
		tpl, err := ParseTemplate(src)
		if err != nil {
			t.Errorf("%q: %v", src, err)
			continue
		}
		_, err = tpl.Render(env(), 0)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want one saying %q", src, err, want)
		}
	}
	tpl, _ := ParseTemplate("{{ tasks.list.outputs.partitions }}{{ tasks.list.outputs.partitions }}")
	if _, err := tpl.Render(env(), 12); !errors.Is(err, ErrTooLong) {
		t.Errorf("a render past its bound: %v", err)
	}
}

func TestCondition(t *testing.T) {
	for src, want := range map[string]bool{
		"params.region == 'eu'":                   true,
		"tasks.list.outputs.rows > 100":           false,
		"'a' in tasks.list.outputs.partitions":    true,
		"len(tasks.list.outputs.partitions) == 0": false,
	} {
		p, err := Compile(src)
		if err != nil {
			t.Errorf("%q: %v", src, err)
			continue
		}
		got, err := p.Bool(env())
		if err != nil || got != want {
			t.Errorf("%q: %v, %v; want %v", src, got, err, want)
		}
	}
	if _, err := Compile("tasks.list.status == 'succeeded' && index"); err == nil || !strings.Contains(err.Error(), "mismatched types") {
		t.Errorf("a number in a condition compiled: %v", err)
	}
	p, _ := Compile("params.region")
	if _, err := p.Bool(env()); err == nil || !strings.Contains(err.Error(), "a string, not true or false") {
		t.Errorf("a string taken for a condition: %v", err)
	}
}

// The same program over the same env yields the same value: leader and
// standby evaluate alike.
func TestDeterministic(t *testing.T) {
	tpl, err := ParseTemplate("{{ toJSON(tasks.list.outputs) }} {{ string(tasks.list.outputs.meta) }} {{ tasks.list.outputs }}")
	if err != nil {
		t.Fatal(err)
	}
	first, err := tpl.Render(env(), 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 50; i++ {
		if got, _ := tpl.Render(env(), 0); got != first {
			t.Fatalf("render %d: %q, first %q", i, got, first)
		}
	}
}

// What would differ between leader and standby (the clock, the host's zone
// files, map order) is not in the language.
func TestNondeterministicBuiltinsRefused(t *testing.T) {
	for _, src := range []string{
		"now()", `date("2026-11-28", "2006-01-02", "Europe/Paris")`, `timezone("UTC")`,
		"keys(params)", "values(params)", "toPairs(params)", `repeat("x", 3)`,
	} {
		if _, err := Compile(src); err == nil {
			t.Errorf("%s compiled", src)
		}
	}
}

// Expressions a few dozen bytes long that would build gigabytes of text
// (the memory budget counts elements, not bytes) fail with an error naming
// the bound, quickly, instead of running the leader out of memory.
func TestTextBounded(t *testing.T) {
	var lets strings.Builder
	lets.WriteString(`let a0 = "xxxxxxxxxxxxxxxx"; `)
	for i := 1; i <= 60; i++ {
		fmt.Fprintf(&lets, "let a%d = a%d + a%d; ", i, i-1, i-1)
	}
	lets.WriteString("len(a60)")
	for _, src := range []string{
		`len(reduce(1..40, #acc + #acc, "xx"))`,
		lets.String(),
		`len(replace(replace(replace(params.region + "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxx", "x", params.region + "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"), "x", "xxxxxxxxxxxxxxxxxxxxxxxxxxxx"), "x", "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"))`,
		`len(toJSON(toJSON(toJSON(toJSON(toJSON(toJSON(toJSON(toJSON(toJSON(toJSON(toJSON(toJSON(toJSON(toJSON(toJSON(toJSON(toJSON(toJSON(toJSON(toJSON(toJSON(toJSON("\"")))))))))))))))))))))))`,
		`len(join(map(1..90000, "` + strings.Repeat("y", 100) + `")))`,
		`len(string(map(1..90000, "` + strings.Repeat("y", 100) + `")))`,
		`len(upper(join(map(1..9000, "` + strings.Repeat("y", 100) + `"))))`,
		`let s = join(map(1..5000, "` + strings.Repeat("y", 100) + `")); len(join(map(1..40000, s)))`,
		`let s = join(map(1..5000, "` + strings.Repeat("y", 100) + `")); len(toJSON(map(1..40000, s)))`,
		`let s = join(map(1..5000, "` + strings.Repeat("y", 100) + `")); len(replace(s, "y", s))`,
		`let a = map(1..300, 1); let b = map(1..300, a); let c = map(1..300, b); all(c, all(#, all(#, # == 1)))`,
	} {
		p, err := Compile(src)
		if err != nil {
			t.Fatalf("%.60s: %v", src, err)
		}
		start := time.Now()
		v, err := p.Eval(env())
		if err == nil {
			t.Errorf("%.60s: evaluated to %v", src, v)
			continue
		}
		if !strings.Contains(err.Error(), "bytes of text") && !strings.Contains(err.Error(), "memory budget") &&
			!strings.Contains(err.Error(), "steps") {
			t.Errorf("%.60s: %v", src, err)
		}
		t.Logf("%.40s: %v in %v", src, err, time.Since(start))
	}
}

// Bounded text keeps the language's behaviour: numbers still add, strings
// concatenate, the text builtins answer as before.
func TestTextBuiltinsStillWork(t *testing.T) {
	for src, want := range map[string]any{
		`1 + 2`:                          3,
		`1.5 + 2`:                        3.5,
		`params.region + "-" + "x"`:      "eu-x",
		`join(["a", "b"], ",")`:          "a,b",
		`upper("eu") + lower("EU")`:      "EUeu",
		`replace("a-b", "-", "_")`:       "a_b",
		`toJSON([1])`:                    "[\n  1\n]",
		`string(1)`:                      "1",
		`toBase64("x")`:                  "eA==",
		`len(params.region + "abc") > 2`: true,
		`all([1, 2], # > 0)`:             true,
		`filter([1, 2, 3], # > 1)`:       []any{2, 3},
		`map([1, 2], # + 1)`:             []any{2, 3},
		`reduce([1, 2, 3], #acc + #, 0)`: 6,
		`count(["a", "bb"], len(#) > 1)`: 1,
	} {
		p, err := Compile(src)
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		got, err := p.Eval(env())
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s = %#v, want %#v", src, got, want)
		}
	}
}
