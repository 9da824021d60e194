package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/orion-sched/orion/test/internal/cluster"
)

// Outputs across kill -9 of the leader, on 3 etcd + 3 replicas + 2
// workers: DAGs of producers that publish a random value each, tasks that
// read two of them and publish their sum (as text), and a last task that
// reads those and one producer's; the leader is killed twice while they
// run. Every task runs once, and each task downstream saw exactly the
// outputs its upstream produced and committed: what it wrote is what the
// producers wrote, and what the API shows as committed.
func TestOutputsAcrossLeaderKills(t *testing.T) {
	c := cluster.New(t, cluster.Options{})
	ids := map[string][]string{}
	var order []string
	submit := func(n int) {
		for range n {
			id := fmt.Sprintf("outs-%d", len(order)+1)
			d, tasks := outputsDAG(id, c.Work)
			c.SubmitAny(d)
			ids[id], order = tasks, append(order, id)
		}
	}
	submit(4)
	for k := 1; k <= 2; k++ {
		if c.UnfinishedTasks(order) < 12 {
			submit(2)
		}
		c.WaitFor(fmt.Sprintf("kill %d: a task running", k), 30*time.Second, func() (bool, string) {
			n := c.RunningTasks(order)
			return n > 0, fmt.Sprintf("%d tasks running", n)
		})
		old, rep := c.Leader()
		t0 := time.Now()
		old.Kill9()
		nl, me := c.AwaitNewLeader(old.Name, t0, 30*time.Second)
		t.Logf("kill %d: killed leader %s (pid %d); %s leads, first commit %v after the kill", k, old.Name, rep.PID, nl.Name,
			me.FirstCommitAt.Sub(t0).Round(time.Millisecond))
		c.Restart(old)
		c.WaitWorkers()
	}
	final := c.WaitDAGs(order, 2*time.Minute)
	for _, id := range order {
		if d := final[id]; d.Status != "succeeded" {
			t.Fatalf("%s %s", id, cluster.StatusOf(d))
		}
	}
	c.CheckRanOnce(ids)

	// What each task wrote, and what the API says it committed.
	wrote := func(dag, task string) string {
		b, err := os.ReadFile(filepath.Join(c.Work, dag+"."+task))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	committed := func(dag, task string) string {
		var v struct {
			Outputs map[string]json.RawMessage `json:"outputs"`
		}
		if err := c.GetJSON(c.Servers[0].URL, "/api/v1/dags/"+dag+"/tasks/"+task, &v); err != nil {
			t.Fatal(err)
		}
		var s string
		if err := json.Unmarshal(v.Outputs["v"], &s); err != nil {
			t.Fatalf("%s/%s outputs %v: %v", dag, task, v.Outputs, err)
		}
		return s
	}
	checked := 0
	for _, id := range order {
		p := map[string]string{}
		for _, tk := range []string{"p1", "p2", "p3", "p4"} {
			p[tk] = wrote(id, tk)
			if got := committed(id, tk); got != p[tk] {
				t.Errorf("%s/%s produced %q, committed %q", id, tk, p[tk], got)
			}
		}
		for m, ins := range map[string][2]string{"m1": {"p1", "p2"}, "m2": {"p3", "p4"}} {
			want := p[ins[0]] + "+" + p[ins[1]]
			if got := wrote(id, m); got != want {
				t.Errorf("%s/%s read %q, its upstream produced %q", id, m, got, want)
			}
			if got := committed(id, m); got != want {
				t.Errorf("%s/%s committed %q, want %q", id, m, got, want)
			}
		}
		want := p["p1"] + "+" + p["p2"] + "|" + p["p3"] + "+" + p["p4"] + "|" + p["p1"]
		if got := wrote(id, "last"); got != want {
			t.Errorf("%s/last read %q, want %q", id, got, want)
		}
		checked++
	}
	t.Logf("%d DAGs: every downstream task read exactly the outputs its upstream produced and committed", checked)
}

// outputsDAG is four producers, two tasks reading two of them each, and a
// last one reading those and a producer. Each task appends one line per
// run to WORK/DAG.TASK: a producer its random value, the others what
// their templates rendered.
func outputsDAG(id, work string) (map[string]any, []string) {
	record := fmt.Sprintf(`%s/$ORION_DAG_ID.$ORION_TASK_ID`, work)
	producer := `v="$ORION_TASK_ID.$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')"; echo "$v" >> ` + record +
		`; echo "v=$v" > "$ORION_OUTPUTS"; sleep 0.3`
	mid := func(a, b string) string {
		v := fmt.Sprintf("{{ tasks.%s.outputs.v }}+{{ tasks.%s.outputs.v }}", a, b)
		return fmt.Sprintf(`echo "%s" >> %s; echo "v=%s" > "$ORION_OUTPUTS"; sleep 0.2`, v, record, v)
	}
	tasks := []map[string]any{
		{"id": "p1", "command": producer}, {"id": "p2", "command": producer},
		{"id": "p3", "command": producer}, {"id": "p4", "command": producer},
		{"id": "m1", "command": mid("p1", "p2"), "depends_on": []string{"p1", "p2"}},
		{"id": "m2", "command": mid("p3", "p4"), "depends_on": []string{"p3", "p4"}},
		{"id": "last", "command": fmt.Sprintf(`echo "{{ tasks.m1.outputs.v }}|{{ tasks.m2.outputs.v }}|{{ tasks.p1.outputs.v }}" >> %s`, record),
			"depends_on": []string{"m1", "m2"}},
	}
	var names []string
	for _, tk := range tasks {
		tk["kind"], tk["max_retries"] = "shell", 3
		names = append(names, tk["id"].(string))
	}
	return map[string]any{"id": id, "name": id, "tasks": tasks}, names
}
