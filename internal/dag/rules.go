package dag

import (
	"fmt"
	"net/url"
	"slices"
	"strings"

	"golang.org/x/net/http/httpguts"

	"github.com/orion-sched/orion/internal/expr"
	"github.com/orion-sched/orion/internal/model"
)

// Bounds of notifications.
const (
	MaxNotifications     = 10      // notify entries per DAG
	MaxNotifyHeaders     = 32      // headers per entry
	MaxNotifyHeaderBytes = 8 << 10 // names and values of one entry's headers together
)

// notifyHeadersRefused are the headers a notification may not set: Orion
// sets the first two, and the others describe the connection or the body,
// which are not the sender's to choose.
var notifyHeadersRefused = []string{"Idempotency-Key", "Content-Type", "Host", "Content-Length", "Transfer-Encoding",
	"Connection", "Upgrade", "Te", "Trailer", "Keep-Alive", "Proxy-Connection"}

// validateRules checks what decides whether and when a task runs beyond its
// dependencies: trigger rules, `when:` conditions, the reserved handler
// ids, the handlers themselves and the notifications. index maps the
// tasks' ids to their positions; the dependencies are checked already.
func validateRules(p *problems, d *model.DAG, index map[string]int, limits Limits) {
	var up *upstream
	for i := range d.Tasks {
		t := &d.Tasks[i]
		label := taskLabel{i: i, id: t.ID, name: t.Name}
		if !limits.Stored && model.IsHandlerID(t.ID) {
			p.addf("%s: id %q is reserved for the DAG's handler of that name", label, t.ID)
		}
		checkRule(p, label, t.TriggerRule)
		if t.When != "" && !limits.Stored {
			if up == nil {
				up = newUpstream(d, index)
			}
			checkWhen(p, d, label, t.When, func(id string) string {
				j, ok := index[id]
				switch {
				case !ok:
					return "no task " + id + " in the DAG"
				case !up.of(i)[j]:
					return "task " + id + " is not upstream of this task: a condition reads only what has ended before the task may start"
				}
				return ""
			})
		}
	}
	for _, h := range d.Handlers() {
		label := handlerLabel(h.ID)
		t := h.Task
		if t.ID != h.ID {
			p.addf("%s: id %q: a handler's id is its field, %s", label, t.ID, h.ID)
		}
		validateTask(p, label, t)
		if !limits.Stored {
			checkFieldSizes(p, label, t)
		}
		if len(t.DependsOn) > 0 {
			p.addf("%s: depends_on: a handler runs once every task of the DAG has ended; give no depends_on", label)
		}
		if t.TriggerRule != "" {
			p.addf("%s: trigger_rule: a handler runs by its field (on_success, on_failure or on_exit); give no trigger_rule", label)
		}
		if t.When != "" && !limits.Stored {
			checkWhen(p, d, label, t.When, func(id string) string {
				if _, ok := index[id]; !ok {
					return "no task " + id + " in the DAG"
				}
				return ""
			})
		}
	}
	if len(d.Notify) > MaxNotifications {
		p.addf("notify: %d entries; at most %d", len(d.Notify), MaxNotifications)
	}
	for i := range d.Notify {
		checkNotification(p, fmt.Sprintf("notify[%d]", i), &d.Notify[i], limits)
	}
}

func checkRule(p *problems, label taskLabel, r model.TriggerRule) {
	if r != "" && !slices.Contains(model.TriggerRules, r) {
		names := make([]string, len(model.TriggerRules))
		for i, x := range model.TriggerRules {
			names[i] = string(x)
		}
		p.addf("%s: trigger_rule %q is unknown: want %s", label, r, strings.Join(names, ", "))
	}
}

