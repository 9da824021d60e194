package dag

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/orion-sched/orion/internal/expr"
	"github.com/orion-sched/orion/internal/kube/podspec"
	"github.com/orion-sched/orion/internal/model"
)

// Error codes of ValidationError; the API returns them verbatim, so clients
// may switch on them.
const (
	CodeParse            = "parse_error"            // not JSON/YAML, or not the schema
	CodeUnsupportedMedia = "unsupported_media_type" // Content-Type we do not read
	CodeInvalid          = "invalid_dag"            // any rule other than the two below
	CodeCycle            = "cycle"                  // the only problems are cycles
	CodeTooMany          = "too_many_tasks"         // more than Limits.MaxTasks
	CodeTooLarge         = "dag_too_large"          // over the decoded-size budget, or larger than etcd stores
)

// Bounds on values. They exist to catch typos (a timeout of 5000h, a
// priority of 1e9 meant as a timestamp) rather than to protect resources.
const (
	MaxTimeout     = 24 * time.Hour
	MaxDuration    = 24 * time.Hour
	MaxRetriesCap  = 100
	MaxPriority    = 1_000_000
	MaxNameLen     = 256
	maxDetails     = 100 // beyond this a list of problems stops being read
	maxCycles      = 5
	cycleEnds      = 9 // ids shown at each end of a long cycle
	messageDetails = 5 // details folded into Message (and so into Error())
)

// ValidationError reports every problem found in a submission, one per line
// in Details, so a user fixes a file in one round trip instead of one per
// mistake.
type ValidationError struct {
	Code    string   `json:"code"`
	Message string   `json:"message"`
	Details []string `json:"details,omitempty"`
}

func (e *ValidationError) Error() string { return e.Message }

// Limits bounds what Validate accepts; zero values mean the defaults.
type Limits struct {
	MaxTasks int // 0: DefaultMaxTasks
	// MaxDecodedBytes bounds DecodedBytes (0: DefaultMaxDecodedBytes). The
	// API sets twice its body limit.
	MaxDecodedBytes int64
	// Stored skips the per-field size limits, for records read back from
	// etcd: an earlier version may have accepted larger fields.
	Stored bool
	// MaxItems bounds a for_each literal's items (0: model.DefaultMaxItems);
	// the server's max_items.
	MaxItems int
}

// problems collects Details while validating.
type problems struct {
	lines  []string
	cycles int // how many of lines are cycle reports
	more   int // problems dropped past maxDetails
}

func (p *problems) addf(format string, args ...any) {
	if len(p.lines) >= maxDetails {
		p.more++
		return
	}
	p.lines = append(p.lines, fmt.Sprintf(format, args...))
}

func (p *problems) err(code string) *ValidationError {
	if len(p.lines) == 0 {
		return nil
	}
	if p.cycles == len(p.lines) && code == CodeInvalid {
		code = CodeCycle
	}
	details := p.lines
	if p.more > 0 {
		details = append(details, fmt.Sprintf("... and %d more problems", p.more))
	}
	msg := details[0]
	if len(details) > 1 {
		shown := details
		if len(shown) > messageDetails {
			shown = shown[:messageDetails]
		}
		msg = fmt.Sprintf("%d problems: %s", len(p.lines)+p.more, strings.Join(shown, "; "))
		if len(details) > messageDetails {
			msg += "; ..."
		}
	}
	return &ValidationError{Code: code, Message: msg, Details: details}
}

// ValidID reports whether s may be used as a DAG or task id: 1-128 bytes of
// [A-Za-z0-9._-], starting with a letter or digit. That keeps an id usable
// as a single etcd key segment and URL path segment: no '/', no leading dot
// (so never "." or ".."). It is checked by hand, not by a regular
// expression, because every standby checks every task id of every DAG
// record it decodes, and the regexp was a tenth of a standby's CPU.
func ValidID(s string) bool {
	if len(s) == 0 || len(s) > 128 || !alnum(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		if c := s[i]; !alnum(c) && c != '.' && c != '_' && c != '-' {
			return false
		}
	}
	return true
}

func alnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// Validate checks a normalized DAG and returns a *ValidationError listing
// every problem, or nil. Call Normalize first: Validate does not modify d and
// reports an empty kind, for instance, as an error.
func Validate(d *model.DAG, limits Limits) error {
	if d == nil {
		return &ValidationError{Code: CodeInvalid, Message: "no DAG given"}
	}
	maxTasks := limits.MaxTasks
	if maxTasks <= 0 {
		maxTasks = DefaultMaxTasks
	}
	// Checked first and alone: listing per-task problems of a DAG that is
	// refused for its size anyway would only cost time on a big input.
	if len(d.Tasks) > maxTasks {
		msg := fmt.Sprintf("dag has %d tasks; the limit is %d (max_tasks_per_dag)", len(d.Tasks), maxTasks)
		return &ValidationError{Code: CodeTooMany, Message: msg, Details: []string{msg}}
	}
	if err := checkBudget(d, limits.MaxDecodedBytes); err != nil {
		return err
	}

	var p problems
	if d.ID != "" && !ValidID(d.ID) {
		p.addf("dag id %q is invalid: want 1-128 letters, digits, '.', '_' or '-', starting with a letter or digit", d.ID)
	}
	switch {
	case strings.TrimSpace(d.Name) == "":
		p.addf("dag name is required (give name or id; an Idempotency-Key header gives both)")
	case len(d.Name) > MaxNameLen:
		p.addf("dag name is longer than %d bytes", MaxNameLen)
	}
	if len(d.Tasks) == 0 {
		p.addf("dag has no tasks; want at least one")
	}
	if d.MaxActiveTasks < 0 || d.MaxActiveTasks > maxTasks {
		p.addf("max_active_tasks %d is out of range: want 0 (no limit) to %d", d.MaxActiveTasks, maxTasks)
	}

	validateParams(&p, d, limits.Stored)

	index := make(map[string]int, len(d.Tasks))
	for i := range d.Tasks {
		t := &d.Tasks[i]
		label := taskLabel{i: i, id: t.ID, name: t.Name}
		switch {
		case t.ID == "":
			p.addf("%s: id is required (give id or name)", label)
		case !ValidID(t.ID):
			p.addf("%s: id is invalid: want 1-128 letters, digits, '.', '_' or '-', starting with a letter or digit", label)
		default:
			if j, dup := index[t.ID]; dup {
				p.addf("%s: duplicate id (tasks #%d and #%d)", label, j+1, i+1)
			} else {
				index[t.ID] = i
			}
		}
		validateTask(&p, label, t)
		if !limits.Stored {
			checkFieldSizes(&p, label, t)
		}
	}

	for i := range d.Tasks {
		t := &d.Tasks[i]
		label := taskLabel{i: i, id: t.ID, name: t.Name}
		// Repeats are found by scanning the entries before for a short list
		// (most tasks, and no allocation), by a set for a long one.
		var seen map[string]bool
		if len(t.DependsOn) > 16 {
			seen = make(map[string]bool, len(t.DependsOn))
		}
		for j, dep := range t.DependsOn {
			repeated := seen[dep]
			if seen == nil {
				repeated = slices.Contains(t.DependsOn[:j], dep)
			}
			switch {
			case dep == "":
				p.addf("%s: empty entry in depends_on", label)
			case repeated:
				p.addf("%s: depends on %q more than once", label, dep)
			case dep == t.ID:
				p.addf("%s: depends on itself", label)
			default:
				if _, ok := index[dep]; !ok {
					p.addf("%s: depends on unknown task %q", label, dep)
				}
			}
			if seen != nil {
				seen[dep] = true
			}
		}
	}

	validateRules(&p, d, index, limits)

	for _, c := range findCycles(d, index) {
		p.addf("%s", c)
		p.cycles++
	}
	validateForEachAll(&p, d, index, limits)
	if !limits.Stored && p.cycles == 0 {
		// Templates are compiled when they are submitted, not each time
		// a replica decodes the record (the leader compiles its own copy
		// when it first dispatches the task).
		validateWorkflow(&p, d, index)
	}
	if err := p.err(CodeInvalid); err != nil {
		return err
	}
	return nil
}

