package expr

import (
	"fmt"
	"strings"

	exprlang "github.com/expr-lang/expr"
	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/builtin"
	"github.com/expr-lang/expr/vm/runtime"
)

// expr-lang's memory budget counts the elements of the arrays, maps and
// ranges an evaluation builds, not the bytes of its strings: `let a =
// "xx"; let b = a + a; ...`, replace(s, "x", s) or toJSON(toJSON(...))
// double or square a string at every step within a short expression, and
// one such `when:` would run the leader (and each leader after it, judging
// the same committed state) out of memory. So every operation that builds
// text counts its bytes against a budget of its own evaluation, and fails
// past it.

// The same holds for time: loops nest (all(a, all(#, all(#, ...))) over
// lists that share their elements cost little memory and a great many
// steps), so every step of a predicate's body is counted too.

// Bounds of one evaluation.
const (
	// MaxTextBytes bounds the text one evaluation may build, every
	// intermediate string counted.
	MaxTextBytes = 1 << 20
	// MaxSteps bounds the steps of predicate bodies (all, map, filter,
	// reduce, ...) one evaluation may run: a few tens of milliseconds.
	MaxSteps = 200_000
)

// textBudget is one evaluation's count of the text it built and the steps
// it ran.
type textBudget struct{ used, steps int }

func (b *textBudget) left() int {
	if b == nil {
		return MaxTextBytes
	}
	return MaxTextBytes - b.used
}

func (b *textBudget) step() error {
	if b == nil {
		return nil
	}
	b.steps++
	if b.steps > MaxSteps {
		return fmt.Errorf("the expression runs more than %d steps", MaxSteps)
	}
	return nil
}

func (b *textBudget) spend(n int) error {
	if b == nil {
		// Evaluated without Eval (never in Orion): no account to keep.
		return nil
	}
	b.used += n
	if b.used > MaxTextBytes {
		return fmt.Errorf("the expression builds more than %d bytes of text", MaxTextBytes)
	}
	return nil
}

// The functions the patch calls: `a + b` becomes orion_add, so that
// concatenation is counted, and a predicate's body x becomes
// orion_step($env, x), which counts a step and yields x.
const (
	addName  = "orion_add"
	stepName = "orion_step"
)

// textBuiltins are the builtins that build new text: each is replaced by a
// function of the same name that calls it and counts what it returned.
var textBuiltins = []string{"join", "replace", "toJSON", "string", "toBase64", "upper", "lower"}

// unsafeBuiltins are left out: the clock (now) and the host's zone files
// (date with a zone, timezone) would let leader and standby disagree; map
// iteration order (keys, values, toPairs) differs between two evaluations
// of the same map; repeat multiplies a string in one call.
var unsafeBuiltins = []string{"now", "date", "timezone", "keys", "values", "toPairs", "repeat"}

func boundedOptions() []exprlang.Option {
	opts := []exprlang.Option{exprlang.Patch(countText{})}
	for _, name := range unsafeBuiltins {
		opts = append(opts, exprlang.DisableBuiltin(name))
	}
	opts = append(opts, exprlang.Function(addName, add), exprlang.Function(stepName, step), exprlang.Function(shellquoteName, shellquote))
	for _, name := range textBuiltins {
		opts = append(opts, exprlang.Function(name, counted(name)))
	}
	return opts
}

// countText rewrites `a + b` into orion_add($env, a, b) and each text
// builtin f(x...) into f($env, x...): the functions find the evaluation's
// budget in its Env.
type countText struct{}

func (countText) Visit(node *ast.Node) {
	switch n := (*node).(type) {
	case *ast.BinaryNode:
		if n.Operator == "+" {
			ast.Patch(node, &ast.CallNode{
				Callee:    &ast.IdentifierNode{Value: addName},
				Arguments: []ast.Node{&ast.IdentifierNode{Value: "$env"}, n.Left, n.Right},
			})
		}
	case *ast.PredicateNode:
		if c, ok := n.Node.(*ast.CallNode); ok {
			if id, ok := c.Callee.(*ast.IdentifierNode); ok && id.Value == stepName {
				return
			}
		}
		n.Node = &ast.CallNode{
			Callee:    &ast.IdentifierNode{Value: stepName},
			Arguments: []ast.Node{&ast.IdentifierNode{Value: "$env"}, n.Node},
		}
	case *ast.CallNode:
		id, ok := n.Callee.(*ast.IdentifierNode)
		if !ok || !isTextBuiltin(id.Value) || hasEnvFirst(n.Arguments) {
			return
		}
		n.Arguments = append([]ast.Node{&ast.IdentifierNode{Value: "$env"}}, n.Arguments...)
	}
}

func isTextBuiltin(name string) bool {
	if name == shellquoteName {
		return true // Orion's own, counted the same way
	}
	for _, b := range textBuiltins {
		if b == name {
			return true
		}
	}
	return false
}

