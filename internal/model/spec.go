// Package model holds Orion's domain types: the DAG a user submits (its
// spec, the defaults that complete it and the graph derived from it), the
// identity of an attempt and the result an executor reports. It is a leaf:
// the scheduling core, the log codec, the executors and the API all speak
// it, and it imports nothing of Orion's but jsonguard (a leaf that only
// reads bytes), so the core links no I/O.
package model

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Kind is what a task runs.
type Kind string

const (
	KindShell Kind = "shell" // /bin/sh -c command (or Interpreter -c command)
	KindHTTP  Kind = "http"  // one HTTP request, success on ExpectStatus
	KindNoop  Kind = "noop"  // succeeds at once: demos, tests, benchmarks
	KindSleep Kind = "sleep" // sleeps Duration, then fails with probability Fail
	KindPod   Kind = "pod"   // one Kubernetes pod per attempt, created and followed by a worker (Pod)
)

// PodsLabel is the label of a worker that can run pod tasks: it reaches a
// Kubernetes API with the right to create pods. A worker started with its
// Kubernetes settings announces PodsLabel=true, and every pod task
// requires it (Requires), so a pod task waits for such a worker, and says
// so, rather than failing on one that cannot run it.
const PodsLabel = "orion.io/pods"

// Defaults applied by Normalize where a task leaves a field empty.
const (
	DefaultMaxRetries = 3
	DefaultTimeout    = 5 * time.Minute
)

// DAG is a workflow as submitted, after Normalize.
type DAG struct {
	// ID is optional on submit; a client-chosen id makes submission idempotent.
	ID    string `json:"id,omitempty"`
	Name  string `json:"name"`
	Tasks []Task `json:"tasks"`
	// MaxActiveTasks bounds how many of the DAG's tasks run at once; 0 is
	// no bound.
	MaxActiveTasks int `json:"max_active_tasks,omitempty"`

	// Handlers and notifications (rules.go): tasks that run once the
	// DAG's tasks have ended, and webhooks told of the DAG's end.
	OnSuccess *Task          `json:"on_success,omitempty"`
	OnFailure *Task          `json:"on_failure,omitempty"`
	OnExit    *Task          `json:"on_exit,omitempty"`
	Notify    []Notification `json:"notify,omitempty"`

	// Params are the DAG's parameters (params.go): declarations in a DAG
	// file, the values its runs use once submitted.
	Params Params `json:"params,omitempty"`
	// Scheduled is set on a schedule's run: its tick and data interval.
	Scheduled *ScheduledRun `json:"scheduled,omitempty"`
}

// Task is one node of the graph.
type Task struct {
	ID string `json:"id"`
	// Name is a free-form label. Seed-format files identify tasks by name
	// alone; Normalize then moves it into ID, so Name is set only when a task
	// gives both.
	Name string `json:"name,omitempty"`
	Kind Kind   `json:"kind"`

	// shell
	Command     string            `json:"command,omitempty"`
	Interpreter string            `json:"interpreter,omitempty"` // empty: /bin/sh; "python3" for seed-style type: python
	Env         map[string]string `json:"env,omitempty"`
	// EnvFrom adds variables whose values the worker reads from secrets
	// where the task runs (secrets.go): never stored, shown or sent.
	EnvFrom []SecretRef `json:"env_from,omitempty"`
	Workdir string      `json:"workdir,omitempty"`

	// http
	URL          string `json:"url,omitempty"`
	Method       string `json:"method,omitempty"`
	ExpectStatus int    `json:"expect_status,omitempty"`

	// pod: a JSON object spelled as a Kubernetes Pod's and its container's
	// fields (image, command, args, env, resources, volumes...; see
	// internal/kube/podspec, which validates it and writes it in one
	// canonical form at submission). The scheduling core never reads it.
	Pod json.RawMessage `json:"pod,omitempty"`

	// sleep
	Duration Duration `json:"duration,omitempty"`
	// Fail is the probability (0..1) that a sleep task fails; YAML/JSON `true` means 1.
	Fail Probability `json:"fail,omitempty"`

	DependsOn  []string `json:"depends_on,omitempty"`
	Priority   int      `json:"priority"`    // lower runs first; 0 is the most urgent
	MaxRetries int      `json:"max_retries"` // retries after the first attempt
	Timeout    Duration `json:"timeout"`     // per attempt

	// Pool is shorthand for the label requirement pool=<Pool>.
	Pool string `json:"pool,omitempty"`
	// Selector lists labels a worker must have, each with this exact value,
	// to run the task (equality match only).
	Selector map[string]string `json:"selector,omitempty"`

	// Trigger rule, condition and failure policy (rules.go).
	TriggerRule       TriggerRule `json:"trigger_rule,omitempty"` // "": all_success
	When              string      `json:"when,omitempty"`         // an expression (internal/expr)
	ContinueOnFailure bool        `json:"continue_on_failure,omitempty"`
	// Headers and Body complete an http request. The DAG file does not
	// set them: Orion does, for a notification (Notification).
	Headers map[string]string `json:"headers,omitempty"`
	Body    string            `json:"body,omitempty"`
	// Outputs says which outputs an http task takes from its response (a
	// shell task writes its own to $ORION_OUTPUTS).
	Outputs *HTTPOutputs `json:"outputs,omitempty"`

	// ForEach makes the task a map group: one instance per item, decided
	// at run time (foreach.go). MaxActive bounds its instances running at
	// once (0: no bound besides the DAG's and the pools').
	ForEach   ForEach `json:"for_each,omitempty"`
	MaxActive int     `json:"max_active,omitempty"`
}

