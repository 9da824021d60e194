package dag

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	fastjson "github.com/segmentio/encoding/json"
	"go.yaml.in/yaml/v3"

	"github.com/orion-sched/orion/internal/jsonguard"
	"github.com/orion-sched/orion/internal/model"
)

// Format is the syntax of a submitted body.
type Format int

const (
	FormatSniff Format = iota // decide from the first byte
	FormatJSON
	FormatYAML
)

// rawDAG and rawTask are the wire schema. They differ from DAG and Task only
// where the wire needs more than the model: the seed-format aliases (type,
// dependencies) and a pointer for max_retries, because "absent" (default 3)
// and an explicit 0 (no retries) must not collapse before defaults apply.
type rawDAG struct {
	ID    string    `json:"id" yaml:"id"`
	Name  string    `json:"name" yaml:"name"`
	Tasks []rawTask `json:"tasks" yaml:"tasks"`

	MaxActiveTasks int `json:"max_active_tasks" yaml:"max_active_tasks"`

	// Handlers and notifications.
	OnSuccess *rawTask          `json:"on_success" yaml:"on_success"`
	OnFailure *rawTask          `json:"on_failure" yaml:"on_failure"`
	OnExit    *rawTask          `json:"on_exit" yaml:"on_exit"`
	Notify    []rawNotification `json:"notify" yaml:"notify"`

	Params model.Params `json:"params" yaml:"params"`
}

type rawTask struct {
	ID   string `json:"id" yaml:"id"`
	Name string `json:"name" yaml:"name"`
	Kind string `json:"kind" yaml:"kind"`
	Type string `json:"type" yaml:"type"` // seed alias of kind: bash|sh|shell|python

	Command     string            `json:"command" yaml:"command"`
	Interpreter string            `json:"interpreter" yaml:"interpreter"`
	Env         map[string]string `json:"env" yaml:"env"`
	EnvFrom     []model.SecretRef `json:"env_from" yaml:"env_from"`
	Workdir     string            `json:"workdir" yaml:"workdir"`

	URL          string `json:"url" yaml:"url"`
	Method       string `json:"method" yaml:"method"`
	ExpectStatus int    `json:"expect_status" yaml:"expect_status"`

	Duration model.Duration    `json:"duration" yaml:"duration"`
	Fail     model.Probability `json:"fail" yaml:"fail"`

	DependsOn    []string `json:"depends_on" yaml:"depends_on"`
	Dependencies []string `json:"dependencies" yaml:"dependencies"` // seed alias of depends_on

	Priority   int            `json:"priority" yaml:"priority"`
	MaxRetries *int           `json:"max_retries" yaml:"max_retries"`
	Timeout    model.Duration `json:"timeout" yaml:"timeout"`

	Pool     string            `json:"pool" yaml:"pool"`
	Selector map[string]string `json:"selector" yaml:"selector"`

	Pod podDoc `json:"pod" yaml:"pod"`
	// Trigger rule, condition and failure policy.
	TriggerRule       string `json:"trigger_rule" yaml:"trigger_rule"`
	When              string `json:"when" yaml:"when"`
	ContinueOnFailure bool   `json:"continue_on_failure" yaml:"continue_on_failure"`

	Outputs *model.HTTPOutputs `json:"outputs" yaml:"outputs"`

	ForEach   model.ForEach `json:"for_each" yaml:"for_each"`
	MaxActive int           `json:"max_active" yaml:"max_active"`
}

// rawNotification is a notify entry as written; MaxRetries is a pointer for
// the same reason as a task's.
type rawNotification struct {
	URL        string            `json:"url" yaml:"url"`
	On         []string          `json:"on" yaml:"on"`
	Method     string            `json:"method" yaml:"method"`
	Headers    map[string]string `json:"headers" yaml:"headers"`
	Timeout    model.Duration    `json:"timeout" yaml:"timeout"`
	MaxRetries *int              `json:"max_retries" yaml:"max_retries"`
}