func validateTask(p *problems, label taskLabel, t *model.Task) {
	if len(t.Name) > MaxNameLen {
		p.addf("%s: name is longer than %d bytes", label, MaxNameLen)
	}
	switch t.Kind {
	case model.KindShell:
		if strings.TrimSpace(t.Command) == "" {
			p.addf("%s: shell task needs a command", label)
		}
		// exec cannot pass a NUL byte; better said now than at run time.
		if strings.ContainsRune(t.Command, 0) {
			p.addf("%s: command contains a NUL byte", label)
		}
		if t.Interpreter != "" && !expr.HasTemplate(t.Interpreter) && strings.ContainsAny(t.Interpreter, " \t\r\n\x00") {
			p.addf("%s: interpreter %q must be a program name or path, without arguments", label, t.Interpreter)
		}
		for k, v := range t.Env {
			if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
				p.addf("%s: env %q: names must be non-empty without '=' or NUL, values without NUL", label, k)
			}
		}
		validateEnvFrom(p, label, t)
	case model.KindHTTP:
		validateHTTP(p, label, t)
	case model.KindSleep:
		if t.Duration < 0 || t.Duration.D() > MaxDuration {
			p.addf("%s: duration %s is out of range: want 0 to %s", label, t.Duration.D(), MaxDuration)
		}
	case model.KindNoop:
	case model.KindPod:
		validatePod(p, label, t)
	default:
		p.addf("%s: unknown kind %q (want shell, http, noop, sleep or pod)", label, t.Kind)
	}
	if len(t.EnvFrom) > 0 && t.Kind != model.KindShell {
		if t.Kind == model.KindPod {
			p.addf("%s: env_from is for shell tasks; a pod task takes a secret as Kubernetes does, in pod.env[].valueFrom.secretKeyRef", label)
		} else {
			p.addf("%s: env_from is for shell tasks, not %s", label, t.Kind)
		}
	}
	if len(t.Pod) > 0 && t.Kind != model.KindPod {
		p.addf("%s: pod is for pod tasks (kind: pod), not %s", label, t.Kind)
	}
	// Written as a negation so NaN (which YAML can express) fails too.
	if !(t.Fail >= 0 && t.Fail <= 1) {
		p.addf("%s: fail %v is out of range: want true, false or a probability between 0 and 1", label, float64(t.Fail))
	}
	if t.Priority > MaxPriority || t.Priority < -MaxPriority {
		p.addf("%s: priority %d is out of range: want -%d to %d", label, t.Priority, MaxPriority, MaxPriority)
	}
	if t.MaxRetries < 0 || t.MaxRetries > MaxRetriesCap {
		p.addf("%s: max_retries %d is out of range: want 0 to %d", label, t.MaxRetries, MaxRetriesCap)
	}
	if t.Timeout <= 0 || t.Timeout.D() > MaxTimeout {
		p.addf("%s: timeout %s is out of range: want more than 0 and at most %s", label, t.Timeout.D(), MaxTimeout)
	}
	validateSelector(p, label, t)
}

// validateEnvFrom checks a shell task's secret references: bounded in
// number, each a valid name, and no variable given twice (by env or by
// another reference), which would leave which value wins to the order of
// the environment.
func validateEnvFrom(p *problems, label taskLabel, t *model.Task) {
	if len(t.EnvFrom) > model.MaxSecretRefs {
		p.addf("%s: env_from has %d entries; at most %d", label, len(t.EnvFrom), model.MaxSecretRefs)
		return
	}
	seen := make(map[string]bool, len(t.EnvFrom))
	for i, r := range t.EnvFrom {
		if msg := r.Problem(); msg != "" {
			p.addf("%s: env_from[%d]: %s", label, i, msg)
			continue
		}
		if _, ok := t.Env[r.As]; ok || seen[r.As] {
			p.addf("%s: env_from[%d]: %s is set twice (by env or an earlier env_from)", label, i, r.As)
		}
		seen[r.As] = true
	}
}

// validateSelector checks a task's label requirements: pool and selector.
// Matching is by equality only, so a requirement that names two values for
// one label can never be met and is refused here rather than left to wait.
func validateSelector(p *problems, label taskLabel, t *model.Task) {
	if t.Pool != "" && !model.ValidLabel(t.Pool) {
		p.addf("%s: pool %q is invalid: want %s", label, t.Pool, model.LabelRule)
	}
	most := model.MaxLabels
	if t.Kind == model.KindPod {
		most-- // a pod task requires model.PodsLabel besides
	}
	if len(t.Selector) > most {
		p.addf("%s: selector has %d labels; at most %d", label, len(t.Selector), most)
		return
	}
	keys := make([]string, 0, len(t.Selector))
	for k := range t.Selector {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := t.Selector[k]
		switch {
		case !model.ValidLabel(k):
			p.addf("%s: selector key %q is invalid: want %s", label, k, model.LabelRule)
		case !model.ValidLabel(v):
			p.addf("%s: selector %s: value %q is invalid: want %s (matching is by equality)", label, k, v, model.LabelRule)
		}
	}
	if sp, ok := t.Selector[model.PoolLabel]; ok && t.Pool != "" && sp != t.Pool {
		p.addf("%s: selector is unsatisfiable: pool %q and selector pool %q can never both hold (a worker has one value per label)", label, t.Pool, sp)
	}
}

