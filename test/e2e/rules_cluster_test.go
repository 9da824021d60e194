package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/orion-sched/orion/test/internal/cluster"
)

// Handlers and notifications fire once per DAG end across kill -9 of the
// leader, on 3 etcd members, 3 replicas and 2 workers. Each DAG's on_exit
// records its run and then waits; the leader is killed while every one of
// them runs. The new leader adopts them from the workers (no run again),
// and once they end it dispatches the notifications, which the receiver
// holds in flight; the leader is killed again. When the receiver answers,
// the results reach the third leader. Every handler ran once, every
// notification was delivered once under its key, and each DAG ended as its
// tasks say.
func TestHandlersAndNotificationsAcrossLeaderKills(t *testing.T) {
	// A worker rejoins the new leader well within the orphan grace: an
	// attempt is adopted, never re-queued, unless that worker is gone.
	c := cluster.New(t, cluster.Options{OrphanGrace: 5 * time.Second})
	rcv := newReceiver(t)
	gate, hold := filepath.Join(c.Work, "gate"), filepath.Join(c.Work, "hold")
	const n = 6
	var ids []string
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("hk-%d", i)
		ids = append(ids, id)
		work := fmt.Sprintf("while [ ! -e %s ]; do sleep 0.05; done", gate)
		if i%2 == 1 {
			work += "; exit 4" // a failed DAG: on_failure runs too
		}
		c.SubmitAny(map[string]any{
			"id": id, "name": id,
			"tasks": []map[string]any{
				{"id": "work", "command": work, "max_retries": 0},
				{"id": "report", "command": "echo report", "depends_on": []string{"work"}, "trigger_rule": "all_done"},
			},
			"on_failure": map[string]any{"command": fmt.Sprintf(`echo "$ORION_DAG_ID $ORION_FAILED_TASKS" >> %s/on_failure`, c.Work)},
			"on_exit": map[string]any{"command": fmt.Sprintf(`echo "$ORION_DAG_ID $ORION_DAG_STATUS" >> %s/on_exit; `+
				`while [ ! -e %s ]; do sleep 0.05; done`, c.Work, hold)},
			"notify": []map[string]any{{"url": rcv.url("/hold")}},
		})
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	c.WaitFor("every on_exit running", 60*time.Second, func() (bool, string) {
		var why []string
		for _, id := range ids {
			d, err := c.DAGAny(id)
			if err != nil || d.Task("on_exit").Status != "running" {
				why = append(why, fmt.Sprintf("%s: %v %v", id, cluster.StatusOf(d), err))
			}
		}
		return len(why) == 0, strings.Join(why, "; ")
	})

	killLeader := func(what string) {
		old, _ := c.Leader()
		t0 := time.Now()
		old.Kill9()
		nl, me := c.AwaitNewLeader(old.Name, t0, 30*time.Second)
		t.Logf("%s: killed %s; %s leads, first commit %v after the kill", what, old.Name, nl.Name, me.FirstCommitAt.Sub(t0).Round(time.Millisecond))
		c.Restart(old)
		c.WaitWorkers()
	}
	killLeader("handlers running")
	if err := os.WriteFile(hold, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	c.WaitFor("every notification in flight at the receiver", 60*time.Second, func() (bool, string) {
		return rcv.held() == n, fmt.Sprintf("%d of %d held", rcv.held(), n)
	})
	killLeader("notifications in flight")
	rcv.release()

	final := c.WaitDAGs(ids, 2*time.Minute)
	for i, id := range ids {
		d := final[id]
		want := map[string]string{"work": "succeeded", "report": "succeeded", "on_failure": "skipped", "on_exit": "succeeded",
			"notify[0]": "succeeded"}
		status := "succeeded"
		if i%2 == 1 {
			want["work"], want["on_failure"], status = "failed", "succeeded", "failed"
		}
		checkStatuses(t, d.Status, status, d.Tasks, want)
		for _, h := range []string{"on_exit", "notify[0]"} {
			if a := d.Task(h).Attempts; a != 1 {
				t.Errorf("%s/%s: %d attempts, want 1", id, h, a)
			}
		}
		key := id + "/1/0"
		got := rcv.of(key)
		if len(got) != 1 || got[0].body.Status != status || got[0].body.Delivery != key {
			t.Errorf("%s: deliveries %+v, want one, of a DAG %s", key, got, status)
		}
	}
	if keys := rcv.keys(); len(keys) != n {
		t.Errorf("keys delivered: %v", keys)
	}
	checkOnce(t, filepath.Join(c.Work, "on_exit"), ids, func(i int) string {
		if i%2 == 1 {
			return "failed"
		}
		return "succeeded"
	})
	var failed []string
	for i, id := range ids {
		if i%2 == 1 {
			failed = append(failed, id)
		}
	}
	checkOnce(t, filepath.Join(c.Work, "on_failure"), failed, func(int) string { return "work" })
}

// checkOnce asserts that the file has exactly one line "<id> <what(i)>" per
// id, and nothing else.
func checkOnce(t *testing.T, path string, ids []string, what func(i int) string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Split(strings.TrimSpace(string(b)), "\n")
	sort.Strings(got)
	var want []string
	for i, id := range ids {
		want = append(want, id+" "+what(i))
	}
	sort.Strings(want)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("%s:\n%s\nwant each once:\n%s", filepath.Base(path), strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