// FormatOf maps a Content-Type header to a format. Types that clients send
// by accident (curl -d sends application/x-www-form-urlencoded) are sniffed
// rather than refused, since the body itself is unambiguous enough.
func FormatOf(contentType string) (Format, error) {
	if strings.TrimSpace(contentType) == "" {
		return FormatSniff, nil
	}
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return 0, &ValidationError{Code: CodeUnsupportedMedia, Message: fmt.Sprintf("content type %q: %v", contentType, err)}
	}
	switch {
	case mt == "application/json" || strings.HasSuffix(mt, "+json"):
		return FormatJSON, nil
	case mt == "application/yaml" || mt == "application/x-yaml" || mt == "text/yaml" ||
		mt == "text/x-yaml" || strings.HasSuffix(mt, "+yaml"):
		return FormatYAML, nil
	case mt == "text/plain" || mt == "application/octet-stream" || mt == "application/x-www-form-urlencoded":
		return FormatSniff, nil
	}
	return 0, &ValidationError{
		Code:    CodeUnsupportedMedia,
		Message: fmt.Sprintf("content type %q is not supported; use application/json or application/yaml", mt),
	}
}

// Parse decodes a DAG from JSON or YAML. It only decodes: call Normalize and
// Validate (or use Load) before trusting the result. The one default applied
// here is max_retries, because only the wire can tell "absent" from 0.
//
// Errors are *ValidationError with Code "parse_error", "invalid_dag" (for
// contradictory seed aliases) or "unsupported_media_type".
func Parse(body []byte, contentType string) (*model.DAG, error) {
	f, err := FormatOf(contentType)
	if err != nil {
		return nil, err
	}
	return parseFormat(body, f)
}

// ParseFile reads a DAG file; .json is JSON, .yaml/.yml is YAML, anything
// else is sniffed.
func ParseFile(path string) (*model.DAG, error) {
	body, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	f := FormatSniff
	switch strings.ToLower(filepath.Ext(path)) {
	case ".json":
		f = FormatJSON
	case ".yaml", ".yml":
		f = FormatYAML
	}
	d, err := parseFormat(body, f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return d, nil
}

// Load is Parse, Normalize and Validate in one call: what an API handler
// wants.
func Load(body []byte, contentType string, limits Limits) (*model.DAG, error) {
	d, err := Parse(body, contentType)
	if err != nil {
		return nil, err
	}
	d.Normalize()
	if err := Validate(d, limits); err != nil {
		return nil, err
	}
	return d, nil
}

func parseFormat(body []byte, f Format) (*model.DAG, error) {
	body = bytes.TrimPrefix(body, []byte("\xef\xbb\xbf")) // editors on Windows add a BOM
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, parseError("empty body: want a DAG in JSON or YAML")
	}
	if f == FormatSniff {
		f = FormatYAML
		if bytes.TrimLeft(body, " \t\r\n")[0] == '{' {
			f = FormatJSON
		}
	}
	var raw rawDAG
	var err error
	if f == FormatJSON {
		err = decodeJSON(body, &raw)
	} else {
		err = decodeYAML(body, &raw)
	}
	if err != nil {
		return nil, err
	}
	return raw.toDAG()
}

// decodeJSON decodes a DAG submitted as JSON. A body that the fast decoder
// (segmentio/encoding/json, as the store's records) reads whole, with no
// unknown field and nothing after the object, is taken from it: on a
// leader under load, encoding/json decoding the submissions was an eighth
// of its CPU. Anything else goes through encoding/json, whose errors the
// messages below are written for, and which decides what is refused; so
// does a body nested too deeply for the fast one (see jsonguard).
// FuzzParseDecodersAgree holds the two to the same result for any body
// the fast one accepts.
func decodeJSON(body []byte, raw *rawDAG) error {
	if !jsonguard.Shallow(body, jsonguard.MaxDepth) {
		return decodeJSONStrictly(body, raw)
	}
	var fast rawDAG
	if rest, err := fastjson.Parse(body, &fast, fastjson.DisallowUnknownFields); err == nil && len(bytes.TrimLeft(rest, " \t\r\n")) == 0 {
		*raw = fast
		return nil
	}
	return decodeJSONStrictly(body, raw)
}

// decodeJSONStrictly decodes with encoding/json, for its messages.
func decodeJSONStrictly(body []byte, raw *rawDAG) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(raw); err != nil {
		return parseError(jsonMessage(body, err))
	}
	// A second value after the DAG is almost always a concatenation mistake;
	// silently ignoring it would accept a DAG the user did not mean.
	if _, err := dec.Token(); err != io.EOF {
		return parseError("invalid JSON: unexpected data after the DAG object")
	}
	return nil
}

