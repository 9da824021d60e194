package dag

import (
	"fmt"
	"strings"
	"testing"

	"github.com/orion-sched/orion/internal/model"
)

// What a DAG file says about trigger rules, conditions, handlers and
// notifications, and how a mistake in it is named.
func TestRulesParse(t *testing.T) {
	d, err := load(t, `
name: rules
tasks:
  - id: a
    command: echo a
  - id: b
    command: echo b
    depends_on: [a]
    trigger_rule: ONE_FAILED
    when: tasks.a.status == "failed"
    continue_on_failure: true
  - id: c
    depends_on: [b]
    trigger_rule: all_success
on_failure:
  command: echo "$ORION_FAILED_TASKS"
on_exit:
  kind: http
  url: http://127.0.0.1:9/done
  when: tasks.c.status == "succeeded"
notify:
  - url: http://127.0.0.1:9/hook
    on: [Failed, cancelled]
    headers: {X-Team: data}
  - url: https://example.com/hook
    method: put
    timeout: 5s
    max_retries: 0
`, "application/yaml")
	if err != nil {
		t.Fatal(err)
	}
	b := d.Tasks[1]
	if b.TriggerRule != model.OneFailed || b.When != `tasks.a.status == "failed"` || !b.ContinueOnFailure {
		t.Errorf("b: %+v", b)
	}
	if c := d.Tasks[2]; c.TriggerRule != "" || c.Rule() != model.AllSuccess {
		t.Errorf("c: the default rule is written as none: %q", c.TriggerRule)
	}
	if d.OnFailure == nil || d.OnFailure.ID != model.OnFailureID || d.OnFailure.Kind != model.KindShell || d.OnFailure.MaxRetries != model.DefaultMaxRetries {
		t.Errorf("on_failure: %+v", d.OnFailure)
	}
	if d.OnExit == nil || d.OnExit.Kind != model.KindHTTP || d.OnExit.Method != "GET" || d.OnSuccess != nil {
		t.Errorf("handlers: %+v %+v", d.OnExit, d.OnSuccess)
	}
	if hs := d.Handlers(); len(hs) != 2 || hs[0].ID != model.OnFailureID || hs[1].ID != model.OnExitID {
		t.Errorf("Handlers() = %+v", hs)
	}
	n0, n1 := d.Notify[0], d.Notify[1]
	if n0.Method != "POST" || fmt.Sprint(n0.On) != "[failed cancelled]" || n0.Headers["X-Team"] != "data" ||
		n0.Timeout.D() != model.DefaultNotifyTimeout || n0.MaxRetries != model.DefaultMaxRetries {
		t.Errorf("notify[0]: %+v", n0)
	}
	if n1.Method != "PUT" || n1.On != nil || n1.Timeout.D().String() != "5s" || n1.MaxRetries != 0 {
		t.Errorf("notify[1]: %+v", n1)
	}
	if !n0.Sends("failed") || n0.Sends("succeeded") || !n1.Sends("succeeded") {
		t.Error("Sends")
	}
	if !d.HasHooks() {
		t.Error("HasHooks")
	}

	// The same DAG in JSON decodes to the same thing, through either
	// decoder.
	j := `{"name":"rules","tasks":[{"id":"a","command":"echo a"},{"id":"b","command":"echo b","depends_on":["a"],` +
		`"trigger_rule":"ONE_FAILED","when":"tasks.a.status == \"failed\"","continue_on_failure":true},` +
		`{"id":"c","depends_on":["b"],"trigger_rule":"all_success"}],` +
		`"on_failure":{"command":"echo \"$ORION_FAILED_TASKS\""},` +
		`"on_exit":{"kind":"http","url":"http://127.0.0.1:9/done","when":"tasks.c.status == \"succeeded\""},` +
		`"notify":[{"url":"http://127.0.0.1:9/hook","on":["Failed","cancelled"],"headers":{"X-Team":"data"}},` +
		`{"url":"https://example.com/hook","method":"put","timeout":"5s","max_retries":0}]}`
	dj, err := load(t, j, "application/json")
	if err != nil {
		t.Fatal(err)
	}
	if a, b := string(d.Canonical()), string(dj.Canonical()); a != b {
		t.Errorf("YAML and JSON differ:\n%s\n%s", a, b)
	}
	var strict rawDAG
	if err := decodeJSONStrictly([]byte(j), &strict); err != nil {
		t.Fatal(err)
	}
	sd, err := strict.toDAG()
	if err != nil {
		t.Fatal(err)
	}
	sd.Normalize()
	if a, b := string(d.Canonical()), string(sd.Canonical()); a != b {
		t.Errorf("the decoders differ:\n%s\n%s", a, b)
	}
	if d.DecodedBytes() <= int64(len(`tasks.a.status == "failed"`)+len("http://127.0.0.1:9/hook")+len("X-Team")) {
		t.Errorf("DecodedBytes %d leaves out conditions, handlers or notifications", d.DecodedBytes())
	}
}

