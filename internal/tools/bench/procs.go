package bench

import (
	"context"
	"fmt"
	"os"
	"slices"

	"github.com/orion-sched/orion/internal/client"
	"github.com/orion-sched/orion/internal/tools/procfs"
)

// procCPU is one process's CPU time, with its start time, which tells it
// from a later process that reuses the pid.
type procCPU struct {
	seconds float64
	start   uint64
}

// readProcCPU reads the CPU time of pid, if pid is an `orion worker`
// process. The pid is the one the worker reported with this host's name: a
// worker in a container that shares the host's name but not its pid
// namespace would name some other process, which this check refuses only if
// that process is no orion worker; the bench is meant for clusters like
// make cluster's, all processes of one host.
func readProcCPU(pid int) (procCPU, error) {
	argv, err := procfs.Argv(pid)
	if err != nil {
		return procCPU{}, err
	}
	if !procfs.IsOrionCommand(argv, "worker") {
		return procCPU{}, fmt.Errorf("pid %d is not an orion worker", pid)
	}
	st, err := procfs.ReadStat(pid)
	if err != nil {
		return procCPU{}, err
	}
	return procCPU{seconds: st.CPUSeconds(), start: st.StartTime}, nil
}

// workerSample is the CPU of the standalone workers a cluster lists, keyed
// by worker id, for those that run on this host; notes say why others could
// not be read.
type workerSample struct {
	cpu   map[string]procCPU
	notes []string
}

// sampleWorkers reads the CPU of the cluster's connected standalone workers
// (a replica's own slots are in the replica's CPU) that report this host's
// name and a pid.
func (r *clusterRun) sampleWorkers(ctx context.Context) workerSample {
	cl, err := r.c.Cluster(ctx)
	if err != nil {
		return workerSample{notes: []string{"workers: GET /api/v1/cluster: " + err.Error()}}
	}
	return sampleWorkers(cl)
}

func sampleWorkers(cl *client.Cluster) workerSample {
	s := workerSample{cpu: map[string]procCPU{}}
	host, _ := os.Hostname()
	for _, w := range cl.Workers {
		if w.Replica != "" || w.Slots == 0 {
			continue // a replica's own slots are in the replica's CPU
		}
		if !w.Connected {
			s.notes = append(s.notes, "worker "+w.ID+": not connected")
			continue
		}
		switch {
		case w.PID == 0:
			s.notes = append(s.notes, "worker "+w.ID+": no host or pid known (a worker of an earlier version, or one the hub has not heard from)")
		case w.Host != host:
			s.notes = append(s.notes, fmt.Sprintf("worker %s: on host %q, not this one", w.ID, w.Host))
		default:
			c, err := readProcCPU(w.PID)
			if err != nil {
				s.notes = append(s.notes, fmt.Sprintf("worker %s: %v", w.ID, err))
				continue
			}
			s.cpu[w.ID] = c
		}
	}
	return s
}

// workersCPU is the CPU, in ms, that the workers of two samples used
// between them, or notes saying why it cannot be told (nil when it can).
func workersCPU(before, after workerSample) (msTotal float64, notes []string) {
	if len(before.notes)+len(after.notes) > 0 {
		return 0, append(slices.Clone(before.notes), after.notes...)
	}
	if len(before.cpu) == 0 {
		return 0, []string{"workers: none standalone (a replica's own slots are in its CPU)"}
	}
	v, k := workersCPUDelta(before, after)
	if k != len(before.cpu) || len(after.cpu) != len(before.cpu) {
		return 0, []string{fmt.Sprintf("workers: %d at the start of the phase, %d at its end, %d the same process at both", len(before.cpu), len(after.cpu), k)}
	}
	return v * 1000, nil
}

// workersCPUDelta sums the CPU seconds the workers of both samples used
// between them, and how many it could count.
func workersCPUDelta(before, after workerSample) (seconds float64, n int) {
	for id, b := range before.cpu {
		if a, ok := after.cpu[id]; ok && a.start == b.start && a.seconds >= b.seconds {
			seconds += a.seconds - b.seconds
			n++
		}
	}
	return seconds, n
}