// validatePod checks a pod task: its `pod` object (podspec.Validate names
// each field), and none of the fields of the other kinds, which would be
// silently ignored.
func validatePod(p *problems, label taskLabel, t *model.Task) {
	if len(t.Pod) == 0 {
		p.addf("%s: pod task needs a pod object, with at least an image", label)
		return
	}
	switch {
	case t.Command != "":
		p.addf("%s: command is for shell tasks; a pod task's command is pod.command (a list, as in Kubernetes)", label)
	case t.Interpreter != "" || t.Workdir != "":
		p.addf("%s: interpreter and workdir are for shell tasks; a pod task's working directory is pod.workingDir", label)
	case t.URL != "":
		p.addf("%s: url is for http tasks", label)
	}
	for k, v := range t.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
			p.addf("%s: env %q: names must be non-empty without '=' or NUL, values without NUL", label, k)
		}
	}
	for _, msg := range podspec.Validate(t.Pod) {
		p.addf("%s: %s", label, msg)
	}
}

func validateHTTP(p *problems, label taskLabel, t *model.Task) {
	// A templated url or method is checked once rendered, at dispatch.
	if strings.TrimSpace(t.URL) == "" {
		p.addf("%s: http task needs a url", label)
	} else if !expr.HasTemplate(t.URL) && !model.ValidHTTPURL(t.URL) {
		p.addf("%s: url %q is invalid: want an absolute http:// or https:// URL", label, t.URL)
	}
	if !model.ValidHTTPMethod(t.Method) && !expr.HasTemplate(t.Method) {
		p.addf("%s: method %q is not supported (want GET, HEAD, POST, PUT, PATCH, DELETE or OPTIONS)", label, t.Method)
	}
	if t.ExpectStatus < 100 || t.ExpectStatus > 599 {
		p.addf("%s: expect_status %d is out of range: want 100 to 599", label, t.ExpectStatus)
	}
}

// findCycles returns up to maxCycles cycles as "cycle: a → b → c → a", where
// each arrow reads "depends on". The search is an iterative DFS with an
// explicit stack so that a 1000-task chain cannot exhaust the goroutine
// stack, and every node and edge is visited once, so the cost is linear.
// Self-dependencies, unknown and repeated ids are reported elsewhere and
// skipped here; with duplicate task ids the first one wins.
func findCycles(d *model.DAG, index map[string]int) []string {
	const (
		white = iota // not visited
		grey         // on the current DFS path
		black        // finished: no cycle through it remains unreported
	)
	n := len(d.Tasks)
	color := make([]uint8, n)
	pos := make([]int, n) // position in path while grey
	type frame struct{ node, next int }
	var path []frame
	var cycles []string

	deps := func(u int) []string { return d.Tasks[u].DependsOn }
	for root := 0; root < n; root++ {
		if color[root] != white {
			continue
		}
		color[root], pos[root] = grey, 0
		path = append(path[:0], frame{root, 0})
		for len(path) > 0 {
			top := &path[len(path)-1]
			u := top.node
			if top.next >= len(deps(u)) {
				color[u] = black
				path = path[:len(path)-1]
				continue
			}
			v, ok := index[deps(u)[top.next]]
			top.next++
			if !ok || v == u {
				continue
			}
			switch color[v] {
			case white:
				color[v], pos[v] = grey, len(path)
				path = append(path, frame{v, 0})
			case grey:
				if len(cycles) < maxCycles {
					ids := make([]string, 0, len(path)-pos[v]+1)
					for _, f := range path[pos[v]:] {
						ids = append(ids, d.Tasks[f.node].ID)
					}
					ids = append(ids, d.Tasks[v].ID)
					if len(ids) > 2*cycleEnds+1 {
						// A cycle through 100,000 tasks is named by its
						// ends: a message of every id would be megabytes.
						more := fmt.Sprintf("… %d more …", len(ids)-2*cycleEnds)
						ids = append(append(ids[:cycleEnds:cycleEnds], more), ids[len(ids)-cycleEnds:]...)
					}
					cycles = append(cycles, "cycle: "+strings.Join(ids, " → "))
				}
			}
		}
	}
	return cycles
}

// NewID returns a DAG id such as "20261122-150405-a1b2c3": ids sort by
// submission time (UTC, to the second) in etcd range scans and listings, and
// the random suffix (24 bits) keeps ids made in the same second apart.
func NewID(now time.Time) string {
	var b [3]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails since Go 1.24
	return now.UTC().Format("20060102-150405-") + hex.EncodeToString(b[:])
}
