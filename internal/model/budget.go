package model

// DecodedBytes counts the bytes of every string in d: ids, names, commands,
// environment, URLs, dependencies, parameters, http outputs, conditions,
// handlers and notifications.
// It is what a DAG costs once decoded, and what its stored record grows
// with. YAML anchors and aliases make it larger than the body that carried
// it (an alias of a 100 KB string costs 100 KB each time it is used), which
// is why Validate bounds it and not only the body. The walk is linear in
// the number of strings and allocates nothing.
func (d *DAG) DecodedBytes() int64 {
	n := int64(len(d.ID)+len(d.Name)) + int64(d.Params.Bytes())
	for i := range d.Tasks {
		n += d.Tasks[i].textBytes()
	}
	return n + d.hookBytes()
}

// textBytes counts the bytes of every string of one task.
func (t *Task) textBytes() int64 {
	n := int64(len(t.ID) + len(t.Name) + len(t.Kind) + len(t.Command) + len(t.Interpreter) + len(t.Workdir) +
		len(t.URL) + len(t.Method) + len(t.Pool) + len(t.TriggerRule) + len(t.When) + len(t.Body) + len(t.Pod) + len(t.ForEach))
	n += int64(t.EnvBytes())
	for k, v := range t.Selector {
		n += int64(len(k) + len(v))
	}
	for _, r := range t.EnvFrom {
		n += int64(len(r.Secret) + len(r.Key) + len(r.As))
	}
	for k, v := range t.Headers {
		n += int64(len(k) + len(v))
	}
	for _, dep := range t.DependsOn {
		n += int64(len(dep))
	}
	if o := t.Outputs; o != nil {
		n += int64(len(o.Body))
		for k, v := range o.JSON {
			n += int64(len(k) + len(v))
		}
	}
	return n
}

// Per-field limits of a task. A shell command is one argument to `sh -c`,
// which the kernel caps at 128 KiB (MAX_ARG_STRLEN); half of that leaves
// room for the environment and says so before anything is stored, rather
// than failing with "argument list too long" at run time. Submission
// checks the fields as written (internal/dag), the core the same fields as
// their templates render.
const (
	MaxCommandBytes = 64 << 10 // a shell task's command
	MaxEnvBytes     = 64 << 10 // a task's environment: names, values and "=" together
	MaxURLBytes     = 8 << 10  // an http task's URL
	MaxPathBytes    = 4 << 10  // workdir and interpreter (PATH_MAX)
)

// EnvBytes is the size of a task's environment as exec passes it
// ("NAME=value" plus a NUL each).
func (t *Task) EnvBytes() int {
	n := 0
	for k, v := range t.Env {
		n += len(k) + len(v) + 2
	}
	return n
}