// checkWhen compiles a condition and checks what it names: taskProblem says
// what is wrong with a reference to a task ("" when nothing is).
func checkWhen(p *problems, d *model.DAG, label taskLabel, src string, taskProblem func(id string) string) {
	prog, err := expr.Compile(src)
	if err != nil {
		p.addf("%s: when: %v", label, err)
		return
	}
	refs := prog.Refs()
	for _, name := range refs.Params {
		if _, ok := d.Params[name]; !ok {
			p.addf("%s: when: params.%s is not declared (%s)", label, name, declaredList(d.Params))
		}
	}
	for _, id := range refs.Tasks {
		if msg := taskProblem(id); msg != "" {
			p.addf("%s: when: tasks.%s: %s", label, id, msg)
		}
	}
}

// upstream computes, on demand and once per task, the set of tasks each
// task transitively depends on.
type upstream struct {
	d     *model.DAG
	index map[string]int
	sets  map[int][]bool
}

func newUpstream(d *model.DAG, index map[string]int) *upstream {
	return &upstream{d: d, index: index, sets: make(map[int][]bool)}
}

// of returns the tasks upstream of task i (an iterative walk: a long chain
// must not exhaust the stack).
func (u *upstream) of(i int) []bool {
	if s, ok := u.sets[i]; ok {
		return s
	}
	seen := make([]bool, len(u.d.Tasks))
	stack := []int{i}
	for len(stack) > 0 {
		k := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, dep := range u.d.Tasks[k].DependsOn {
			if j, ok := u.index[dep]; ok && !seen[j] {
				seen[j] = true
				stack = append(stack, j)
			}
		}
	}
	u.sets[i] = seen
	return seen
}

func checkNotification(p *problems, label string, n *model.Notification, limits Limits) {
	switch u, err := url.Parse(n.URL); {
	case strings.TrimSpace(n.URL) == "":
		p.addf("%s: url is required", label)
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		p.addf("%s: url %q is invalid: want an absolute http:// or https:// URL", label, n.URL)
	case !limits.Stored && len(n.URL) > MaxURLBytes:
		p.addf("%s: url is %d bytes; the limit is %d", label, len(n.URL), MaxURLBytes)
	}
	if !model.ValidHTTPMethod(n.Method) {
		p.addf("%s: method %q is not supported (want GET, HEAD, POST, PUT, PATCH, DELETE or OPTIONS)", label, n.Method)
	}
	for j, s := range n.On {
		switch {
		case !slices.Contains(model.NotifyStatuses, s):
			p.addf("%s: on: %q is not a DAG's end: want %s", label, s, strings.Join(model.NotifyStatuses, ", "))
		case slices.Contains(n.On[:j], s):
			p.addf("%s: on: %q is listed twice", label, s)
		}
	}
	if len(n.Headers) > MaxNotifyHeaders {
		p.addf("%s: headers: %d of them; at most %d", label, len(n.Headers), MaxNotifyHeaders)
	}
	size := 0
	for _, k := range sortedKeys(n.Headers) {
		v := n.Headers[k]
		size += len(k) + len(v)
		switch {
		case !httpguts.ValidHeaderFieldName(k):
			p.addf("%s: headers: %q is not a valid header name", label, k)
		case !httpguts.ValidHeaderFieldValue(v):
			p.addf("%s: headers: %s: the value has a character a header cannot carry", label, k)
		case slices.ContainsFunc(notifyHeadersRefused, func(r string) bool { return strings.EqualFold(r, k) }):
			p.addf("%s: headers: %s is set by Orion or by the connection; give another header", label, k)
		}
	}
	if !limits.Stored && size > MaxNotifyHeaderBytes {
		p.addf("%s: headers are %d bytes; the limit is %d", label, size, MaxNotifyHeaderBytes)
	}
	if n.Timeout <= 0 || n.Timeout.D() > MaxTimeout {
		p.addf("%s: timeout %s is out of range: want more than 0 and at most %s", label, n.Timeout.D(), MaxTimeout)
	}
	if n.MaxRetries < 0 || n.MaxRetries > MaxRetriesCap {
		p.addf("%s: max_retries %d is out of range: want 0 to %d", label, n.MaxRetries, MaxRetriesCap)
	}
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
