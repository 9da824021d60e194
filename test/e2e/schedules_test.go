package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/orion-sched/orion/test/internal/cluster"
)

type runsJSON struct {
	Runs []struct {
		ID     string `json:"id"`
		Manual bool   `json:"manual"`
		Status string `json:"status"`
	} `json:"runs"`
}

type scheduleJSON struct {
	ID       string      `json:"id"`
	Paused   bool        `json:"paused"`
	LastTick *time.Time  `json:"last_tick"`
	LastRun  string      `json:"last_run"`
	Next     []time.Time `json:"next"`
}

// A schedule's life through the CLI and the API of a real server: created
// by `orion submit -f` of a file with a schedule: block, firing every
// second, listed with its next ticks, its runs each run once (also across a
// kill -9 of the server), paused, triggered by hand, readable with etcdctl,
// deleted; and bad schedules refused with 400s naming the field.
func TestScheduleLifecycle(t *testing.T) {
	n := newNode(t, "--slots", "2")
	n.start()
	marks := t.TempDir()
	file := filepath.Join(t.TempDir(), "tick.yaml")
	body := fmt.Sprintf(`id: tick
name: ticker
schedule:
  cron: "@every 1s"
  overlap: skip
tasks:
  - id: mark
    command: echo "$ORION_SCHEDULE_TICK" >> %s/$ORION_DAG_ID
`, marks)
	if err := os.WriteFile(file, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := n.orion("submit", "-f", file)
	if err != nil || !strings.Contains(out, "schedule tick created") || !strings.Contains(out, "next:") {
		t.Fatalf("orion submit -f of a scheduled file: %v\n%s", err, out)
	}
	if out, err := n.orion("schedule", "create", "-f", file); err != nil || !strings.Contains(out, "schedule tick unchanged") {
		t.Fatalf("the same file again: %v\n%s", err, out)
	}

	runs := func() runsJSON {
		t.Helper()
		var r runsJSON
		if code, b := n.getJSON("/api/v1/schedules/tick/runs", &r); code != 200 {
			t.Fatalf("runs: %d %s", code, b)
		}
		return r
	}
	waitRuns := func(what string, cond func(r runsJSON) bool) runsJSON {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			r := runs()
			if cond(r) {
				return r
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 60s: %+v\n%s", what, r, n.logs())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	succeeded := func(min int) func(r runsJSON) bool {
		return func(r runsJSON) bool {
			done := 0
			for _, x := range r.Runs {
				if x.Status == "succeeded" {
					done++
				}
			}
			return done >= min
		}
	}
	waitRuns("two ticks run", succeeded(2))

	out, err = n.orion("schedule", "list")
	if err != nil || !strings.Contains(out, "tick") || !strings.Contains(out, "@every 1s") || !strings.Contains(out, "active") {
		t.Fatalf("schedule list: %v\n%s", err, out)
	}
	var sv scheduleJSON
	if code, b := n.getJSON("/api/v1/schedules/tick", &sv); code != 200 || len(sv.Next) != 5 || sv.LastRun == "" {
		t.Fatalf("get: %d %s", code, b)
	}

	// kill -9 and a restart: the schedule goes on from its cursor.
	before := len(runs().Runs)
	n.kill9()
	n.start()
	waitRuns("ticks after the restart", succeeded(before+2))

	out, err = n.orion("schedule", "pause", "tick")
	if err != nil || !strings.Contains(out, "paused") {
		t.Fatalf("pause: %v\n%s", err, out)
	}
	// Submitting the file again (a deploy) updates the schedule but leaves
	// it paused: the etcdctl check below reads "paused": true.
	if out, err := n.orion("submit", "-f", file); err != nil {
		t.Fatalf("orion submit -f again: %v\n%s", err, out)
	}
	out, err = n.orion("schedule", "trigger", "tick")
	if err != nil || !strings.HasSuffix(strings.TrimSpace(out), "-m") {
		t.Fatalf("trigger: %v\n%s", err, out)
	}
	manual := strings.TrimSpace(out)
	final := waitRuns("the triggered run and every tick's run finished", func(r runsJSON) bool {
		seen := false
		for _, x := range r.Runs {
			if x.Status != "succeeded" {
				return false
			}
			seen = seen || (x.ID == manual && x.Manual)
		}
		return seen
	})
	// Each run's task ran exactly once.
	for _, r := range final.Runs {
		if got := cluster.Lines(t, filepath.Join(marks, r.ID)); got != 1 {
			t.Errorf("run %s ran %d times", r.ID, got)
		}
	}
	if out, err := n.orion("schedule", "runs", "tick"); err != nil || !strings.Contains(out, manual) || !strings.Contains(out, "trigger") {
		t.Fatalf("schedule runs: %v\n%s", err, out)
	}

	// etcd holds the schedule and its cursor as readable JSON.
	raw, err := exec.Command("etcdctl", "--endpoints", n.etcdURL(), "get", "--print-value-only", "/orion/v1/schedules/tick").Output()
	if err != nil {
		t.Fatalf("etcdctl: %v", err)
	}
	var rec map[string]any
	if err := json.Unmarshal(raw, &rec); err != nil || rec["cron"] != "@every 1s" || rec["paused"] != true {
		t.Fatalf("etcdctl value %s: %v", raw, err)
	}
	raw, err = exec.Command("etcdctl", "--endpoints", n.etcdURL(), "get", "--print-value-only", "/orion/v1/schedule-cursors/tick").Output()
	if err != nil || !strings.Contains(string(raw), `"tick":`) {
		t.Fatalf("etcdctl cursor %s: %v", raw, err)
	}

	// Bad schedules: 400 naming the field.
	for _, tc := range []struct{ schedule, want string }{
		{`cron: "61 * * * *"`, "schedule.cron"},
		{`cron: "@every 1s"` + "\n  timezone: Mars/Olympus", "schedule.timezone: unknown time zone"},
		{`cron: "@hourly"` + "\n  max_active_runs: -1", "schedule.max_active_runs"},
		{`cron: "@hourly"` + "\n  catchup_limit: -3", "schedule.catchup_limit"},
		{`cron: "@hourly"` + "\n  overlap: sometimes", "schedule.overlap"},
		// Its next tick would be in year 10000, which no JSON time can carry.
		{`cron: "@every 1m"` + "\n  start: 9999-12-31T23:59:59Z", "schedule.start: no tick"},
	} {
		b := "id: bad\nschedule:\n  " + tc.schedule + "\ntasks: [{id: a}]\n"
		code, resp := n.do("POST", "/api/v1/schedules", "application/yaml", []byte(b))
		if code != 400 || !strings.Contains(string(resp), tc.want) || !strings.Contains(string(resp), `"invalid_schedule"`) {
			t.Errorf("%q: %d %s", tc.schedule, code, resp)
		}
	}
	// The same schedule written by hand with etcdctl (validation never saw
	// it) fires nothing and breaks no listing.
	rec["id"], rec["start"] = "far", "9999-12-31T23:59:59Z"
	far, _ := json.Marshal(rec)
	if out, err := exec.Command("etcdctl", "--endpoints", n.etcdURL(), "put", "/orion/v1/schedules/far", string(far)).CombinedOutput(); err != nil {
		t.Fatalf("etcdctl put: %v %s", err, out)
	}
	var list struct {
		Schedules []scheduleJSON `json:"schedules"`
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		code, b := n.getJSON("/api/v1/schedules", &list)
		if code != 200 {
			t.Fatalf("schedules listed with a hand-written one at the horizon: %d %s", code, b)
		}
		if len(list.Schedules) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the hand-written schedule never listed: %s", b)
		}
	}
	if out, err := n.orion("schedule", "list"); err != nil || !strings.Contains(out, "far") {
		t.Fatalf("schedule list with a schedule at the horizon: %v\n%s", err, out)
	}
	if code, resp := n.do("POST", "/api/v1/dags", "application/yaml", []byte(body)); code != 400 || !strings.Contains(string(resp), "/api/v1/schedules") {
		t.Errorf("a scheduled file posted as a DAG: %d %s", code, resp)
	}

	out, err = n.orion("schedule", "delete", "tick")
	if err != nil || !strings.Contains(out, "deleted") {
		t.Fatalf("delete: %v\n%s", err, out)
	}
	if code, _ := n.getJSON("/api/v1/schedules/tick", &sv); code != 404 {
		t.Errorf("get after delete: %d", code)
	}
	if d, code := n.dag(manual); code != 200 || d.Status != "succeeded" {
		t.Errorf("a run outlives its schedule: %d %+v", code, d)
	}
}
