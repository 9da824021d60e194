package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/orion-sched/orion/test/internal/cluster"
)

// Run-time fan-out across kill -9 of the leader, on 3 etcd + 3 replicas +
// 2 workers: list publishes 1,000 partitions; process maps over them, one
// shell instance each, which appends a line to a file of its own and
// publishes a value; merge reads the list of their outputs. The leader is
// killed while the instances run. The expansion happens once (one
// attempt of the group, 1,000 instances), each instance runs exactly once,
// and merge sees exactly the outputs produced, in index order.
func TestForEachAcrossLeaderKill(t *testing.T) {
	const n = 1000
	c := cluster.New(t, cluster.Options{})
	id := "fanout-1"
	record := c.Work + "/$ORION_DAG_ID.$ORION_TASK_ID"
	parts := make([]string, n)
	for i := range parts {
		parts[i] = fmt.Sprintf(`"p%d"`, i)
	}
	dag := map[string]any{"id": id, "name": id, "tasks": []map[string]any{
		{"id": "list", "command": fmt.Sprintf(`echo 'parts=[%s]' > "$ORION_OUTPUTS"`, strings.Join(parts, ","))},
		{"id": "process", "depends_on": []string{"list"}, "for_each": "{{ tasks.list.outputs.parts }}", "max_retries": 3,
			"command": `echo "$ORION_ITEM" >> "` + record + `"; echo "v={{ item }}-$ORION_INDEX" > "$ORION_OUTPUTS"; sleep 0.02`},
		{"id": "merge", "depends_on": []string{"process"},
			"command": `echo '{{ len(tasks.process.outputs) }} {{ join(map(tasks.process.outputs, #.v), ",") }}' > "` + record + `"`},
	}}
	c.SubmitAny(dag)

	progress := func() (int, string) {
		d, err := c.DAGAny(id)
		if err != nil {
			return 0, err.Error()
		}
		m := d.Task("process").Map
		if m == nil || !m.Expanded {
			return 0, "process not expanded yet"
		}
		return m.Counts["succeeded"], fmt.Sprintf("%d instances, %v", m.Count, m.Counts)
	}
	c.WaitFor("a tenth of the instances done", 60*time.Second, func() (bool, string) {
		done, why := progress()
		return done >= n/10, why
	})
	old, rep := c.Leader()
	t0 := time.Now()
	old.Kill9()
	done, why := progress()
	nl, me := c.AwaitNewLeader(old.Name, t0, 30*time.Second)
	t.Logf("killed leader %s (pid %d) with %d of %d instances done (%s); %s leads, first commit %v after the kill",
		old.Name, rep.PID, done, n, why, nl.Name, me.FirstCommitAt.Sub(t0).Round(time.Millisecond))
	if done >= n {
		t.Fatalf("the fan-out ended before the kill (%s): the test proves nothing", why)
	}
	c.Restart(old)
	c.WaitWorkers()

	final := c.WaitDAGs([]string{id}, 3*time.Minute)
	d := final[id]
	if d.Status != "succeeded" {
		t.Fatalf("%s %s", id, cluster.StatusOf(d))
	}
	g := d.Task("process")
	if g.Map == nil || g.Map.Count != n || g.Map.Counts["succeeded"] != n || g.Attempts != 1 {
		t.Fatalf("process: attempts %d (expansions), map %+v; want 1 expansion of %d instances, all succeeded", g.Attempts, g.Map, n)
	}
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("process[%d]", i)
	}
	c.CheckRanOnce(map[string][]string{id: append(names, "merge")})
	for i := 0; i < n; i += 97 { // what each recorded: its own item
		if got := readTrim(t, filepath.Join(c.Work, id+"."+names[i])); got != fmt.Sprintf("p%d", i) {
			t.Errorf("%s recorded %q, want p%d", names[i], got, i)
		}
	}
	want := make([]string, n)
	for i := range want {
		want[i] = fmt.Sprintf("p%d-%d", i, i)
	}
	if got, w := readTrim(t, filepath.Join(c.Work, id+".merge")), fmt.Sprintf("%d %s", n, strings.Join(want, ",")); got != w {
		t.Fatalf("merge read %q..., want %q...", cut(got, 120), cut(w, 120))
	}
	t.Logf("one expansion of %d instances, each ran once; merge read exactly their %d outputs, in index order", n, n)
}

func readTrim(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func cut(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