// HTTPOutputs are the outputs an http task publishes from its response
// body: Body names an output that takes the whole body as a string; JSON
// maps output names to paths into the body read as JSON (JSONPath).
type HTTPOutputs struct {
	Body string            `json:"body,omitempty"`
	JSON map[string]string `json:"json,omitempty"`
}

// ValidHTTPURL reports whether s is an absolute http:// or https:// URL,
// what an http task's url must be (as written, or as its template renders).
func ValidHTTPURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

var httpMethods = map[string]bool{
	"GET": true, "HEAD": true, "POST": true, "PUT": true, "PATCH": true, "DELETE": true, "OPTIONS": true,
}

// ValidHTTPMethod reports whether an http task may use method m (upper case).
func ValidHTTPMethod(m string) bool { return httpMethods[m] }

// PoolLabel is the label that Task.Pool requires and that pool limits count by.
const PoolLabel = "pool"

// Requires returns the labels a worker must have to run the task: Selector
// plus pool=Pool. It is nil when the task runs on any worker. Validate
// refuses a task whose Pool and Selector's pool disagree.
func (t *Task) Requires() map[string]string {
	pod := t.Kind == KindPod
	if t.Pool == "" && !pod {
		return t.Selector
	}
	if len(t.Selector) == 0 && !pod {
		return map[string]string{PoolLabel: t.Pool}
	}
	out := make(map[string]string, len(t.Selector)+2)
	for k, v := range t.Selector {
		out[k] = v
	}
	if t.Pool != "" {
		out[PoolLabel] = t.Pool
	}
	if pod {
		out[PodsLabel] = "true"
	}
	return out
}

// PoolName is the pool a task runs in (its required pool label), or "".
func (t *Task) PoolName() string {
	if t.Pool != "" {
		return t.Pool
	}
	return t.Selector[PoolLabel]
}

// Duration is a time.Duration that reads "1m30s" (Go syntax) or a number of
// seconds, and writes Go syntax, so etcd values stay readable.
type Duration time.Duration

// D returns the value as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// MarshalJSON writes the Go syntax quoted. It does not go through
// json.Marshal: every task's timeout is encoded in its DAG's record, and
// the general encoder was a tenth of the leader's CPU under load. Go
// duration strings hold only digits, '.', '-', and unit letters ("µ"
// included), none of which JSON escapes, so the output is the same.
func (d Duration) MarshalJSON() ([]byte, error) {
	s := time.Duration(d).String()
	b := make([]byte, 0, len(s)+2)
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"'), nil
}

// UnmarshalJSON reads a quoted string without escapes (what MarshalJSON
// writes, and what every standby decodes for every task of every DAG
// record) directly; anything else goes through the general decoder.
func (d *Duration) UnmarshalJSON(b []byte) error {
	if n := len(b); n >= 2 && b[0] == '"' && b[n-1] == '"' && bytes.IndexByte(b[1:n-1], '\\') < 0 {
		return d.parse(string(b[1 : n-1]))
	}
	s := strings.TrimSpace(string(b))
	if s == "null" {
		return nil
	}
	if strings.HasPrefix(s, `"`) {
		var str string
		if err := json.Unmarshal(b, &str); err != nil {
			return err
		}
		return d.parse(str)
	}
	secs, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return fmt.Errorf("%s is not a duration: want a string such as \"30s\" or a number of seconds", s)
	}
	return d.setSeconds(secs)
}

