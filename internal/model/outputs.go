package model

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/orion-sched/orion/internal/jsonguard"
)

// Outputs are what a task hands to the tasks downstream: name → JSON value.
// They travel in a successful Result, are committed in the same task record
// as the success, and are read by templates as tasks.<id>.outputs.<name>.
type Outputs = map[string]json.RawMessage

// Bounds of a task's outputs.
const (
	// DefaultMaxOutputBytes bounds a task's outputs as they encode (the
	// JSON object of names and values) unless the server's
	// max_output_bytes says otherwise.
	DefaultMaxOutputBytes = 64 << 10
	// MaxMaxOutputBytes is the most max_output_bytes may be: outputs are
	// written into a task record, which one etcd request must carry.
	MaxMaxOutputBytes = 1 << 20
	// MaxOutputDepth bounds how deeply an output value nests: records are
	// refused past jsonguard.MaxDepth, and a record holds its outputs two
	// levels down (API views a few more).
	MaxOutputDepth = 16
)

// OutputsBytes is the size of o as a record encodes it: a JSON object of
// names and values.
func OutputsBytes(o Outputs) int {
	if len(o) == 0 {
		return 0
	}
	n := 1 // {
	for k, v := range o {
		n += len(k) + 4 + len(v) // "k":v and a comma or }
	}
	return n
}

// OutputsError says why outputs are refused: the attempt that produced
// them fails with it.
type OutputsError struct{ Msg string }

func (e *OutputsError) Error() string { return e.Msg }

func outputsErr(format string, args ...any) error {
	return &OutputsError{Msg: fmt.Sprintf(format, args...)}
}

// CheckOutputs returns o in the form a task record holds, or an error that
// says why it cannot hold it: a name that is not an identifier, a value
// that is not JSON, nests deeper than MaxOutputDepth, or all of them
// encoding to more than max bytes (0: DefaultMaxOutputBytes). Outputs are
// never cut: a task downstream would read a wrong value. Values are
// compacted, so the record writes them as they are counted here. It is
// what the leader checks a worker's outputs with, where they enter.
func CheckOutputs(o Outputs, max int) (Outputs, error) {
	if len(o) == 0 {
		return nil, nil
	}
	if max <= 0 {
		max = DefaultMaxOutputBytes
	}
	// The names first, sorted, so that the error names the same output
	// whatever the map's order.
	names := make([]string, 0, len(o))
	total := 1
	for k, v := range o {
		names = append(names, k)
		total += len(k) + 4 + len(v)
	}
	sort.Strings(names)
	for _, k := range names {
		if !ValidName(k) {
			return nil, outputsErr("output name %q is invalid: want %s", CutHead(k, 64), NameRule)
		}
	}
	if total > max {
		return nil, outputsErr("outputs of %d bytes exceed max_output_bytes (%d): not published, the attempt fails", total, max)
	}
	out := make(Outputs, len(o))
	for _, k := range names {
		v := o[k]
		if !utf8.Valid(v) {
			return nil, outputsErr("output %s is not valid UTF-8", k)
		}
		if !jsonguard.Shallow(v, MaxOutputDepth) {
			return nil, outputsErr("output %s nests more than %d levels deep", k, MaxOutputDepth)
		}
		c, err := compactJSON(v)
		if err != nil {
			return nil, outputsErr("output %s is %v", k, err)
		}
		out[k] = c
	}
	return out, nil
}

// ParseOutputs reads what a task wrote to publish its outputs (the file
// named by ORION_OUTPUTS), in one of two forms:
//
//   - one JSON object, name → any JSON value:
//     {"rows": 42, "partitions": ["a", "b"]}
//   - lines name=value, each value a string (the rest of the line), and
//     name<<DELIM ... DELIM for a value of several lines (the form of
//     GitHub Actions' $GITHUB_OUTPUT); blank lines are skipped and a name
//     given twice keeps its last value.
//
// data must be at most max bytes (0: DefaultMaxOutputBytes), and so must
// the outputs as they encode (CheckOutputs). Every executor that publishes
// outputs (shell, pod) reads them with this one function.
func ParseOutputs(data []byte, max int) (Outputs, error) {
	if max <= 0 {
		max = DefaultMaxOutputBytes
	}
	if len(data) > max {
		return nil, outputsErr("outputs file of %d bytes exceeds max_output_bytes (%d): not published, the attempt fails", len(data), max)
	}
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 {
		return nil, nil
	}
	var o Outputs
	if trimmed[0] == '{' {
		if !jsonguard.Shallow(trimmed, MaxOutputDepth+1) {
			return nil, outputsErr("outputs nest more than %d levels deep", MaxOutputDepth)
		}
		dec := json.NewDecoder(bytes.NewReader(trimmed))
		if err := dec.Decode(&o); err != nil {
			return nil, outputsErr("outputs file is not a JSON object: %v", err)
		}
		if dec.More() {
			return nil, outputsErr("outputs file holds more than one JSON object")
		}
	} else {
		var err error
		if o, err = parseLines(string(data)); err != nil {
			return nil, err
		}
	}
	return CheckOutputs(o, max)
}

// parseLines reads the name=value form.
func parseLines(s string) (Outputs, error) {
	o := make(Outputs)
	lines := strings.Split(s, "\n")
	for i := 0; i < len(lines); i++ {
		line := strings.TrimSuffix(lines[i], "\r")
		if strings.TrimSpace(line) == "" {
			continue
		}
		eq := strings.IndexByte(line, '=')
		heredoc := strings.Index(line, "<<")
		if heredoc > 0 && (eq < 0 || heredoc < eq) {
			name, delim := line[:heredoc], strings.TrimSpace(line[heredoc+2:])
			if delim == "" {
				return nil, outputsErr("outputs line %d: %s<< needs a delimiter (name<<EOF, the value's lines, EOF)", i+1, CutHead(name, 64))
			}
			var value []string
			j := i + 1
			for ; j < len(lines) && strings.TrimSuffix(lines[j], "\r") != delim; j++ {
				value = append(value, strings.TrimSuffix(lines[j], "\r"))
			}
			if j == len(lines) {
				return nil, outputsErr("outputs line %d: %s<<%s is not closed by a line %s", i+1, CutHead(name, 64), CutHead(delim, 64), CutHead(delim, 64))
			}
			if err := setOutput(o, i, name, strings.Join(value, "\n")); err != nil {
				return nil, err
			}
			i = j
			continue
		}
		if eq <= 0 {
			return nil, outputsErr("outputs line %d: want name=value, name<<DELIM or a JSON object, got %q", i+1, CutHead(line, 64))
		}
		if err := setOutput(o, i, line[:eq], line[eq+1:]); err != nil {
			return nil, err
		}
	}
	return o, nil
}

func setOutput(o Outputs, line int, name, value string) error {
	if !ValidName(name) {
		return outputsErr("outputs line %d: name %q is invalid: want %s", line+1, CutHead(name, 64), NameRule)
	}
	b, err := marshalJSON(value)
	if err != nil {
		return outputsErr("outputs line %d: %v", line+1, err)
	}
	o[name] = b
	return nil
}

// OutputValue encodes a value as an output holds it: JSON, without HTML
// escaping (as records are written).
func OutputValue(v any) (json.RawMessage, error) { return marshalJSON(v) }