// rawTypeName matches the internal struct names that encoding/json puts in
// its messages; users never see those types, so they are replaced.
var rawTypeName = regexp.MustCompile(`(Go struct field )?(dag\.)?raw(DAG|Task)\.?`)

func jsonMessage(body []byte, err error) string {
	var syn *json.SyntaxError
	if errors.As(err, &syn) {
		line, col := position(body, syn.Offset)
		return fmt.Sprintf("invalid JSON at line %d, column %d: %s", line, col, syn.Error())
	}
	var typ *json.UnmarshalTypeError
	if errors.As(err, &typ) && typ.Field != "" {
		line, col := position(body, typ.Offset)
		return fmt.Sprintf("invalid JSON at line %d, column %d: field %s: cannot use %s as %s",
			line, col, typ.Field, typ.Value, typ.Type)
	}
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return "invalid JSON: unexpected end of input"
	}
	msg := strings.TrimPrefix(err.Error(), "json: ")
	return "invalid JSON: " + rawTypeName.ReplaceAllString(msg, "field ")
}

func position(body []byte, offset int64) (line, col int) {
	if offset > int64(len(body)) {
		offset = int64(len(body))
	}
	if offset < 0 {
		offset = 0
	}
	before := body[:offset]
	line = bytes.Count(before, []byte("\n")) + 1
	col = int(offset) - bytes.LastIndexByte(before, '\n')
	return line, col
}

var yamlUnknownField = regexp.MustCompile(`field (\S+) not found in type dag\.raw(DAG|Task)`)

func decodeYAML(body []byte, raw *rawDAG) error {
	dec := yaml.NewDecoder(bytes.NewReader(body))
	dec.KnownFields(true)
	if err := dec.Decode(raw); err != nil {
		if err == io.EOF {
			return parseError("empty YAML document: want a DAG")
		}
		return parseError(yamlMessage(err))
	}
	// Several documents in one body would otherwise be silently truncated to
	// the first.
	var extra yaml.Node
	if err := dec.Decode(&extra); err != io.EOF {
		return parseError("invalid YAML: more than one document; submit one DAG per request")
	}
	return nil
}

func yamlMessage(err error) string {
	var te *yaml.TypeError
	if errors.As(err, &te) {
		lines := make([]string, len(te.Errors))
		for i, e := range te.Errors {
			lines[i] = yamlUnknownField.ReplaceAllStringFunc(e, func(m string) string {
				sub := yamlUnknownField.FindStringSubmatch(m)
				where := "DAG"
				if sub[2] == "Task" {
					where = "task"
				}
				return fmt.Sprintf("unknown %s field %q", where, sub[1])
			})
		}
		return "invalid YAML: " + yamlTypeName.Replace(strings.Join(lines, "; "))
	}
	return "invalid YAML: " + strings.TrimPrefix(err.Error(), "yaml: ")
}

// yamlTypeName replaces the internal type names yaml puts in type errors.
var yamlTypeName = strings.NewReplacer("dag.rawDAG", "a DAG (a mapping with name and tasks)", "dag.rawTask", "a task (a mapping)")

func parseError(msg string) *ValidationError {
	return &ValidationError{Code: CodeParse, Message: msg, Details: []string{msg}}
}

// seedTypes maps the seed format's `type` values, plus the native kinds so a
// file may use `type: http` consistently, to a kind and interpreter.
var seedTypes = map[string]struct {
	kind        model.Kind
	interpreter string
}{
	"bash":    {model.KindShell, ""},
	"sh":      {model.KindShell, ""},
	"shell":   {model.KindShell, ""},
	"python":  {model.KindShell, "python3"},
	"python3": {model.KindShell, "python3"},
	"http":    {model.KindHTTP, ""},
	"noop":    {model.KindNoop, ""},
	"sleep":   {model.KindSleep, ""},
}

