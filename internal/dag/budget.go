package dag

import (
	"fmt"

	"github.com/orion-sched/orion/internal/model"
)

// Per-field limits (model's: the core checks rendered templates against
// the same).
const (
	MaxCommandBytes = model.MaxCommandBytes // a shell task's command
	MaxEnvBytes     = model.MaxEnvBytes     // a task's environment: names, values and "=" together
	MaxURLBytes     = model.MaxURLBytes     // an http task's URL
	MaxPathBytes    = model.MaxPathBytes    // workdir and interpreter (PATH_MAX)
)

// DefaultMaxDecodedBytes bounds the text of a DAG when Limits.MaxDecodedBytes
// is zero: twice the default request body (kit.DefaultMaxBodyBytes).
const DefaultMaxDecodedBytes = 64 << 20

// checkBudget refuses a DAG whose decoded text exceeds the budget, before
// anything else looks at it (listing per-task problems of a DAG refused for
// its size would only cost time on a hostile input).
func checkBudget(d *model.DAG, limit int64) *ValidationError {
	if limit <= 0 {
		limit = DefaultMaxDecodedBytes
	}
	if n := d.DecodedBytes(); n > limit {
		msg := fmt.Sprintf("the DAG decodes to %d bytes of text (ids, names, commands, env, urls, dependencies); the limit is %d. "+
			"YAML aliases count each time they are used", n, limit)
		return &ValidationError{Code: CodeTooLarge, Message: msg, Details: []string{msg}}
	}
	return nil
}

// checkFieldSizes reports fields over their per-field limit.
func checkFieldSizes(p *problems, label taskLabel, t *model.Task) {
	over := func(field string, n, limit int) {
		if n > limit {
			p.addf("%s: %s is %d bytes; the limit is %d", label, field, n, limit)
		}
	}
	over("command", len(t.Command), MaxCommandBytes)
	over("env", t.EnvBytes(), MaxEnvBytes)
	over("url", len(t.URL), MaxURLBytes)
	over("workdir", len(t.Workdir), MaxPathBytes)
	over("interpreter", len(t.Interpreter), MaxPathBytes)
}