// UnmarshalYAML accepts the same forms as UnmarshalJSON, so a bare number
// means seconds in both formats, and errors carry the YAML line.
func (d *Duration) UnmarshalYAML(value *yaml.Node) error {
	if value.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: not a duration: want a string such as \"30s\" or a number of seconds", value.Line)
	}
	switch value.ShortTag() {
	case "!!null":
		return nil
	case "!!int", "!!float":
		var secs float64
		if err := value.Decode(&secs); err != nil {
			return fmt.Errorf("line %d: %s is not a duration: want a string such as \"30s\" or a number of seconds", value.Line, value.Value)
		}
		return d.setSeconds(secs)
	case "!!str":
		if err := d.parse(value.Value); err != nil {
			return fmt.Errorf("line %d: %w", value.Line, err)
		}
		return nil
	}
	return fmt.Errorf("line %d: %s is not a duration: want a string such as \"30s\" or a number of seconds", value.Line, value.Value)
}

// maxSeconds keeps the float-to-int64 conversion defined: beyond it the
// result is implementation-specific garbage, not an error.
const maxSeconds = float64(math.MaxInt64) / float64(time.Second)

func (d *Duration) setSeconds(secs float64) error {
	if math.IsNaN(secs) || math.IsInf(secs, 0) || math.Abs(secs) >= maxSeconds {
		return fmt.Errorf("duration %v seconds is out of range", secs)
	}
	*d = Duration(secs * float64(time.Second))
	return nil
}

func (d *Duration) parse(str string) error {
	str = strings.TrimSpace(str)
	if str == "" {
		*d = 0
		return nil
	}
	// Go syntax always ends in a unit (s, m or h), and no number does: such
	// a string skips ParseFloat, whose error for it would be allocated and
	// thrown away.
	if c := str[len(str)-1]; c != 's' && c != 'm' && c != 'h' {
		if secs, err := strconv.ParseFloat(str, 64); err == nil {
			return d.setSeconds(secs)
		}
	}
	v, err := time.ParseDuration(str)
	if err != nil {
		return fmt.Errorf("%q is not a duration: want Go syntax such as \"30s\", \"5m\", \"1h30m\", or a number of seconds", str)
	}
	*d = Duration(v)
	return nil
}

// UnmarshalText lets YAML decoders (and viper) read the same forms.
func (d *Duration) UnmarshalText(b []byte) error { return d.parse(string(b)) }

// Probability is a number in [0,1]; true reads as 1 and false as 0.
type Probability float64

func (p *Probability) UnmarshalJSON(b []byte) error {
	switch s := strings.TrimSpace(string(b)); s {
	case "true":
		*p = 1
	case "false", "null":
		*p = 0
	default:
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return fmt.Errorf("fail %s: want true, false or a probability between 0 and 1", s)
		}
		*p = Probability(v)
	}
	return nil
}

// UnmarshalYAML mirrors UnmarshalJSON: a bool or a number, nothing else, so a
// quoted "0.5" is rejected in both formats alike.
func (p *Probability) UnmarshalYAML(value *yaml.Node) error {
	bad := fmt.Errorf("line %d: fail %s: want true, false or a probability between 0 and 1", value.Line, value.Value)
	if value.Kind != yaml.ScalarNode {
		return bad
	}
	switch value.ShortTag() {
	case "!!null":
		*p = 0
	case "!!bool":
		var b bool
		if err := value.Decode(&b); err != nil {
			return bad
		}
		*p = 0
		if b {
			*p = 1
		}
	case "!!int", "!!float":
		var f float64
		if err := value.Decode(&f); err != nil {
			return bad
		}
		*p = Probability(f)
	default:
		return bad
	}
	return nil
}

// TaskIndex returns a map from task id to its index in d.Tasks.
func (d *DAG) TaskIndex() map[string]int {
	m := make(map[string]int, len(d.Tasks))
	for i := range d.Tasks {
		m[d.Tasks[i].ID] = i
	}
	return m
}

