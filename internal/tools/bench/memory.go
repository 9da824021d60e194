package bench

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
)

// MinRetainedForMemory is the fewest retained tasks for which the single
// node prints memory per task: below it, a few MiB of noise (the runtime's
// spans, etcd's caches, the poller's buffers) outweigh the tasks.
const MinRetainedForMemory = 10000

// Memory is the single node's memory per retained task: growth over the
// Orion phases (throughput, chain, shell chain), whose DAGs stay in the
// server's state and in etcd, divided by their tasks. A per-task figure is
// null when it would measure noise; MemoryNotes says why.
type Memory struct {
	RetainedTasks int `json:"retained_tasks"`
	// HeapBytesPerTask: growth of the live Go heap (after a GC) per task.
	// The process holds the server's state AND the embedded etcd member's
	// in-memory index of keys and revisions.
	HeapBytesPerTask *float64 `json:"heap_bytes_per_task"`
	// RSSBytesPerTask: growth of the resident set (after the runtime has
	// returned freed memory to the OS) per task: the heap's growth, the
	// runtime's overhead around it, and the pages of etcd's database file
	// mapped in (RssFile).
	RSSBytesPerTask    *float64 `json:"rss_bytes_per_task"`
	HeapGrowthBytes    int64    `json:"heap_growth_bytes"`
	RSSGrowthBytes     int64    `json:"rss_growth_bytes"`
	RSSAnonGrowthBytes int64    `json:"rss_anon_growth_bytes"`
	RSSFileGrowthBytes int64    `json:"rss_file_growth_bytes"`
	MemoryNotes        []string `json:"memory_notes,omitempty"`
}

// memSnapshot is this process's memory at one moment.
type memSnapshot struct {
	heap, rss, rssAnon, rssFile int64
}

// readMemory collects garbage, returns what it freed to the OS (so that
// RSS does not keep what earlier phases used and dropped), then reads the
// live heap and /proc/self/status.
func readMemory() memSnapshot {
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	s := memSnapshot{heap: int64(ms.HeapAlloc)}
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return s
	}
	for _, line := range strings.Split(string(raw), "\n") {
		name, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) < 1 {
			continue
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			continue
		}
		switch name {
		case "VmRSS":
			s.rss = kb * 1024
		case "RssAnon":
			s.rssAnon = kb * 1024
		case "RssFile":
			s.rssFile = kb * 1024
		}
	}
	return s
}

// memoryFigures turns two snapshots around the phases into per-task
// figures, leaving out (with the reason) any that would not mean anything.
func memoryFigures(before, after memSnapshot, retained int) Memory {
	m := Memory{RetainedTasks: retained,
		HeapGrowthBytes: after.heap - before.heap, RSSGrowthBytes: after.rss - before.rss,
		RSSAnonGrowthBytes: after.rssAnon - before.rssAnon, RSSFileGrowthBytes: after.rssFile - before.rssFile}
	if retained < MinRetainedForMemory {
		m.MemoryNotes = append(m.MemoryNotes, fmt.Sprintf("%d retained tasks: too few for a per-task figure (at least %d)", retained, MinRetainedForMemory))
		return m
	}
	if m.HeapGrowthBytes > 0 {
		m.HeapBytesPerTask = ptr(float64(m.HeapGrowthBytes) / float64(retained))
	} else {
		m.MemoryNotes = append(m.MemoryNotes, fmt.Sprintf("the Go heap did not grow (%+d bytes): no per-task figure", m.HeapGrowthBytes))
	}
	switch {
	case before.rss == 0 || after.rss == 0:
		m.MemoryNotes = append(m.MemoryNotes, "RSS unreadable (/proc/self/status)")
	case m.RSSGrowthBytes > 0:
		m.RSSBytesPerTask = ptr(float64(m.RSSGrowthBytes) / float64(retained))
	default:
		m.MemoryNotes = append(m.MemoryNotes, fmt.Sprintf("RSS fell by %.1f MiB over the phases (memory held before them was given back): no per-task figure", float64(-m.RSSGrowthBytes)/(1<<20)))
	}
	return m
}

func (m *Memory) print(w io.Writer) {
	heap, rss := "-", "-"
	if m.HeapBytesPerTask != nil {
		heap = fmt.Sprintf("%.0f bytes", *m.HeapBytesPerTask)
	}
	if m.RSSBytesPerTask != nil {
		rss = fmt.Sprintf("%.0f bytes", *m.RSSBytesPerTask)
	}
	fmt.Fprintf(w, "Go heap per retained task\t%s\tlive heap after GC, growth %s over %d retained tasks: the server's state and the embedded etcd member's index (one process)\n",
		heap, mib(m.HeapGrowthBytes), m.RetainedTasks)
	fmt.Fprintf(w, "RSS per retained task\t%s\tRSS growth %s (anon %s: heap and runtime; file %s: etcd's db pages mapped in), after freed memory went back to the OS\n",
		rss, mib(m.RSSGrowthBytes), mib(m.RSSAnonGrowthBytes), mib(m.RSSFileGrowthBytes))
	for _, n := range m.MemoryNotes {
		fmt.Fprintf(w, "  memory\t\t%s\n", n)
	}
}

func mib(b int64) string { return fmt.Sprintf("%+.1f MiB", float64(b)/(1<<20)) }
