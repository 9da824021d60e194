// Package dag defines the DAG a user submits: its schema (JSON and YAML share
// one), parsing, defaults and validation. Everything here runs before anything
// is written to etcd, so a DAG that reaches the scheduler is known to be
// well formed: ids are unique, dependencies exist and there is no cycle.
package dag

import (
	"encoding/json"
	"fmt"
	"math"
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
)

// Defaults applied by Normalize where a task leaves a field empty.
const (
	DefaultMaxRetries = 3
	DefaultTimeout    = 5 * time.Minute
	DefaultMaxTasks   = 1000
)

// DAG is a workflow as submitted, after Normalize.
type DAG struct {
	// ID is optional on submit; a client-chosen id makes submission idempotent.
	ID    string `json:"id,omitempty"`
	Name  string `json:"name"`
	Tasks []Task `json:"tasks"`
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
	Workdir     string            `json:"workdir,omitempty"`

	// http
	URL          string `json:"url,omitempty"`
	Method       string `json:"method,omitempty"`
	ExpectStatus int    `json:"expect_status,omitempty"`

	// sleep
	Duration Duration `json:"duration,omitempty"`
	// Fail is the probability (0..1) that a sleep task fails; YAML/JSON `true` means 1.
	Fail Probability `json:"fail,omitempty"`

	DependsOn  []string `json:"depends_on,omitempty"`
	Priority   int      `json:"priority"`    // lower runs first; 0 is the most urgent
	MaxRetries int      `json:"max_retries"` // retries after the first attempt
	Timeout    Duration `json:"timeout"`     // per attempt
}

// Duration is a time.Duration that reads "1m30s" (Go syntax) or a number of
// seconds, and writes Go syntax, so etcd values stay readable.
type Duration time.Duration

// D returns the value as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

func (d *Duration) UnmarshalJSON(b []byte) error {
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
	if secs, err := strconv.ParseFloat(str, 64); err == nil {
		return d.setSeconds(secs)
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