// Normalize fills defaults in place. It is idempotent and never fails; any
// value it cannot make sense of is left for Validate to report.
//
// max_retries is not defaulted here: a Task built in Go cannot tell "unset"
// from 0, so Parse applies DefaultMaxRetries when the field is absent.
//
// A DAG without a name takes its id as name, so the id-only submissions that
// idempotent clients send are accepted.
func (d *DAG) Normalize() {
	d.Name = strings.TrimSpace(d.Name)
	if d.Name == "" {
		d.Name = d.ID
	}
	for i := range d.Tasks {
		d.Tasks[i].normalize()
	}
	d.normalizeHooks()
	if len(d.Params) == 0 {
		d.Params = nil
	}
}

// normalize fills a task's defaults in place (see DAG.Normalize).
func (t *Task) normalize() {
	t.Name = strings.TrimSpace(t.Name)
	// The seed format names tasks instead of giving ids.
	if t.ID == "" {
		t.ID = t.Name
	}
	if t.Name == t.ID {
		t.Name = ""
	}
	t.Kind = Kind(strings.ToLower(strings.TrimSpace(string(t.Kind))))
	if t.Kind == "" {
		t.Kind = KindNoop
		switch {
		case strings.TrimSpace(t.Command) != "":
			t.Kind = KindShell
		case len(t.Pod) > 0:
			t.Kind = KindPod
		}
	}
	if t.Kind == KindHTTP {
		if t.Method = strings.TrimSpace(t.Method); !strings.Contains(t.Method, "{{") {
			// A template is upper-cased once rendered (the core).
			t.Method = strings.ToUpper(t.Method)
		}
		if t.Method == "" {
			t.Method = "GET"
		}
		if t.ExpectStatus == 0 {
			t.ExpectStatus = 200
		}
	}
	if t.Outputs != nil && t.Outputs.Body == "" && len(t.Outputs.JSON) == 0 {
		t.Outputs = nil
	}
	if t.Outputs != nil && len(t.Outputs.JSON) == 0 {
		t.Outputs.JSON = nil
	}
	// A zero timeout means "unset": an attempt that may never run is
	// not something anyone asks for on purpose.
	if t.Timeout == 0 {
		t.Timeout = Duration(DefaultTimeout)
	}
	// Empty and nil collections mean the same; make them one value so
	// Canonical does not tell them apart.
	if len(t.Env) == 0 {
		t.Env = nil
	}
	if len(t.EnvFrom) == 0 {
		t.EnvFrom = nil
	}
	if len(t.DependsOn) == 0 {
		t.DependsOn = nil
	}
	if len(t.Selector) == 0 {
		t.Selector = nil
	}
	if len(t.Pod) == 0 {
		t.Pod = nil
	}
	t.TriggerRule = TriggerRule(strings.ToLower(strings.TrimSpace(string(t.TriggerRule))))
	if t.TriggerRule == AllSuccess {
		t.TriggerRule = "" // the default, spelled one way for Canonical
	}
	if len(t.Headers) == 0 {
		t.Headers = nil
	}
}

// Canonical returns deterministic JSON of the normalized DAG, so two
// submissions with the same id can be compared byte for byte to decide
// whether the second is a retry (accept) or a conflict (reject). d itself is
// not modified. Task order is significant. It returns nil only for values
// JSON cannot hold (a NaN fail), which Validate rejects.
func (d *DAG) Canonical() []byte {
	c := *d
	c.Tasks = append([]Task{}, d.Tasks...) // Normalize must not touch the caller's tasks
	c.copyHooks()
	c.Normalize()
	// encoding/json writes struct fields in declaration order and map keys
	// sorted, which is all the determinism needed.
	b, err := json.Marshal(&c)
	if err != nil {
		return nil
	}
	return b
}

// DepIndices returns, for each task, the indices of the tasks it depends on,
// in depends_on order. Unknown ids are skipped; call it on a valid DAG.
func (d *DAG) DepIndices() [][]int {
	index := d.TaskIndex()
	out := make([][]int, len(d.Tasks))
	for i := range d.Tasks {
		for _, dep := range d.Tasks[i].DependsOn {
			if j, ok := index[dep]; ok {
				out[i] = append(out[i], j)
			}
		}
	}
	return out
}

// Dependents returns, for each task, the indices of the tasks that depend on
// it, in ascending order: the edges a scheduler follows when a task finishes.
func (d *DAG) Dependents() [][]int {
	out := make([][]int, len(d.Tasks))
	for i, deps := range d.DepIndices() {
		for _, j := range deps {
			out[j] = append(out[j], i)
		}
	}
	return out
}