// hasEnvFirst keeps the patch idempotent (expr-lang may walk a tree more
// than once).
func hasEnvFirst(args []ast.Node) bool {
	if len(args) == 0 {
		return false
	}
	id, ok := args[0].(*ast.IdentifierNode)
	return ok && id.Value == "$env"
}

// budgetOf finds the evaluation's budget in its first argument ($env).
func budgetOf(env any) *textBudget {
	if e, ok := env.(Env); ok {
		return e.budget
	}
	return nil
}

// add is `+`: strings concatenated and counted, everything else as
// expr-lang adds it (numbers, a time and a duration).
func add(args ...any) (out any, err error) {
	if len(args) != 3 {
		return nil, fmt.Errorf("+ needs two operands")
	}
	a, aok := args[1].(string)
	b, bok := args[2].(string)
	if aok && bok {
		if err := budgetOf(args[0]).spend(len(a) + len(b)); err != nil {
			return nil, err
		}
		return a + b, nil
	}
	defer func() {
		if r := recover(); r != nil {
			out, err = nil, fmt.Errorf("%v", r)
		}
	}()
	return runtime.Add(args[1], args[2]), nil
}

// step counts one step of a predicate's body and yields its value.
func step(args ...any) (any, error) {
	if len(args) != 2 {
		return nil, fmt.Errorf("%s: two arguments", stepName)
	}
	if err := budgetOf(args[0]).step(); err != nil {
		return nil, err
	}
	return args[1], nil
}

// counted calls the builtin name and counts the text it returned. What a
// builtin could build far past the budget in one call (join or toJSON of a
// list repeating one long string, replace multiplying a string) is
// estimated first and refused before it is built.
func counted(name string) func(args ...any) (any, error) {
	f := builtin.Builtins[builtin.Index[name]]
	return func(args ...any) (out any, err error) {
		if len(args) == 0 {
			return nil, fmt.Errorf("%s: no arguments", name)
		}
		b := budgetOf(args[0])
		args = args[1:]
		if need := estimate(name, args, b.left()); need > b.left() {
			return nil, fmt.Errorf("%s: the expression builds more than %d bytes of text", name, MaxTextBytes)
		}
		defer func() {
			if r := recover(); r != nil {
				out, err = nil, fmt.Errorf("%s: %v", name, r)
			}
		}()
		switch {
		case f.Fast != nil && len(args) == 1:
			out = f.Fast(args[0])
		case f.Func != nil:
			out, err = f.Func(args...)
		case f.Safe != nil:
			out, _, err = f.Safe(args...)
		default:
			return nil, fmt.Errorf("%s is not available", name)
		}
		if err != nil {
			return nil, err
		}
		if s, ok := out.(string); ok {
			if err := b.spend(len(s)); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
}

// estimate is a lower bound of the text name(args...) builds, computed
// without building it, and at most a little past limit.
func estimate(name string, args []any, limit int) int {
	switch name {
	case "join", "toJSON", "string":
		n := 0
		for _, a := range args {
			n += textSize(a, limit-n+1)
		}
		return n
	case "replace":
		if len(args) != 3 {
			return 0
		}
		s, ok1 := args[0].(string)
		old, ok2 := args[1].(string)
		repl, ok3 := args[2].(string)
		if !ok1 || !ok2 || !ok3 {
			return 0
		}
		n := strings.Count(s, old) // len(s)+1 for an empty old
		return len(s) + n*(len(repl)-len(old))
	}
	return 0
}

// textSize is at least the bytes v's text takes (its strings, and one byte
// per element for separators), counted up to limit: the walk stops past
// it, so it costs at most limit steps however v nests or shares.
func textSize(v any, limit int) int {
	n := 0
	var walk func(v any)
	walk = func(v any) {
		if n > limit {
			return
		}
		switch x := v.(type) {
		case string:
			n += len(x) + 1
		case []any:
			for _, e := range x {
				if n > limit {
					return
				}
				walk(e)
			}
			n++
		case []string:
			for _, e := range x {
				if n > limit {
					return
				}
				n += len(e) + 1
			}
		case map[string]any:
			for k, e := range x {
				if n > limit {
					return
				}
				n += len(k)
				walk(e)
			}
			n++
		default:
			n++
		}
	}
	walk(v)
	return n
}

// shellquoteName is Orion's function that quotes a value for a shell
// command: `{{ shellquote(tasks.list.outputs.rows) }}` in a command is one
// word whatever the output holds, where a bare template would run what a
// task (or a worker faking its result) put in it.
const shellquoteName = "shellquote"

func shellquote(args ...any) (any, error) {
	if len(args) != 2 {
		return nil, fmt.Errorf("shellquote takes one value")
	}
	s, err := String(args[1])
	if err != nil {
		return nil, fmt.Errorf("shellquote: %w", err)
	}
	out := "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
	if err := budgetOf(args[0]).spend(len(out)); err != nil {
		return nil, err
	}
	return out, nil
}