// Normalizing for Canonical leaves the caller's handlers and notifications
// as they were.
func TestCanonicalKeepsHooks(t *testing.T) {
	d := &model.DAG{Name: "x", Tasks: []model.Task{{ID: "a", Kind: model.KindNoop}},
		OnExit: &model.Task{Command: "true"}, Notify: []model.Notification{{URL: "http://h/", On: []string{" Failed "}}}}
	_ = d.Canonical()
	if d.OnExit.ID != "" || d.OnExit.Kind != "" || d.Notify[0].Method != "" || d.Notify[0].On[0] != " Failed " {
		t.Errorf("Canonical changed the caller's DAG: %+v %+v", d.OnExit, d.Notify[0])
	}
}

func TestRulesValidation(t *testing.T) {
	cases := []struct {
		name, body string
		want       []string
	}{
		{"unknown rule", `{"name":"x","tasks":[{"id":"a"},{"id":"b","depends_on":["a"],"trigger_rule":"most"}]}`,
			[]string{`task "b": trigger_rule "most" is unknown: want all_success, all_done, one_success, one_failed, none_failed, all_failed`}},
		{"when does not parse", `{"name":"x","tasks":[{"id":"a","when":"1 +"}]}`,
			[]string{`task "a": when: `}},
		{"when reads a task not upstream", `{"name":"x","tasks":[{"id":"a"},{"id":"b"},{"id":"c","depends_on":["a"],"when":"tasks.b.status == 'failed'"}]}`,
			[]string{`task "c": when: tasks.b: task b is not upstream of this task`}},
		{"when reads a task downstream", `{"name":"x","tasks":[{"id":"a","when":"tasks.b.status == 'failed'"},{"id":"b","depends_on":["a"]}]}`,
			[]string{`task "a": when: tasks.b: task b is not upstream`}},
		{"when reads an unknown task", `{"name":"x","tasks":[{"id":"a","when":"tasks.ghost.status == 'failed'"}]}`,
			[]string{`task "a": when: tasks.ghost: no task ghost in the DAG`}},
		{"when reads an undeclared parameter", `{"name":"x","tasks":[{"id":"a","when":"params.region == 'eu'"}]}`,
			[]string{`task "a": when: params.region is not declared (it declares no params)`}},
		{"handler template reads an unknown task", `{"name":"x","tasks":[{"id":"a"}],"on_exit":{"command":"echo {{ tasks.b.outputs.n }} {{ params.p }}"}}`,
			[]string{`on_exit: command: tasks.b: there is no task "b"`, `on_exit: command: params.p is not declared`}},
		{"notification url template", `{"name":"x","tasks":[{"id":"a"}],"notify":[{"url":"http://h/{{ params.p }}"}]}`,
			[]string{`notify[0]: url: a notification's url is not a template`}},
		{"when with a name expressions do not know", `{"name":"x","tasks":[{"id":"a","when":"env.HOME == ''"}]}`,
			[]string{`task "a": when: unknown name env`}},
		{"a task takes a handler's id", `{"name":"x","tasks":[{"id":"on_exit"}]}`,
			[]string{`task "on_exit": id "on_exit" is reserved for the DAG's handler of that name`}},
		{"handler with depends_on, a rule, another id", `{"name":"x","tasks":[{"id":"a"}],"on_exit":{"id":"bye","depends_on":["a"],"trigger_rule":"all_done","command":"true"}}`,
			[]string{`on_exit: id "bye": a handler's id is its field, on_exit`, `on_exit: depends_on: a handler runs once every task`, `on_exit: trigger_rule: a handler runs by its field`}},
		{"handler without a command", `{"name":"x","tasks":[{"id":"a"}],"on_failure":{"kind":"shell"}}`,
			[]string{`on_failure: shell task needs a command`}},
		{"handler condition", `{"name":"x","tasks":[{"id":"a"}],"on_success":{"when":"tasks.nope.status == 'x'"}}`,
			[]string{`on_success: when: tasks.nope: no task nope in the DAG`}},
		{"notification problems", `{"name":"x","tasks":[{"id":"a"}],"notify":[{"url":"ftp://x/","method":"BREW","on":["done","failed","failed"],` +
			`"headers":{"Idempotency-Key":"k","Bad Name":"v","X-Ok":"a\nb"},"timeout":"-1s","max_retries":200},{"url":""}]}`,
			[]string{`notify[0]: url "ftp://x/" is invalid`, `notify[0]: method "BREW" is not supported`, `notify[0]: on: "done" is not a DAG's end`,
				`notify[0]: on: "failed" is listed twice`, `notify[0]: headers: "Bad Name" is not a valid header name`,
				`notify[0]: headers: Idempotency-Key is set by Orion`, `notify[0]: headers: X-Ok: the value has a character`,
				`notify[0]: timeout -1s is out of range`, `notify[0]: max_retries 200 is out of range`, `notify[1]: url is required`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := load(t, c.body, "application/json")
			if err == nil {
				t.Fatal("accepted")
			}
			ve := asVE(t, err)
			if ve.Code != CodeInvalid {
				t.Errorf("code %q", ve.Code)
			}
			all := strings.Join(ve.Details, "\n")
			for _, w := range c.want {
				if !strings.Contains(all, w) {
					t.Errorf("details lack %q:\n%s", w, all)
				}
			}
		})
	}
}

