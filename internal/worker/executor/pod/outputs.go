package pod

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// A pod task publishes outputs as every task does, by writing key=value
// lines or a JSON object to the file named by ORION_OUTPUTS. For a pod
// that file is the container's termination message (/dev/termination-log):
// Kubernetes copies it into the pod's status when the container ends,
// bounded to 4 KiB, and the worker reads it there, so outputs need neither
// a volume nor the log. (Task outputs, model.Result.Outputs, are being
// added beside pod tasks: until then the worker notes in the task's log
// which outputs the pod wrote.)

// parseOutputs reads a termination message as outputs: a JSON object of
// strings, or key=value lines (blank lines and lines starting with # are
// skipped).
func parseOutputs(msg string) (map[string]string, error) {
	msg = strings.TrimSpace(msg)
	if msg == "" {
		return nil, nil
	}
	if strings.HasPrefix(msg, "{") {
		var raw map[string]any
		if err := json.Unmarshal([]byte(msg), &raw); err != nil {
			return nil, fmt.Errorf("outputs: not a JSON object: %v", err)
		}
		out := make(map[string]string, len(raw))
		for k, v := range raw {
			if s, ok := v.(string); ok {
				out[k] = s
			} else {
				b, _ := json.Marshal(v)
				out[k] = string(b)
			}
		}
		return out, nil
	}
	out := map[string]string{}
	for i, line := range strings.Split(msg, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || strings.TrimSpace(k) == "" {
			return nil, fmt.Errorf("outputs: line %d: want key=value", i+1)
		}
		out[strings.TrimSpace(k)] = v
	}
	return out, nil
}

// outputs notes in the attempt's log what the container wrote to
// ORION_OUTPUTS.
func (f *follower) outputs(msg string) {
	kv, err := parseOutputs(msg)
	switch {
	case err != nil:
		f.o.note("%v", err)
	case len(kv) > 0:
		keys := make([]string, 0, len(kv))
		for k := range kv {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		f.o.note("outputs (ORION_OUTPUTS): %s", strings.Join(keys, ", "))
	}
}
