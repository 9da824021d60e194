package model

// DecodedBytes counts the bytes of every string in d: ids, names, commands,
// environment, URLs, dependencies, conditions, handlers and notifications.
// It is what a DAG costs once decoded, and what its stored record grows
// with. YAML anchors and aliases make it larger than the body that carried
// it (an alias of a 100 KB string costs 100 KB each time it is used), which
// is why Validate bounds it and not only the body. The walk is linear in
// the number of strings and allocates nothing.
func (d *DAG) DecodedBytes() int64 {
	n := int64(len(d.ID) + len(d.Name))
	for i := range d.Tasks {
		n += d.Tasks[i].textBytes()
	}
	return n + d.hookBytes()
}

// textBytes counts the bytes of every string of one task.
func (t *Task) textBytes() int64 {
	n := int64(len(t.ID) + len(t.Name) + len(t.Kind) + len(t.Command) + len(t.Interpreter) + len(t.Workdir) +
		len(t.URL) + len(t.Method) + len(t.Pool) + len(t.TriggerRule) + len(t.When) + len(t.Body))
	n += int64(t.EnvBytes())
	for k, v := range t.Selector {
		n += int64(len(k) + len(v))
	}
	for k, v := range t.Headers {
		n += int64(len(k) + len(v))
	}
	for _, dep := range t.DependsOn {
		n += int64(len(dep))
	}
	return n
}

// EnvBytes is the size of a task's environment as exec passes it
// ("NAME=value" plus a NUL each).
func (t *Task) EnvBytes() int {
	n := 0
	for k, v := range t.Env {
		n += len(k) + len(v) + 2
	}
	return n
}
