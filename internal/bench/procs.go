package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/orion-sched/orion/internal/client"
)

// userHZ is the unit of the CPU times in /proc/PID/stat (USER_HZ, 100 on
// every Linux architecture Go supports; the Prometheus process collector
// assumes the same).
const userHZ = 100

// procCPU is one process's CPU time as /proc/PID/stat gives it, with its
// start time, which tells it from a later process that reuses the pid.
type procCPU struct {
	seconds float64
	start   uint64
}

// readProcCPU reads utime+stime of pid, if pid is an `orion worker` process
// (its first argument is worker). The pid is the one the worker reported
// with this host's name: a worker in a container that shares the host's
// name but not its pid namespace would name some other process, which this
// check refuses only if that process is no orion worker; the bench is meant
// for clusters like make cluster's, all processes of one host.
func readProcCPU(pid int) (procCPU, error) {
	argv, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return procCPU{}, err
	}
	if args := strings.Split(string(argv), "\x00"); len(args) < 2 || args[1] != "worker" {
		return procCPU{}, fmt.Errorf("pid %d is not an orion worker", pid)
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procCPU{}, err
	}
	return parseProcCPU(string(stat))
}

// parseProcCPU reads "pid (comm) state … utime stime … starttime …"; comm may
// hold spaces and parentheses, so fields are counted from the last ')'.
func parseProcCPU(s string) (procCPU, error) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return procCPU{}, errors.New("malformed /proc stat line")
	}
	f := strings.Fields(s[i+1:]) // f[0] is field 3; utime is 14, stime 15, starttime 22
	if len(f) < 20 {
		return procCPU{}, errors.New("malformed /proc stat line")
	}
	var n [3]uint64
	for k, j := range []int{11, 12, 19} {
		v, err := strconv.ParseUint(f[j], 10, 64)
		if err != nil {
			return procCPU{}, fmt.Errorf("malformed /proc stat field %d: %q", j+3, f[j])
		}
		n[k] = v
	}
	return procCPU{seconds: float64(n[0]+n[1]) / userHZ, start: n[2]}, nil
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
