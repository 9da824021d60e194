package core

// A DAG's lookup structures, sized for DAGs of 100,000 tasks and replicas
// holding a million live tasks: what they cost is paid per task on the
// leader and on every standby, so they hold 32-bit positions, never a
// second copy of a task's id, and no allocation per task.

// taskIndex finds a task's position in its DAG by id: an open-addressing
// hash table (linear probing) of positions+1, 0 marking a free slot. The
// ids themselves are the tasks' own (their specs'), so the table takes 4
// bytes a slot and 1.5 to 3 slots a task, where a map[string]int32 took
// some 40 bytes a task. The hash is FNV-1a: deterministic, so two replicas
// lay the table out alike (not that anything depends on it).
type taskIndex []int32

func hashID(s string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(s); i++ {
		h ^= uint32(s[i])
		h *= 16777619
	}
	return h
}

// newTaskIndex returns an empty table for n tasks.
func newTaskIndex(n int) taskIndex {
	size := 8
	for size < n+n/2 {
		size *= 2
	}
	return make(taskIndex, size)
}

// indexOf returns the position of the DAG's task (not an instance) with
// that id.
func (d *dagRun) indexOf(id string) (int32, bool) {
	x := d.index
	mask := uint32(len(x) - 1)
	for i := hashID(id) & mask; ; i = (i + 1) & mask {
		p := x[i]
		if p == 0 {
			return 0, false
		}
		if d.tasks[p-1].id() == id {
			return p - 1, true
		}
	}
}

// addIndex adds the task at position pos under its id; it reports false,
// adding nothing, when a task with that id is there already.
func (d *dagRun) addIndex(pos int32) bool {
	x := d.index
	id := d.tasks[pos].id()
	mask := uint32(len(x) - 1)
	for i := hashID(id) & mask; ; i = (i + 1) & mask {
		p := x[i]
		if p == 0 {
			x[i] = pos + 1
			return true
		}
		if d.tasks[p-1].id() == id {
			return false
		}
	}
}

// edges are a DAG's dependencies (or dependants), by task, in one flat
// list (compressed sparse rows): task i's are list[start[i]:start[i+1]].
// A slice per task took 24 bytes of header and an allocation each.
type edges struct {
	start []int32 // len(tasks)+1 offsets into list
	list  []int32
}

func (e *edges) of(i int32) []int32 {
	if e.start == nil {
		return nil
	}
	return e.list[e.start[i]:e.start[i+1]:e.start[i+1]]
}

// depsOf and dependentsOf list the positions of a task's dependencies and
// of the tasks that depend on it.
func (d *dagRun) depsOf(i int32) []int32       { return d.deps.of(i) }
func (d *dagRun) dependentsOf(i int32) []int32 { return d.dependents.of(i) }
