package drill

import (
	"context"
	"fmt"
	"syscall"
	"time"

	"github.com/orion-sched/orion/internal/client"
)

// nodeLoss kills the scheduler leader and etcd's raft leader at the same
// moment, as the loss of a machine that ran both does (nothing prevents
// it: on Kubernetes, one node with the leader's pod and the etcd leader's
// pod), under a trickle of submissions. It measures the takeover (the kill
// to another replica's first committed write) and the write stall (the
// longest gap between acknowledged submissions), restarts the member and
// the replica, and accounts the DAG and the trickle.
//
// etcd's raft leader is chosen deliberately: killing whichever member the
// replicas dial first hits it only by chance, and a follower's loss costs
// a takeover nothing.
func (d *driller) nodeLoss(ctx context.Context, tag string, res *Result, cl *client.Cluster, leader client.Replica, proc *ProcInfo, standbys []client.Replica) (*Result, error) {
	// etcd's raft leader as it is now, not when the drill began.
	if now, err := d.api.cluster(ctx, leader.APIURL); err == nil {
		cl = now
	}
	m, err := pickMember(cl, "leader")
	if err != nil {
		return nil, fmt.Errorf("%s: %w", tag, err)
	}
	eproc, clientURL, err := localMember(m)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", tag, err)
	}
	tr := d.startTrickle(ctx, res.DAG)
	if err := tr.waitAcks(ctx, 5, 30*time.Second); err != nil {
		tr.stop()
		return nil, fmt.Errorf("%s: the trickle before the kill: %w", tag, err)
	}
	d.logf("%s: killing %s (pid %d) and etcd member %s (raft leader, pid %d) together", tag, leader.Name, proc.PID, m.Name, eproc.PID)
	res.Killed = leader.Name + " + etcd " + m.Name
	t0, err := d.kill(proc)
	if err != nil {
		tr.stop()
		return nil, fmt.Errorf("%s: %w", tag, err)
	}
	d.killed = append(d.killed, Killed{Name: leader.Name, PID: leader.PID, At: t0})
	if _, err := signalProc(eproc, syscall.SIGKILL); err != nil {
		res.fail(fmt.Errorf("etcd member %s: %w", m.Name, err))
	}

	d.recordTakeover(ctx, res, standbys, t0)
	d.endTrickle(ctx, tr, res, t0, tag)

	// Both come back even if the drill is being interrupted: a cluster
	// must not be left short by an aborted drill.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.o.RestartTimeout+30*time.Second)
	if _, err := d.restartMember(rctx, m.Name, eproc, clientURL); err != nil {
		res.fail(err)
	}
	pid, _, rerr := d.restart(rctx, leader, proc)
	cancel()
	res.RestartedPID = pid
	if rerr != nil {
		res.fail(rerr)
		return res, fmt.Errorf("%s: %w", tag, rerr)
	}
	d.settle(ctx, tag, res, tr.ids...)
	return res, nil
}
