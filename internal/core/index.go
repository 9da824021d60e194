package core

import "math/bits"

// A DAG's lookup structures, sized for DAGs of 100,000 tasks and replicas
// holding a million live tasks: what they cost is paid per task on the
// leader and on every standby, so they hold 32-bit positions, never a
// second copy of a task's id, and no allocation per task.

// taskIndex finds a task's position in its DAG by id: an open-addressing
// hash table (linear probing) of 32-bit slots, 0 marking a free one. A
// slot holds the position+1 in its low bits and, above them, the top bits
// of the id's hash as a tag, so a probe past another task's slot is
// refused without reading that task's id; the ids themselves are the
// tasks' own (their specs'). The table takes 4 bytes a slot and 1.5 to 3
// slots a task, where a map[string]int32 took some 40 bytes a task. The
// hash is FNV-1a: deterministic, so two replicas lay the table out alike
// (not that anything depends on it).
type taskIndex struct {
	slots   []uint32
	posBits uint8 // bits of a slot that hold position+1
}

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
	return taskIndex{slots: make([]uint32, size), posBits: uint8(bits.Len32(uint32(n)))}
}

// slot is what the table holds for the task at pos whose id hashes to h.
func (x *taskIndex) slot(h uint32, pos int32) uint32 {
	return h>>x.posBits<<x.posBits | uint32(pos+1)
}

// indexOf returns the position of the DAG's task (not an instance) with
// that id.
func (d *dagRun) indexOf(id string) (int32, bool) {
	x := &d.index
	h := hashID(id)
	tag := x.slot(h, -1)
	low := uint32(1)<<x.posBits - 1
	mask := uint32(len(x.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		v := x.slots[i]
		if v == 0 {
			return 0, false
		}
		if v&^low == tag {
			if p := int32(v&low) - 1; d.tasks[p].id() == id {
				return p, true
			}
		}
	}
}

// addIndex adds the task at position pos under its id; it reports false,
// adding nothing, when a task with that id is there already.
func (d *dagRun) addIndex(pos int32) bool {
	x := &d.index
	id := d.tasks[pos].id()
	h := hashID(id)
	tag := x.slot(h, -1)
	low := uint32(1)<<x.posBits - 1
	mask := uint32(len(x.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		v := x.slots[i]
		if v == 0 {
			x.slots[i] = x.slot(h, pos)
			return true
		}
		if v&^low == tag && d.tasks[int32(v&low)-1].id() == id {
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
