// Package expr is Orion's one syntax for values decided at run time: the
// `{{ ... }}` templates in a task's string fields and the `when:`
// conditions, both expressions of github.com/expr-lang/expr over what a
// task may read (Env): the DAG's parameters, the committed outputs and
// statuses of the tasks upstream of it, a mapped instance's item and index,
// and the run it belongs to.
//
// It is pure, like the core that evaluates it: the builtins that read the
// clock or the host's zone files, depend on map order or multiply a string
// are not available, compiling bounds the size of an expression, and
// evaluating bounds the elements it may allocate and the text it may build
// (bounded.go), so a DAG's expressions cost the leader's loop a bounded amount
// whatever a submitter writes. Programs are compiled at submission, where a
// syntax error or a reference to a parameter or task that does not exist is
// refused naming the field, and cached in memory; nothing compiled is ever
// stored.
package expr

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	exprlang "github.com/expr-lang/expr"
	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/vm"
)

// Bounds of what an expression may be and cost.
const (
	// MaxSourceBytes bounds one expression's text.
	MaxSourceBytes = 4 << 10
	// maxNodes bounds an expression's syntax tree (expr-lang's default is
	// 10,000).
	maxNodes = 1000
	// memoryBudget bounds what one evaluation may allocate, in expr-lang's
	// units (about one per element of an array or map it builds, counted
	// for the whole evaluation): a range of a million, or a map over a map
	// of a thousand each, fails instead of holding the loop.
	memoryBudget = 100_000
)

// The names an expression may start from.
const (
	NameParams = "params" // the DAG's parameters: params.region
	NameTasks  = "tasks"  // tasks.<id>.outputs.<name>, tasks.<id>.status
	NameItem   = "item"   // a mapped instance's item
	NameIndex  = "index"  // a mapped instance's index
	NameDAG    = "dag"    // dag.id, dag.run
	NameRun    = "run"    // run.tick, run.interval_start, run.interval_end (schedules)
)

var options = append([]exprlang.Option{
	exprlang.Env(Env{}),
	exprlang.MaxNodes(maxNodes),
}, boundedOptions()...)

// Program is one compiled expression.
type Program struct {
	src  string
	prog *vm.Program
	refs Refs
}

// Refs are the parameters and tasks an expression names statically
// (params.x, params["x"], tasks.t, tasks["t"]). Dynamic access
// (params[name]) names nothing here; it fails at run time when the value is
// missing.
type Refs struct {
	Params []string
	Tasks  []string
}

// Compile compiles one expression.
func Compile(src string) (*Program, error) {
	if len(src) > MaxSourceBytes {
		return nil, fmt.Errorf("expression of %d bytes; at most %d", len(src), MaxSourceBytes)
	}
	if strings.TrimSpace(src) == "" {
		return nil, errors.New("empty expression")
	}
	prog, err := exprlang.Compile(src, options...)
	if err != nil {
		return nil, errors.New(oneLine(err.Error()))
	}
	p := &Program{src: src, prog: prog}
	node := prog.Node()
	ast.Walk(&node, &p.refs)
	return p, nil
}

// Source is the expression's text.
func (p *Program) Source() string { return p.src }

// Refs lists what the expression names.
func (p *Program) Refs() Refs { return p.refs }

// Visit collects params.x and tasks.t (ast.Visitor).
func (r *Refs) Visit(node *ast.Node) {
	m, ok := (*node).(*ast.MemberNode)
	if !ok {
		return
	}
	id, ok := m.Node.(*ast.IdentifierNode)
	if !ok {
		return
	}
	prop, ok := m.Property.(*ast.StringNode)
	if !ok {
		return
	}
	switch id.Value {
	case NameParams:
		r.Params = appendNew(r.Params, prop.Value)
	case NameTasks:
		r.Tasks = appendNew(r.Tasks, prop.Value)
	}
}

func appendNew(list []string, s string) []string {
	for _, x := range list {
		if x == s {
			return list
		}
	}
	return append(list, s)
}

// Eval evaluates the expression over env.
func (p *Program) Eval(env Env) (out any, err error) {
	defer func() {
		// expr-lang reports some run-time faults (the memory budget
		// among them) by panicking inside its VM; its Run recovers most,
		// this the rest.
		if r := recover(); r != nil {
			out, err = nil, fmt.Errorf("%v", r)
		}
	}()
	env.budget = &textBudget{}
	v := vm.VM{MemoryBudget: memoryBudget}
	out, err = v.Run(p.prog, env)
	if err != nil {
		return nil, errors.New(oneLine(err.Error()))
	}
	return out, nil
}

// Bool evaluates a condition: it must yield true or false.
func (p *Program) Bool(env Env) (bool, error) {
	v, err := p.Eval(env)
	if err != nil {
		return false, err
	}
	b, ok := v.(bool)
	if !ok {
		return false, fmt.Errorf("%s is %s, not true or false", p.src, describe(v))
	}
	return b, nil
}

// Env is what an expression reads, under the names above; any other name
// is a compile error. Values are JSON-shaped: string, float64, bool, nil,
// []any and map[string]any (numbers of parameters and outputs decode as
// float64 and print without a needless fraction).
type Env struct {
	Params map[string]any `expr:"params"`
	// Tasks holds, by task id, what a task reads of the tasks upstream of
	// it: {"status": "succeeded", "outputs": {...}}; a mapped group's
	// outputs are the list of its instances' outputs, in index order.
	Tasks map[string]any `expr:"tasks"`
	// Item and Index are a mapped instance's; Index is -1 elsewhere.
	Item  any            `expr:"item"`
	Index int            `expr:"index"`
	DAG   map[string]any `expr:"dag"` // "id", "run"
	Run   map[string]any `expr:"run"` // "tick", "interval_start", "interval_end" of a scheduled run

	budget *textBudget // the text this evaluation built (bounded.go)
}

// String renders a value as a template does: a string as it is, a whole
// number without a fraction, true/false, and anything else as compact JSON.
// nil is an error: a reference to a missing parameter or output yields it,
// and an empty string in its place would run a command with a hole in it.
func String(v any) (string, error) {
	switch x := v.(type) {
	case nil:
		return "", errors.New("has no value")
	case string:
		return x, nil
	case bool:
		return strconv.FormatBool(x), nil
	case int:
		return strconv.Itoa(x), nil
	case int64:
		return strconv.FormatInt(x, 10), nil
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 1<<53 {
			return strconv.FormatInt(int64(x), 10), nil
		}
		return strconv.FormatFloat(x, 'g', -1, 64), nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("cannot be written as text: %v", err)
	}
	return string(b), nil
}

func describe(v any) string {
	switch v.(type) {
	case nil:
		return "nothing"
	case string:
		return "a string"
	case float64, int, int64:
		return "a number"
	case []any:
		return "a list"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}

func oneLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return s
}
