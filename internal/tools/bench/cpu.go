package bench

import (
	"context"
	"fmt"
	"time"
)

// cpuProbe is one reading of every CPU counter a run can reach: the bench
// process itself (single node), or each replica's and etcd member's
// process_cpu_seconds_total and the standalone workers' /proc/PID/stat
// (cluster), with what could not be read.
type cpuProbe struct {
	self              time.Duration
	replicas, etcd    cpuSample
	repErrs, etcdErrs map[string]error
	workers           workerSample
}

func (r *clusterRun) probeCPU(ctx context.Context) cpuProbe {
	if r.res.Mode == "single" {
		return cpuProbe{self: selfCPU()}
	}
	var p cpuProbe
	p.replicas, p.repErrs = scrapeCPU(ctx, r.tr, r.c.BaseURLs(), r.o.Token)
	p.etcd, p.etcdErrs = scrapeCPU(ctx, r.tr, r.o.EtcdEndpoints, "")
	p.workers = r.sampleWorkers(ctx)
	return p
}

// cpuSpent is the CPU, in ms, that each group of processes used between two
// probes: nil where it could not be read, and Notes say why.
type cpuSpent struct {
	Self                            *float64 // single node: the whole process
	Etcd, Leader, Standbys, Workers *float64 // cluster: members, leader, other replicas, workers (summed)
	Notes                           []string
}

// spentBetween attributes the CPU between p0 and p1 to the groups of a
// cluster (leader is the leader's API URL among replicas) or to the single
// node's process.
func spentBetween(single bool, p0, p1 cpuProbe, members []string, leader string, replicas []string) cpuSpent {
	var s cpuSpent
	if single {
		s.Self = ptr(ms(p1.self - p0.self))
		return s
	}
	if s.Etcd = etcdSpent(p0, p1, members); s.Etcd == nil {
		s.Notes = append(s.Notes, etcdUnread(p0, p1, members))
	}
	if leader == "" {
		s.Notes = append(s.Notes, "leader: not among the --server URLs given, its CPU not read")
	} else if v, k := cpuDelta(p0.replicas, p1.replicas, []string{leader}); k == 1 {
		s.Leader = ptr(v)
	} else {
		s.Notes = append(s.Notes, fmt.Sprintf("leader: %s unreadable (%v)", processCPUMetric, p1.repErrs[leader]))
	}
	var standbys []string
	for _, u := range replicas {
		if u != leader {
			standbys = append(standbys, u)
		}
	}
	if len(standbys) > 0 {
		if v, k := cpuDelta(p0.replicas, p1.replicas, standbys); k == len(standbys) {
			s.Standbys = ptr(v)
		} else {
			s.Notes = append(s.Notes, fmt.Sprintf("standbys: %s read from %d of %d (%s)", processCPUMetric, k, len(standbys), joinErrs(p1.repErrs)))
		}
	}
	if v, notes := workersCPU(p0.workers, p1.workers); notes == nil {
		s.Workers = ptr(v)
	} else {
		s.Notes = append(s.Notes, notes...)
	}
	return s
}

// etcdSpent is the CPU, in ms, the etcd members used between two probes,
// nil unless every member's could be read (etcdUnread says why).
func etcdSpent(p0, p1 cpuProbe, members []string) *float64 {
	if v, k := cpuDelta(p0.etcd, p1.etcd, members); k == len(members) {
		return ptr(v)
	}
	return nil
}

func etcdUnread(p0, p1 cpuProbe, members []string) string {
	_, k := cpuDelta(p0.etcd, p1.etcd, members)
	return fmt.Sprintf("etcd members: %s read from %d of %d (%s)", processCPUMetric, k, len(members), joinErrs(p1.etcdErrs))
}

// per divides each measured figure by n, scaled: the CPU per unit.
func (s cpuSpent) per(n int, scale float64) cpuSpent {
	div := func(v *float64) *float64 {
		if v == nil || n <= 0 {
			return nil
		}
		return ptr(*v * scale / float64(n))
	}
	return cpuSpent{Self: div(s.Self), Etcd: div(s.Etcd), Leader: div(s.Leader), Standbys: div(s.Standbys),
		Workers: div(s.Workers), Notes: s.Notes}
}

// rawPutCPU sets the CPU per raw put from probes around n puts: etcd's
// (cluster) or the whole process's (single node).
func (b *CPUBudget) rawPutCPU(single bool, p0, p1 cpuProbe, members []string, n int) {
	if n <= 0 {
		return
	}
	spent := ptr(ms(p1.self - p0.self))
	if !single {
		if spent = etcdSpent(p0, p1, members); spent == nil {
			b.Notes = append(b.Notes, "raw put: "+etcdUnread(p0, p1, members))
			return
		}
	}
	b.RawPut = ptr(*spent * 1000 / float64(n))
}

// taskCPU sets the CPU per task from probes around n tasks.
func (b *CPUBudget) taskCPU(single bool, p0, p1 cpuProbe, members []string, leader string, replicas []string, n int) {
	s := spentBetween(single, p0, p1, members, leader, replicas).per(n, 1000) // µs
	b.Process, b.Etcd, b.Leader, b.Standbys, b.Workers = s.Self, s.Etcd, s.Leader, s.Standbys, s.Workers
	b.Notes = append(b.Notes, s.Notes...)
	base := b.Etcd
	if single {
		base = b.Process
	}
	if base != nil && b.RawPut != nil && *b.RawPut > 0 {
		b.RawPutsPerTask = ptr(*base / *b.RawPut)
	}
}
