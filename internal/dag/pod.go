package dag

import (
	"bytes"
	"encoding/json"
	"fmt"

	"go.yaml.in/yaml/v3"

	"github.com/orion-sched/orion/internal/kube/podspec"
)

// podDoc is a task's `pod` object as submitted, kept as JSON whichever
// syntax carried it: the model stores it as JSON (internal/kube/podspec
// reads it). From YAML it is decoded as generic values, so integers stay
// integers, then written as JSON.
type podDoc struct{ raw json.RawMessage }

func (p *podDoc) UnmarshalJSON(b []byte) error {
	if bytes.Equal(bytes.TrimSpace(b), []byte("null")) {
		p.raw = nil
		return nil
	}
	p.raw = append(json.RawMessage(nil), b...)
	return nil
}

func (p *podDoc) UnmarshalYAML(n *yaml.Node) error {
	var v any
	if err := n.Decode(&v); err != nil {
		return err
	}
	if v == nil {
		p.raw = nil
		return nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		// Mapping keys that are not strings, typically.
		return fmt.Errorf("line %d: pod: %v", n.Line, err)
	}
	p.raw = b
	return nil
}

// canonical is the object in podspec's one form when it decodes, else as
// given, for Validate to report.
func (p podDoc) canonical() json.RawMessage {
	if len(p.raw) == 0 {
		return nil
	}
	if c, err := podspec.Canonical(p.raw); err == nil {
		return c
	}
	var buf bytes.Buffer
	if json.Compact(&buf, p.raw) == nil {
		return buf.Bytes()
	}
	return p.raw
}