// Conditions and handlers read what templates read: params, and the
// outputs of tasks upstream (a handler: of any task).
func TestRulesReadParamsAndOutputs(t *testing.T) {
	body := `{"name":"x","params":{"env":"prod"},"tasks":[{"id":"a","command":"true"},` +
		`{"id":"b","depends_on":["a"],"when":"params.env == 'prod' && tasks.a.outputs.changed == 'yes'"}],` +
		`"on_exit":{"command":"echo {{ tasks.b.status }} {{ tasks.a.outputs.changed }} {{ params.env }}"}}`
	if _, err := load(t, body, "application/json"); err != nil {
		t.Fatal(err)
	}
}

func TestNotifyBounds(t *testing.T) {
	var entries []string
	for i := 0; i <= MaxNotifications; i++ {
		entries = append(entries, `{"url":"http://h/"}`)
	}
	_, err := load(t, `{"name":"x","tasks":[{"id":"a"}],"notify":[`+strings.Join(entries, ",")+`]}`, "application/json")
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("notify: %d entries; at most %d", MaxNotifications+1, MaxNotifications)) {
		t.Errorf("%d notifications: %v", MaxNotifications+1, err)
	}
	var headers []string
	for i := 0; i <= MaxNotifyHeaders; i++ {
		headers = append(headers, fmt.Sprintf(`"X-H%d":"%s"`, i, strings.Repeat("v", 300)))
	}
	_, err = load(t, `{"name":"x","tasks":[{"id":"a"}],"notify":[{"url":"http://h/","headers":{`+strings.Join(headers, ",")+`}}]}`, "application/json")
	if err == nil || !strings.Contains(err.Error(), "headers: 33 of them; at most 32") || !strings.Contains(err.Error(), "the limit is 8192") {
		t.Errorf("too many headers: %v", err)
	}
}

// A record read back from etcd is not refused for what submission checks
// alone: the reserved ids, the conditions (the core judges them, and fails
// a task whose condition does not compile).
func TestRulesStored(t *testing.T) {
	d := &model.DAG{Name: "x", Tasks: []model.Task{{ID: "on_exit", Kind: model.KindNoop, Timeout: 1, When: "1 +"}}}
	d.Normalize()
	if err := Validate(d, Limits{Stored: true}); err != nil {
		t.Errorf("stored: %v", err)
	}
	if err := Validate(d, Limits{}); err == nil {
		t.Error("submitted: accepted")
	}
}
