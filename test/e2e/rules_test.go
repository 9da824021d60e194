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

// The deployment pipeline of test/fixtures as users run it: orion submit
// --wait, then orion get. As written the release succeeds: lint fails but
// may (continue_on_failure), nothing failed for rollback (one_failed) so it
// is skipped, cleanup runs (all_done), on_failure is not needed and on_exit
// says how it ended. With its smoke test failing, rollback runs, cleanup
// still runs, the release fails and on_failure names what failed.
func TestDeployPipeline(t *testing.T) {
	n := newNode(t)
	n.start()

	out, err := n.orion("submit", "-f", fixture("deploy-pipeline.yaml"), "--wait", "--id", "release-1")
	if err != nil {
		t.Fatalf("submit --wait: %v\n%s", err, out)
	}
	d, _ := n.dag("release-1")
	want := map[string]string{"build": "succeeded", "test": "succeeded", "lint": "failed", "deploy": "succeeded",
		"smoke": "succeeded", "rollback": "skipped", "cleanup": "succeeded", "on_failure": "skipped", "on_exit": "succeeded"}
	checkStatuses(t, d.Status, "succeeded", d.Tasks, want)
	if r := d.Task("rollback"); r.Skipped != "trigger_rule" || r.Attempts != 0 {
		t.Errorf("rollback: %+v", r)
	}
	if h := d.Task("on_failure"); h.Skipped != "not_needed" || h.Role != "handler" {
		t.Errorf("on_failure: %+v", h)
	}
	if h := d.Task("on_exit"); !strings.Contains(h.OutputTail, "release ended: succeeded") {
		t.Errorf("on_exit's output %q", h.OutputTail)
	}
	out, err = n.orion("get", "dag", "release-1")
	if err != nil {
		t.Fatalf("get dag: %v\n%s", err, out)
	}
	for _, line := range []string{"lint        shell  failed", "all_success +continue", "rollback    shell  skipped (trigger_rule)  one_failed +when",
		"cleanup     shell  succeeded               all_done", "on_failure  shell  skipped (not_needed)    handler"} {
		if !strings.Contains(out, line) {
			t.Errorf("get dag lacks %q:\n%s", line, out)
		}
	}

	// The same release with a failing smoke test.
	body, err := os.ReadFile(fixture("deploy-pipeline.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	failing := strings.Replace(string(body), "SMOKE_RESULT: pass", "SMOKE_RESULT: fail", 1)
	if failing == string(body) {
		t.Fatal("the fixture no longer sets SMOKE_RESULT: pass")
	}
	path := filepath.Join(t.TempDir(), "deploy-fail.yaml")
	if err := os.WriteFile(path, []byte(failing), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err = n.orion("submit", "-f", path, "--wait", "--id", "release-2")
	if err == nil {
		t.Fatalf("submit --wait of a failing release exited 0:\n%s", out)
	}
	d, _ = n.dag("release-2")
	want["smoke"], want["rollback"], want["on_failure"] = "failed", "succeeded", "succeeded"
	checkStatuses(t, d.Status, "failed", d.Tasks, want)
	if h := d.Task("on_failure"); !strings.Contains(h.OutputTail, "release failed: lint,smoke") {
		t.Errorf("on_failure's output %q", h.OutputTail)
	}
	if h := d.Task("on_exit"); !strings.Contains(h.OutputTail, "release ended: failed") {
		t.Errorf("on_exit's output %q", h.OutputTail)
	}
	out, err = n.orion("get", "task", "release-2/rollback")
	if err != nil || !strings.Contains(out, "Rule:        one_failed") || !strings.Contains(out, `When:        tasks.deploy.status == "succeeded"`) {
		t.Errorf("get task: %v\n%s", err, out)
	}

	// A retry re-runs what did not succeed, judged afresh: the smoke test
	// fails again, so the rollback (which succeeded) is kept, and the
	// handlers run again for the new end.
	if out, err := n.orion("retry", "release-2"); err != nil {
		t.Fatalf("retry: %v\n%s", err, out)
	}
	d = n.waitDAG("release-2", 60*time.Second)
	if d.Run != 2 || d.Status != "failed" || d.Task("smoke").Attempts != 2 || d.Task("rollback").Attempts != 1 ||
		d.Task("on_failure").Attempts != 2 || d.Task("on_exit").Attempts != 2 {
		t.Errorf("after the retry: run %d %s, smoke %d rollback %d on_failure %d on_exit %d attempts", d.Run, d.Status,
			d.Task("smoke").Attempts, d.Task("rollback").Attempts, d.Task("on_failure").Attempts, d.Task("on_exit").Attempts)
	}
}

func checkStatuses(t *testing.T, got, want string, tasks []cluster.TaskState, statuses map[string]string) {
	t.Helper()
	if got != want {
		t.Errorf("DAG %s, want %s", got, want)
	}
	seen := map[string]string{}
	for _, tk := range tasks {
		seen[tk.ID] = tk.Status
	}
	for id, w := range statuses {
		if seen[id] != w {
			t.Errorf("%s: %s, want %s", id, seen[id], w)
		}
	}
	if len(seen) != len(statuses) {
		t.Errorf("tasks %v, want %v", seen, statuses)
	}
}

// A bad condition or a reference to a task a condition may not read is a
// 400 naming the task and the field, over the API and through the CLI.
func TestBadConditionRefused(t *testing.T) {
	n := newNode(t)
	n.start()
	code, body := n.do("POST", "/api/v1/dags", "application/yaml", []byte(`
name: bad
tasks:
  - {id: a, command: "true"}
  - {id: b, command: "true", when: 'tasks.c.status == "failed"'}
  - {id: c, command: "true", depends_on: [a], when: "tasks.a.status =="}
`))
	var e struct {
		Error struct {
			Code    string   `json:"code"`
			Details []string `json:"details"`
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &e); err != nil || code != 400 || e.Error.Code != "invalid_dag" {
		t.Fatalf("%d %s", code, body)
	}
	all := strings.Join(e.Error.Details, "\n")
	for _, w := range []string{`task "b": when: tasks.c: task c is not upstream of this task`, `task "c": when: `} {
		if !strings.Contains(all, w) {
			t.Errorf("details lack %q:\n%s", w, all)
		}
	}
	out, err := n.orion("submit", "-f", fixture("bad/bad-when.yaml"))
	if err == nil || !strings.Contains(out, `task "b": when: tasks.c: task c is not upstream`) {
		t.Errorf("orion submit of a bad condition: %v\n%s", err, out)
	}
}

// Notifications, delivered by the real worker's http attempts to a real
// receiver: one sent on failed is delivered once its 503 has been retried,
// with the same delivery key, and the summary of the DAG's end; one sent on
// succeeded is skipped; one whose endpoint is gone fails for good and
// changes nothing of the DAG's status. The handler gets the outcome and the
// failed tasks; the DAG ends only after its notifications.
func TestNotifications(t *testing.T) {
	n := newNode(t)
	n.start()
	rcv := newReceiver(t)
	dir := t.TempDir()
	id := n.submit(fmt.Sprintf(`
id: notified
name: notified
tasks:
  - {id: a, command: "echo a"}
  - {id: b, command: "echo no >&2; exit 3", max_retries: 0}
  - {id: c, command: "echo c", depends_on: [a, b], trigger_rule: all_done}
on_failure:
  command: 'echo "$ORION_DAG_STATUS $ORION_FAILED_TASKS $ORION_FAILED_COUNT" >> %[1]s/on_failure'
notify:
  - {url: "%[2]s", on: [failed], headers: {X-Team: data}}
  - {url: "%[3]s", on: [succeeded]}
  - {url: "%[4]s", max_retries: 1}
`, dir, rcv.url("/flaky"), rcv.url("/ok"), rcv.url("/gone")))
	d := n.waitDAG(id, 60*time.Second)
	want := map[string]string{"a": "succeeded", "b": "failed", "c": "succeeded", "on_failure": "succeeded",
		"notify[0]": "succeeded", "notify[1]": "skipped", "notify[2]": "failed"}
	checkStatuses(t, d.Status, "failed", d.Tasks, want)
	if got, _ := os.ReadFile(filepath.Join(dir, "on_failure")); string(got) != "failed b 1\n" {
		t.Errorf("on_failure saw %q", got)
	}

	first := rcv.of(id + "/1/0")
	if len(first) != 2 || first[0].answer != 503 || first[1].answer != 204 {
		t.Fatalf("deliveries of notify[0]: %+v", first)
	}
	s := first[1].body
	if first[1].method != "POST" || first[1].ctype != "application/json" || s.DAG != id || s.Run != 1 || s.Status != "failed" ||
		s.Delivery != id+"/1/0" || fmt.Sprint(s.FailedTasks) != "[b]" || s.FailedCount != 1 || s.Counts["succeeded"] != 3 || s.Counts["failed"] != 1 {
		t.Errorf("the summary: %s %s %+v", first[1].method, first[1].ctype, s)
	}
	if got := rcv.of(id + "/1/2"); len(got) != 2 || got[0].answer != 410 || got[1].answer != 410 {
		t.Errorf("deliveries of notify[2]: %+v", got)
	}
	if keys := rcv.keys(); fmt.Sprint(keys) != fmt.Sprintf("[%s/1/0 %s/1/2]", id, id) {
		t.Errorf("keys delivered: %v", keys)
	}
	if tk := d.Task("notify[2]"); !strings.Contains(tk.Error, "410") || tk.Attempts != 2 {
		t.Errorf("notify[2]: %+v", tk)
	}
	if tk := d.Task("notify[1]"); tk.Skipped != "not_needed" || tk.Role != "notification" {
		t.Errorf("notify[1]: %+v", tk)
	}
}

// Cancelling a DAG with handlers: the cancel says the DAG runs on; its task
// is cancelled, on_exit runs once and the notification sent on cancelled
// is delivered, then the DAG is cancelled. A second cancel while on_exit
// runs stops it too.
func TestCancelWithHandlers(t *testing.T) {
	n := newNode(t)
	n.start()
	rcv := newReceiver(t)
	dir := t.TempDir()
	gate := filepath.Join(dir, "gate")
	id := n.submit(fmt.Sprintf(`
id: stopped
name: stopped
tasks:
  - {id: hold, command: 'while [ ! -e %[1]s ]; do sleep 0.05; done'}
  - {id: after, command: "echo after", depends_on: [hold]}
on_exit:
  command: 'echo "$ORION_DAG_STATUS" >> %[2]s/on_exit'
notify:
  - {url: "%[3]s", on: [cancelled]}
`, gate, dir, rcv.url("/ok")))
	waitFor(t, "hold running", 30*time.Second, func() bool { d, _ := n.dag(id); return d.Task("hold").Status == "running" })
	out, err := n.orion("cancel", id)
	if err != nil || !strings.Contains(out, "cancel requested") {
		t.Fatalf("cancel: %v\n%s", err, out)
	}
	d := n.waitDAG(id, 30*time.Second)
	checkStatuses(t, d.Status, "cancelled", d.Tasks, map[string]string{"hold": "cancelled", "after": "cancelled",
		"on_exit": "succeeded", "notify[0]": "succeeded"})
	if got, _ := os.ReadFile(filepath.Join(dir, "on_exit")); string(got) != "cancelled\n" {
		t.Errorf("on_exit ran %q", got)
	}
	if got := rcv.of(id + "/1/0"); len(got) != 1 || got[0].body.Status != "cancelled" {
		t.Errorf("deliveries: %+v", got)
	}

	// Terminate: on_exit waits for the gate; the second cancel stops it.
	id = n.submit(fmt.Sprintf(`
id: terminated
name: terminated
tasks:
  - {id: hold, command: 'while [ ! -e %[1]s ]; do sleep 0.05; done'}
on_exit:
  command: 'while [ ! -e %[1]s ]; do sleep 0.05; done'
`, gate+"-2"))
	waitFor(t, "hold running", 30*time.Second, func() bool { d, _ := n.dag(id); return d.Task("hold").Status == "running" })
	if out, err := n.orion("cancel", id); err != nil {
		t.Fatalf("cancel: %v\n%s", err, out)
	}
	waitFor(t, "on_exit running", 30*time.Second, func() bool { d, _ := n.dag(id); return d.Task("on_exit").Status == "running" })
	out, err = n.orion("cancel", id)
	if err != nil || out != "dag terminated: cancelled\n" {
		t.Fatalf("second cancel: %v\n%s", err, out)
	}
	// The DAG's record is cancelled first, then its unfinished tasks (as
	// any cancel without handlers): wait for those too.
	waitFor(t, "on_exit cancelled", 30*time.Second, func() bool {
		d, _ := n.dag(id)
		return d.Status != "running" && d.Task("hold").Status != "running" && d.Task("on_exit").Status != "running"
	})
	d, _ = n.dag(id)
	checkStatuses(t, d.Status, "cancelled", d.Tasks, map[string]string{"hold": "cancelled", "on_exit": "cancelled"})
}