func (r *rawDAG) toDAG() (*model.DAG, error) {
	d := &model.DAG{ID: r.ID, Name: r.Name, Tasks: make([]model.Task, len(r.Tasks)), MaxActiveTasks: r.MaxActiveTasks, Params: r.Params}
	var p problems
	for i := range r.Tasks {
		d.Tasks[i] = r.Tasks[i].toTask(&p, taskLabel{i: i, id: r.Tasks[i].ID, name: r.Tasks[i].Name})
	}
	for _, h := range []struct {
		raw *rawTask
		to  **model.Task
		id  string
	}{{r.OnSuccess, &d.OnSuccess, model.OnSuccessID}, {r.OnFailure, &d.OnFailure, model.OnFailureID}, {r.OnExit, &d.OnExit, model.OnExitID}} {
		if h.raw != nil {
			t := h.raw.toTask(&p, handlerLabel(h.id))
			*h.to = &t
		}
	}
	for i := range r.Notify {
		n := &r.Notify[i]
		x := model.Notification{URL: n.URL, On: n.On, Method: n.Method, Headers: n.Headers, Timeout: n.Timeout,
			MaxRetries: model.DefaultMaxRetries}
		if n.MaxRetries != nil {
			x.MaxRetries = *n.MaxRetries
		}
		d.Notify = append(d.Notify, x)
	}
	if err := p.err(CodeInvalid); err != nil {
		return nil, err
	}
	return d, nil
}

// toTask converts one task as written, reporting contradictory seed aliases.
func (rt *rawTask) toTask(p *problems, label taskLabel) model.Task {
	t := model.Task{
		ID: rt.ID, Name: rt.Name, Kind: model.Kind(rt.Kind),
		Command: rt.Command, Interpreter: rt.Interpreter, Env: rt.Env, EnvFrom: rt.EnvFrom, Workdir: rt.Workdir,
		URL: rt.URL, Method: rt.Method, ExpectStatus: rt.ExpectStatus,
		Duration: rt.Duration, Fail: rt.Fail,
		DependsOn: rt.DependsOn, Priority: rt.Priority,
		MaxRetries: model.DefaultMaxRetries, Timeout: rt.Timeout,
		Pool: rt.Pool, Selector: rt.Selector, Outputs: rt.Outputs,
		TriggerRule: model.TriggerRule(rt.TriggerRule), When: rt.When, ContinueOnFailure: rt.ContinueOnFailure,
		Pod:     rt.Pod.canonical(),
		ForEach: rt.ForEach, MaxActive: rt.MaxActive,
	}
	if rt.MaxRetries != nil {
		t.MaxRetries = *rt.MaxRetries
	}
	if rt.Type != "" {
		st, ok := seedTypes[strings.ToLower(strings.TrimSpace(rt.Type))]
		switch {
		case !ok:
			p.addf("%s: unknown type %q (want bash, sh, shell, python, http, noop or sleep)", label, rt.Type)
		case rt.Kind != "" && model.Kind(strings.ToLower(strings.TrimSpace(rt.Kind))) != st.kind:
			p.addf("%s: kind %q and type %q disagree; give only one", label, rt.Kind, rt.Type)
		default:
			t.Kind = st.kind
			if t.Interpreter == "" {
				t.Interpreter = st.interpreter
			}
		}
	}
	if rt.DependsOn != nil && rt.Dependencies != nil {
		p.addf("%s: give depends_on or dependencies, not both", label)
	} else if rt.Dependencies != nil {
		t.DependsOn = rt.Dependencies
	}
	return t
}

// taskLabel names a task in messages before ids are known to be valid. It
// is formatted only when a message is: every standby validates every task
// of every DAG record it decodes, and formatting a label per task up front
// was a tenth of a standby's CPU.
type taskLabel struct {
	i        int
	id, name string
	handler  string // the field of a DAG's handler (on_exit, ...)
}

// handlerLabel names a DAG's handler by its field.
func handlerLabel(field string) taskLabel { return taskLabel{i: -1, handler: field} }

func (l taskLabel) String() string {
	switch {
	case l.handler != "":
		return l.handler
	case l.id != "":
		return fmt.Sprintf("task %q", l.id)
	case strings.TrimSpace(l.name) != "":
		return fmt.Sprintf("task %q", strings.TrimSpace(l.name))
	}
	return fmt.Sprintf("task #%d", l.i+1)
}
