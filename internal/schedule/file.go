package schedule

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/orion-sched/orion/internal/dag"
)

// The wire form of a schedule is a DAG file (JSON or YAML, the schema a
// submission has) with a `schedule:` block beside name and tasks:
//
//	id: nightly-etl
//	schedule:
//	  cron: "0 2 * * *"
//	  timezone: Europe/Berlin
//	tasks: [...]

// HasSchedule reports whether a DAG file carries a top-level schedule
// block (contentType as dag.FormatOf reads it; "" sniffs).
func HasSchedule(body []byte, contentType string) bool {
	isJSON, err := formatIsJSON(body, contentType)
	if err != nil {
		return false
	}
	if isJSON {
		var top map[string]json.RawMessage
		if json.Unmarshal(body, &top) != nil {
			return false
		}
		_, ok := top["schedule"]
		return ok
	}
	var doc yaml.Node
	if yaml.Unmarshal(body, &doc) != nil || len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
		return false
	}
	m := doc.Content[0]
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == "schedule" {
			return true
		}
	}
	return false
}

func formatIsJSON(body []byte, contentType string) (bool, error) {
	f, err := dag.FormatOf(contentType)
	if err != nil {
		return false, err
	}
	switch f {
	case dag.FormatJSON:
		return true, nil
	case dag.FormatYAML:
		return false, nil
	}
	trimmed := bytes.TrimLeft(bytes.TrimPrefix(body, []byte("\xef\xbb\xbf")), " \t\r\n")
	return len(trimmed) > 0 && trimmed[0] == '{', nil
}

// Parse reads a DAG file with a schedule block into a normalized schedule:
// its id is the DAG's. It only decodes and normalizes: call Validate.
// Errors are *dag.ValidationError.
func Parse(body []byte, contentType string) (*Schedule, error) {
	body = bytes.TrimPrefix(body, []byte("\xef\xbb\xbf"))
	isJSON, err := formatIsJSON(body, contentType)
	if err != nil {
		return nil, err
	}
	var (
		spec    Spec
		rest    []byte
		restCT  string
		present bool
	)
	if isJSON {
		spec, rest, present, err = splitJSON(body)
		restCT = "application/json"
	} else {
		spec, rest, present, err = splitYAML(body)
		restCT = "application/yaml"
	}
	if err != nil {
		return nil, err
	}
	if !present {
		return nil, invalid("schedule: missing: a schedule is a DAG file with a schedule: block (cron, timezone, ...)")
	}
	d, err := dag.Parse(rest, restCT)
	if err != nil {
		return nil, err
	}
	d.Normalize()
	spec.Normalize()
	s := &Schedule{ID: d.ID, Spec: spec, DAG: *d}
	return s, nil
}

func invalid(msg string) *dag.ValidationError {
	return &dag.ValidationError{Code: CodeInvalid, Message: msg, Details: []string{msg}}
}

func parseErr(msg string) *dag.ValidationError {
	return &dag.ValidationError{Code: dag.CodeParse, Message: msg, Details: []string{msg}}
}

func splitJSON(body []byte) (spec Spec, rest []byte, present bool, err error) {
	var top map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&top); err != nil {
		// dag.Parse says where; it gets the body as is.
		_, perr := dag.Parse(body, "application/json")
		if perr == nil {
			perr = parseErr("invalid JSON: " + err.Error())
		}
		return spec, nil, false, perr
	}
	raw, present := top["schedule"]
	if !present {
		return spec, body, false, nil
	}
	delete(top, "schedule")
	sd := json.NewDecoder(bytes.NewReader(raw))
	sd.DisallowUnknownFields()
	if err := sd.Decode(&spec); err != nil {
		return spec, nil, true, parseErr("invalid schedule block: " + strings.TrimPrefix(err.Error(), "json: "))
	}
	rest, err = json.Marshal(top)
	return spec, rest, true, err
}

func splitYAML(body []byte) (spec Spec, rest []byte, present bool, err error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(body, &doc); err != nil || len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
		// Not a mapping: dag.Parse explains.
		_, perr := dag.Parse(body, "application/yaml")
		if perr == nil {
			perr = parseErr("invalid YAML: want a mapping with schedule, name and tasks")
		}
		return spec, nil, false, perr
	}
	m := doc.Content[0]
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value != "schedule" {
			continue
		}
		val := m.Content[i+1]
		if val.Kind != yaml.MappingNode {
			return spec, nil, true, parseErr(fmt.Sprintf("invalid YAML: line %d: schedule must be a mapping (cron, timezone, ...)", val.Line))
		}
		// Strict decoding, so that a misspelt field is an error: through
		// bytes, since a Node decodes without KnownFields.
		b, err := yaml.Marshal(val)
		if err != nil {
			return spec, nil, true, err
		}
		sd := yaml.NewDecoder(bytes.NewReader(b))
		sd.KnownFields(true)
		if err := sd.Decode(&spec); err != nil {
			msg := strings.TrimPrefix(err.Error(), "yaml: ")
			msg = strings.ReplaceAll(msg, "in type schedule.Spec", "in the schedule block")
			return spec, nil, true, parseErr(fmt.Sprintf("invalid schedule block (from line %d): %s", val.Line, msg))
		}
		m.Content = append(m.Content[:i:i], m.Content[i+2:]...)
		rest, err = yaml.Marshal(&doc)
		return spec, rest, true, err
	}
	return spec, body, false, nil
}
