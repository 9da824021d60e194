package model

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"go.yaml.in/yaml/v3"
)

// Params are a DAG's parameters, name → JSON value. In a DAG file they are
// declarations: a default, or null for a parameter the submission must set.
// In a stored DAG record they are the values its runs use (defaults and
// overrides resolved), so the record says by itself what its tasks read,
// and two submissions with the same id and other values are a conflict.
// Values are kept as compact JSON: equal values compare equal.
type Params map[string]json.RawMessage

// MaxParamsBytes bounds a DAG's parameters as they encode (names and
// values): they are written into its record and read by every template.
const MaxParamsBytes = 64 << 10

// ValidName reports whether s may name a parameter or an output: an
// identifier of 1-128 bytes ([A-Za-z_][A-Za-z0-9_]*), so that a template
// reads it as params.s or tasks.t.outputs.s. Checked by hand: outputs are
// checked on the leader for every success that carries some.
func ValidName(s string) bool {
	if len(s) == 0 || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '_', 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z':
		case '0' <= c && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// NameRule says what ValidName accepts, for error messages.
const NameRule = "1-128 letters, digits or '_', not starting with a digit"

// UnmarshalJSON keeps each value as compact JSON.
func (p *Params) UnmarshalJSON(b []byte) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	if m == nil {
		*p = nil
		return nil
	}
	out := make(Params, len(m))
	for k, v := range m {
		c, err := compactJSON(v)
		if err != nil {
			return fmt.Errorf("param %s: %v", k, err)
		}
		out[k] = c
	}
	*p = out
	return nil
}

// UnmarshalYAML reads a mapping of YAML values, each converted to JSON: an
// empty value (day:) or null declares a required parameter.
func (p *Params) UnmarshalYAML(value *yaml.Node) error {
	if value.Kind != yaml.MappingNode {
		if value.ShortTag() == "!!null" {
			*p = nil
			return nil
		}
		return fmt.Errorf("line %d: params: want a mapping of names to default values", value.Line)
	}
	out := make(Params, len(value.Content)/2)
	for i := 0; i+1 < len(value.Content); i += 2 {
		k, v := value.Content[i], value.Content[i+1]
		var x any
		if err := v.Decode(&x); err != nil {
			return fmt.Errorf("line %d: param %s: %v", v.Line, k.Value, err)
		}
		b, err := marshalJSON(x)
		if err != nil {
			return fmt.Errorf("line %d: param %s: %v (object keys must be strings)", v.Line, k.Value, err)
		}
		out[k.Value] = b
	}
	*p = out
	return nil
}

// Names lists the parameters, sorted.
func (p Params) Names() []string {
	out := make([]string, 0, len(p))
	for k := range p {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Bytes is the size of the parameters as their record encodes them.
func (p Params) Bytes() int {
	if len(p) == 0 {
		return 0
	}
	n := 1
	for k, v := range p {
		n += len(k) + 4 + len(v)
	}
	return n
}

// Values decodes the parameters for templates (JSON numbers as float64); a
// value that does not decode (validation refuses it) is left out.
func (p Params) Values() map[string]any {
	out := make(map[string]any, len(p))
	for k, v := range p {
		var x any
		if json.Unmarshal(v, &x) == nil {
			out[k] = x
		}
	}
	return out
}

// IsNull reports whether a value declares a required parameter.
func IsNull(v json.RawMessage) bool { return len(v) == 0 || string(v) == "null" }

// ParamValue reads the value an override (-p name=value, ?param=name=value)
// gives a parameter declared with declared as its default: a string when
// the default is one (so that version=1.10 stays "1.10"), otherwise JSON
// when it parses as JSON (3, true, ["a","b"]) and a string when it does not.
func ParamValue(declared json.RawMessage, text string) json.RawMessage {
	if len(declared) == 0 || declared[0] != '"' {
		if c, err := compactJSON([]byte(text)); err == nil {
			return c
		}
	}
	b, _ := marshalJSON(text) // a string always encodes
	return b
}

// ScheduledRun is what a scheduled run stands for: its schedule, its tick
// and its data interval [IntervalStart, IntervalEnd), the tick before this
// one to this one (Airflow's data interval). Templates read it as run.tick,
// run.interval_start and run.interval_end.
type ScheduledRun struct {
	Schedule      string    `json:"schedule"`
	Tick          time.Time `json:"tick"`
	IntervalStart time.Time `json:"interval_start"`
	IntervalEnd   time.Time `json:"interval_end"`
}

// Env is what templates read as run.*: the schedule, the tick and the data
// interval (RFC 3339, UTC); nothing for a run no schedule started.
func (s *ScheduledRun) Env() map[string]any {
	if s == nil {
		return map[string]any{}
	}
	return map[string]any{
		"schedule":       s.Schedule,
		"tick":           s.Tick.UTC().Format(time.RFC3339),
		"interval_start": s.IntervalStart.UTC().Format(time.RFC3339),
		"interval_end":   s.IntervalEnd.UTC().Format(time.RFC3339),
	}
}

// The parameters a schedule sets on each run when its DAG declares them.
const (
	ParamTick          = "tick"
	ParamIntervalStart = "interval_start"
	ParamIntervalEnd   = "interval_end"
)

// compactJSON returns b as compact JSON, or an error when it is not one
// JSON value.
func compactJSON(b []byte) (json.RawMessage, error) {
	var buf bytes.Buffer
	if err := json.Compact(&buf, bytes.TrimSpace(b)); err != nil {
		return nil, fmt.Errorf("not a JSON value: %v", err)
	}
	if buf.Len() == 0 {
		return nil, fmt.Errorf("not a JSON value: empty")
	}
	return buf.Bytes(), nil
}

// marshalJSON encodes v without HTML escaping, as the store writes records.
func marshalJSON(v any) (json.RawMessage, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}
