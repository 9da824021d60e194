package e2e

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/orion-sched/orion/test/internal/cluster"
)

// Clients write through the standbys while the leader is SIGSTOPped: every
// write is answered while the old leader is still frozen (a standby that
// forwarded it to the frozen leader abandons it once the leader is deposed
// and sends it again to the successor), and each is applied exactly once:
// a submission makes one DAG (the id-less ones under the id the standby
// chose, answered as created), a retry one run, a cancellation cancels.
// The time each write took is logged, not asserted (test/drills asserts the
// bound under make drills).
func TestWritesThroughStandbysRideOutAFrozenLeader(t *testing.T) {
	c := cluster.New(t, cluster.Options{})
	old, _ := c.Leader()
	var standbys []*cluster.Server
	for _, s := range c.Servers {
		if s != old {
			standbys = append(standbys, s)
		}
	}
	w := c.PrepareStandbyWrites("fw", 3, nil)
	w.Start(standbys)
	c.WaitFor("writes answered before the fault", 30*time.Second, func() (bool, string) {
		n := w.Answered()
		return n >= 20, fmt.Sprintf("%d answered", n)
	})

	t0 := time.Now()
	old.Signal(syscall.SIGSTOP) // the cluster's stop sends SIGCONT first, should the test end here
	nl, me := c.AwaitNewLeader(old.Name, t0, 30*time.Second)
	t.Logf("stopped leader %s; %s leads, first commit %v after SIGSTOP", old.Name, nl.Name, me.FirstCommitAt.Sub(t0).Round(time.Millisecond))
	// Writes go on for a while under the new leader, the old one frozen.
	before := w.Answered()
	c.WaitFor("writes answered under the new leader", 30*time.Second, func() (bool, string) {
		n := w.Answered() - before
		return n >= 40, fmt.Sprintf("%d answered since the fault", n)
	})
	writes := w.Stop()
	if !old.Running() {
		t.Fatalf("%s exited while stopped", old.Name)
	}
	// Every write was answered while the old leader was frozen: none
	// waited for it (it has not been continued yet).
	rep := w.Check(nl.URL)
	old.Signal(syscall.SIGCONT)

	var during []cluster.Write
	for _, wr := range writes {
		if wr.Sent.After(t0.Add(-StandbyFaultMargin)) {
			during = append(during, wr)
		}
	}
	var slowest time.Duration
	for _, wr := range during {
		slowest = max(slowest, wr.Took)
	}
	t.Logf("%d writes through the standbys (%d sent around the fault): %d answered 2xx, %d answered 503 with Retry-After, %d retries 409 (not failed yet at the leader); "+
		"slowest %v (%s %s via %s, %d); slowest around the fault %v", rep.Writes, len(during), rep.Answered2xx, rep.Answered503, rep.Answered409, rep.Slowest.Round(time.Millisecond),
		rep.SlowestWrite.Kind, rep.SlowestWrite.Name, rep.SlowestWrite.Via, rep.SlowestWrite.Code, slowest.Round(time.Millisecond))
	if len(rep.Unanswered) > 0 {
		t.Errorf("writes not answered within %v while the leader was frozen: %s", cluster.StandbyWriteTimeout, strings.Join(rep.Unanswered, "; "))
	}
	if len(rep.Unexpected) > 0 {
		t.Errorf("writes answered neither 2xx nor 503 with Retry-After: %s", strings.Join(rep.Unexpected, "; "))
	}
	if len(rep.NotOnce) > 0 {
		t.Errorf("writes not applied exactly once: %s", strings.Join(rep.NotOnce, "; "))
	}
	if rep.Answered2xx == 0 {
		t.Error("no write succeeded")
	}
	c.WaitDAGs(rep.Accepted, 2*time.Minute)
}

// StandbyFaultMargin: a write sent this long before the fault may still be
// in flight when it lands.
const StandbyFaultMargin = time.Second
