package model

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"

	"go.yaml.in/yaml/v3"
)

// ForEach is a task's `for_each:` (run-time fan-out, issue 29): what its
// mapped instances iterate over, kept as compact JSON. It is either a JSON
// array written in the DAG file (a literal), or a string holding one
// `{{ expression }}` that yields an array when the task's dependencies
// have ended (a parameter, an upstream task's output). A task with one is
// a map group: the core evaluates it once, commits the items in the
// group's record, and runs one instance per item (core/mapgroup.go).
type ForEach json.RawMessage

// Defaults and bounds of a fan-out.
const (
	// DefaultMaxItems is how many instances one map group may have unless
	// the server's max_items says otherwise.
	DefaultMaxItems = 10_000
	// MaxMaxItems is the most max_items may be set to.
	MaxMaxItems = 1_000_000
	// MaxForEachBytes bounds a for_each as written (a literal's items
	// are stored in the DAG's record).
	MaxForEachBytes = 64 << 10
)

// IsSet reports whether the task maps over items.
func (f ForEach) IsSet() bool { return len(f) > 0 && string(f) != "null" }

// Literal reports whether the items are written in the DAG file (an array).
func (f ForEach) Literal() bool { return len(f) > 0 && f[0] == '[' }

// Expression returns the template of a for_each given as a string.
func (f ForEach) Expression() (string, bool) {
	if len(f) == 0 || f[0] != '"' {
		return "", false
	}
	var s string
	if json.Unmarshal(f, &s) != nil {
		return "", false
	}
	return s, true
}

// MarshalJSON writes the value as kept.
func (f ForEach) MarshalJSON() ([]byte, error) {
	if len(f) == 0 {
		return []byte("null"), nil
	}
	return f, nil
}

// UnmarshalJSON keeps any JSON value, compacted; Validate says what is not
// an array or a string.
func (f *ForEach) UnmarshalJSON(b []byte) error {
	if string(bytes.TrimSpace(b)) == "null" {
		*f = nil
		return nil
	}
	c, err := compactJSON(b)
	if err != nil {
		return err
	}
	*f = ForEach(c)
	return nil
}

// UnmarshalYAML reads a YAML sequence (the literal items) or a scalar (an
// expression), as JSON.
func (f *ForEach) UnmarshalYAML(value *yaml.Node) error {
	if value.ShortTag() == "!!null" {
		*f = nil
		return nil
	}
	var x any
	if err := value.Decode(&x); err != nil {
		return fmt.Errorf("line %d: for_each: %v", value.Line, err)
	}
	if value.Kind == yaml.ScalarNode {
		x = value.Value // "{{ ... }}" as text, whatever YAML makes of it
	}
	b, err := marshalJSON(x)
	if err != nil {
		return fmt.Errorf("line %d: for_each: %v (object keys must be strings)", value.Line, err)
	}
	*f = ForEach(b)
	return nil
}

// SplitItems splits a JSON array into its elements, each compact JSON
// sharing raw's bytes (no copy). It fails on anything but an array.
func SplitItems(raw []byte) ([]json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if d, ok := tok.(json.Delim); !ok || d != '[' {
		return nil, fmt.Errorf("not an array")
	}
	var out []json.RawMessage
	for dec.More() {
		start := dec.InputOffset()
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return nil, err
		}
		end := dec.InputOffset()
		item := bytes.TrimLeft(raw[start:end], " \t\r\n,")
		out = append(out, item)
	}
	return out, nil
}

// InstanceID names instance i of map group id: "process[3]". '[' is not
// valid in a task id, so it never clashes with one.
func InstanceID(group string, i int) string {
	return group + "[" + strconv.Itoa(i) + "]"
}

// ParseInstanceID splits "process[3]" into its group and index; ok is false
// for any other id.
func ParseInstanceID(id string) (group string, i int, ok bool) {
	n := len(id)
	if n < 4 || id[n-1] != ']' {
		return "", 0, false
	}
	open := bytes.LastIndexByte([]byte(id), '[')
	if open <= 0 {
		return "", 0, false
	}
	digits := id[open+1 : n-1]
	if digits == "" || len(digits) > 9 || (len(digits) > 1 && digits[0] == '0') {
		return "", 0, false
	}
	v, err := strconv.Atoi(digits)
	if err != nil || v < 0 {
		return "", 0, false
	}
	return id[:open], v, true
}
