package core

import (
	"slices"
	"sort"
	"strconv"
	"strings"
)

// A big DAG drawn small: its shape is a graph of at most MaxShapeNodes
// nodes, each a task, a map group, or a set of tasks collapsed into one,
// with the edges between them. A reader draws the shape, then lists a
// node's tasks a page at a time (TaskQuery.Members). The shape depends on
// the specification alone, so it is built once per DAG (Shape, by its
// reader, who keeps it) and only its counts are read again (ShapeCounts).

// MaxShapeNodes bounds a shape's nodes: what a browser lays out at once.
const MaxShapeNodes = 150

// ShapeNodeKind says what a shape node stands for.
type ShapeNodeKind string

const (
	ShapeTask  ShapeNodeKind = "task"  // one task: its id is the task's
	ShapeMap   ShapeNodeKind = "map"   // one map group: its id is the group's, its counts its instances'
	ShapeTasks ShapeNodeKind = "tasks" // tasks collapsed: siblings, a level or a band of levels
)

// ShapeNode is one node of a shape.
type ShapeNode struct {
	// ID is the task's or group's id, or for collapsed tasks "~" and a
	// number (task ids cannot start with "~").
	ID    string
	Kind  ShapeNodeKind
	Role  string // "task", "handler", "notification", or "" for a band of several
	Level int    // the first level (longest path from a task without dependencies)
	// Levels is how many levels it spans: 1 unless a band.
	Levels int
	// Tasks counts its tasks (without map groups' instances); Sample
	// names its first few.
	Tasks  int
	Sample []string
	// Members are its tasks' indices, ascending (TaskQuery.Members).
	Members []int32
	groups  []int32 // the members that are map groups
}

// Shape is a DAG's shape, for the DAG Seq created.
type Shape struct {
	DAG   string
	Seq   int64
	Nodes []ShapeNode
	Edges [][2]int32 // from node, to node (indices in Nodes)
	Depth int        // the DAG's levels
}

// shapeSample bounds ShapeNode.Sample.
const shapeSample = 3

// ShapeGroupPrefix starts the id of a node of collapsed tasks.
const ShapeGroupPrefix = "~"

// Shape builds the shape of DAG id: O(tasks + dependencies), once per DAG
// by a reader that keeps it (the engine).
func (c *Core) Shape(id string) (*Shape, bool) {
	d := c.dags[id]
	if d == nil {
		return nil, false
	}
	n := len(d.tasks)
	level := d.levels()
	depth := 0
	for _, l := range level {
		depth = max(depth, int(l)+1)
	}
	// First: map groups alone, other tasks collapsed with their siblings
	// (same role, level and dependencies). Then, while too many nodes:
	// by role and level; then bands of levels.
	keys := make([]uint64, n)
	for i := range n {
		if isGroup(&d.tasks[i]) {
			keys[i] = fnvAdd(fnvBasis, uint64(1)<<63|uint64(i))
			continue
		}
		h := fnvAdd(fnvAdd(fnvBasis, uint64(d.role(int32(i)))), uint64(level[i]))
		for _, j := range d.depsOf(int32(i)) {
			h = fnvAdd(h, uint64(j))
		}
		keys[i] = h
	}
	nodeOf, count := collapse(keys)
	if count > MaxShapeNodes {
		for i := range n {
			if !isGroup(&d.tasks[i]) {
				keys[i] = uint64(d.role(int32(i)))<<32 | uint64(level[i])
			}
		}
		nodeOf, count = collapse(keys)
	}
	band := 1
	if count > MaxShapeNodes {
		band = (depth + MaxShapeNodes - 1) / MaxShapeNodes
		for i := range n {
			keys[i] = uint64(int(level[i]) / band)
		}
		nodeOf, count = collapse(keys)
	}
	s := &Shape{DAG: id, Seq: d.seq, Nodes: make([]ShapeNode, count), Depth: depth}
	for i := range n {
		nd := &s.Nodes[nodeOf[i]]
		t := &d.tasks[i]
		if nd.Tasks == 0 {
			nd.Level, nd.Levels, nd.Role = int(level[i]), 1, roleNames[d.role(int32(i))]
			if band > 1 {
				nd.Level, nd.Levels, nd.Role = int(level[i])/band*band, band, ""
			}
		}
		nd.Tasks++
		nd.Members = append(nd.Members, int32(i))
		if isGroup(t) {
			nd.groups = append(nd.groups, int32(i))
		}
		if len(nd.Sample) < shapeSample {
			nd.Sample = append(nd.Sample, t.id())
		}
	}
	// Nodes in the order of their first level, then of their first task.
	order := make([]int32, count)
	for k := range order {
		order[k] = int32(k)
	}
	sort.SliceStable(order, func(a, b int) bool {
		x, y := &s.Nodes[order[a]], &s.Nodes[order[b]]
		if x.Level != y.Level {
			return x.Level < y.Level
		}
		return x.Members[0] < y.Members[0]
	})
	renum := make([]int32, count)
	nodes := make([]ShapeNode, count)
	for k, o := range order {
		renum[o] = int32(k)
		nodes[k] = s.Nodes[o]
	}
	s.Nodes = nodes
	for k := range s.Nodes {
		nd := &s.Nodes[k]
		switch first := &d.tasks[nd.Members[0]]; {
		case nd.Tasks == 1 && isGroup(first):
			nd.ID, nd.Kind = first.id(), ShapeMap
		case nd.Tasks == 1:
			nd.ID, nd.Kind = first.id(), ShapeTask
		default:
			nd.ID, nd.Kind = ShapeGroupPrefix+strconv.Itoa(k), ShapeTasks
		}
	}
	seen := map[[2]int32]bool{}
	for i := range n {
		to := renum[nodeOf[i]]
		for _, j := range d.depsOf(int32(i)) {
			e := [2]int32{renum[nodeOf[j]], to}
			if e[0] != e[1] && !seen[e] {
				seen[e] = true
				s.Edges = append(s.Edges, e)
			}
		}
	}
	slices.SortFunc(s.Edges, func(a, b [2]int32) int {
		if a[0] != b[0] {
			return int(a[0] - b[0])
		}
		return int(a[1] - b[1])
	})
	return s, true
}

// FNV-1a over 64-bit words: the key of a task's siblings.
const fnvBasis, fnvPrime = 14695981039346656037, 1099511628211

func fnvAdd(h, v uint64) uint64 {
	for range 8 {
		h = (h ^ (v & 0xff)) * fnvPrime
		v >>= 8
	}
	return h
}

// collapse numbers the distinct keys in order of first appearance: task i
// goes to node nodeOf[i], of count.
func collapse(keys []uint64) (nodeOf []int32, count int) {
	nodeOf = make([]int32, len(keys))
	num := make(map[uint64]int32, 64)
	for i, k := range keys {
		v, ok := num[k]
		if !ok {
			v = int32(len(num))
			num[k] = v
		}
		nodeOf[i] = v
	}
	return nodeOf, len(num)
}

// levels returns each task's level: the longest path to it from a task
// without dependencies (Kahn's order; the DAG is acyclic by validation).
func (d *dagRun) levels() []int32 {
	n := len(d.tasks)
	level := make([]int32, n)
	left := make([]int32, n)
	queue := make([]int32, 0, n)
	for i := range n {
		left[i] = int32(len(d.depsOf(int32(i))))
		if left[i] == 0 {
			queue = append(queue, int32(i))
		}
	}
	for k := 0; k < len(queue); k++ {
		i := queue[k]
		for _, j := range d.dependentsOf(i) {
			level[j] = max(level[j], level[i]+1)
			if left[j]--; left[j] == 0 {
				queue = append(queue, j)
			}
		}
	}
	return level
}

// ShapeCounts returns the tasks of each node of s by status, a map group's
// by its instances' (its own status until it expands); ok is false when
// DAG s.DAG is gone or is another DAG now. It reads each task's status
// once and each group's counts: no view is built.
func (c *Core) ShapeCounts(s *Shape) ([]StatusCounts, bool) {
	d := c.dags[s.DAG]
	if d == nil || d.seq != s.Seq {
		return nil, false
	}
	out := make([]StatusCounts, len(s.Nodes))
	for k := range s.Nodes {
		nd, o := &s.Nodes[k], &out[k]
		for _, i := range nd.Members {
			o[d.tasks[i].status]++
		}
		for _, i := range nd.groups {
			if g := d.groups[i]; g != nil {
				o[d.tasks[i].status]--
				for st, v := range g.counts {
					o[st] += int(v)
				}
			}
		}
	}
	return out, true
}

// Node returns the node of s with id, nil if none.
func (s *Shape) Node(id string) *ShapeNode {
	if k, err := strconv.Atoi(strings.TrimPrefix(id, ShapeGroupPrefix)); err == nil && strings.HasPrefix(id, ShapeGroupPrefix) &&
		k >= 0 && k < len(s.Nodes) && s.Nodes[k].ID == id {
		return &s.Nodes[k]
	}
	for i := range s.Nodes {
		if s.Nodes[i].ID == id {
			return &s.Nodes[i]
		}
	}
	return nil
}
