package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// apiError is the JSON of every /api/v1 error.
type apiError struct {
	Error struct {
		Code    string   `json:"code"`
		Message string   `json:"message"`
		Details []string `json:"details"`
	} `json:"error"`
}

// wantRefusal checks a refusal: its status, its code, and that its message
// names the setting and its value.
func wantRefusal(t *testing.T, what string, code int, body []byte, status int, errCode string, names ...string) {
	t.Helper()
	var e apiError
	if code != status || json.Unmarshal(body, &e) != nil || e.Error.Code != errCode {
		t.Fatalf("%s: want %d %s, got %d %s", what, status, errCode, code, body)
	}
	for _, n := range names {
		if !strings.Contains(e.Error.Message, n) {
			t.Errorf("%s: the message does not name %q: %s", what, n, e.Error.Message)
		}
	}
}

// The global limits, on the real binary: each refused with its JSON error
// naming the setting and its value, counted in
// orion_admission_refused_total, and the CLI printing the refusal. Nothing
// refused is written: the DAG or schedule is not there afterwards.
func TestGlobalLimits(t *testing.T) {
	n := newNode(t, "--slots", "2", "--max-live-dags", "2", "--max-live-tasks", "5", "--max-tasks-per-dag", "5",
		"--max-schedules", "2", "--min-schedule-interval", "10s")
	n.start()

	sleeping := func(id string, tasks int) []byte {
		var ts []string
		for i := range tasks {
			ts = append(ts, fmt.Sprintf(`{"id": "t%d", "command": "sleep 600"}`, i))
		}
		return fmt.Appendf(nil, `{"id": %q, "name": %q, "tasks": [%s]}`, id, id, strings.Join(ts, ","))
	}
	post := func(body []byte) (int, []byte) { return n.do("POST", "/api/v1/dags", "application/json", body) }

	// max_live_tasks: 3 + 3 is more than 5 tasks in running DAGs.
	if code, out := post(sleeping("d1", 3)); code != 201 {
		t.Fatalf("d1: %d %s", code, out)
	}
	code, out := post(sleeping("d2", 3))
	wantRefusal(t, "a second DAG of 3 tasks", code, out, http.StatusTooManyRequests, "too_many_live_tasks", "max_live_tasks 5")
	// max_live_dags: 2 DAGs run, a third is refused.
	if code, out := post(sleeping("d3", 1)); code != 201 {
		t.Fatalf("d3: %d %s", code, out)
	}
	code, out = post(sleeping("d4", 1))
	wantRefusal(t, "a third DAG", code, out, http.StatusTooManyRequests, "too_many_live_dags", "max_live_dags 2")
	if _, code := n.dag("d4"); code != http.StatusNotFound {
		t.Errorf("the refused d4 exists: %d", code)
	}
	// Retry-After, and the CLI says it.
	resp, err := http.Post(n.url()+"/api/v1/dags", "application/json", bytes.NewReader(sleeping("d5", 1)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Errorf("too_many_live_dags: %d, Retry-After %q", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	file := filepath.Join(t.TempDir(), "d6.json")
	if err := os.WriteFile(file, sleeping("d6", 1), 0o644); err != nil {
		t.Fatal(err)
	}
	cli, err := n.orion("submit", "-f", file)
	if err == nil || !strings.Contains(cli, "max_live_dags 2") {
		t.Errorf("orion submit over the limit: %v\n%s", err, cli)
	}
	// Once a DAG finishes (cancelled), there is room again.
	if code, out := n.do("POST", "/api/v1/dags/d1/cancel", "", nil); code != 200 {
		t.Fatalf("cancel d1: %d %s", code, out)
	}
	if code, out := post(sleeping("d7", 1)); code != 201 {
		t.Fatalf("d7 after a cancellation: %d %s", code, out)
	}
	if got := n.metric("orion_live_dags"); got != 2 {
		t.Errorf("orion_live_dags %v, want 2", got)
	}

	// Schedules: the interval, then the count.
	schedule := func(id, cron string) []byte {
		return fmt.Appendf(nil, `{"id": %q, "schedule": {"cron": %q}, "tasks": [{"id": "a", "kind": "noop"}]}`, id, cron)
	}
	code, out = n.do("POST", "/api/v1/schedules", "application/json", schedule("fast", "@every 5s"))
	wantRefusal(t, "a schedule every 5s", code, out, http.StatusBadRequest, "schedule_too_frequent", "min_schedule_interval 10s", "5s")
	code, out = n.do("POST", "/api/v1/schedules", "application/json", schedule("fast2", "*/2 * * * * *"))
	wantRefusal(t, "a schedule every 2 s by cron", code, out, http.StatusBadRequest, "schedule_too_frequent", "min_schedule_interval 10s")
	for _, id := range []string{"s1", "s2"} {
		if code, out := n.do("POST", "/api/v1/schedules", "application/json", schedule(id, "@every 1h")); code != 201 {
			t.Fatalf("schedule %s: %d %s", id, code, out)
		}
	}
	code, out = n.do("POST", "/api/v1/schedules", "application/json", schedule("s3", "@every 1h"))
	wantRefusal(t, "a third schedule", code, out, http.StatusTooManyRequests, "too_many_schedules", "max_schedules 2")
	// An update of one is not a new one.
	if code, out := n.do("POST", "/api/v1/schedules", "application/json", schedule("s2", "@every 2h")); code != 200 {
		t.Fatalf("updating s2 at the limit: %d %s", code, out)
	}
	if code, _ := n.do("GET", "/api/v1/schedules/s3", "", nil); code != http.StatusNotFound {
		t.Errorf("the refused s3 exists: %d", code)
	}
	for limit, want := range map[string]float64{"max_live_dags": 2, "max_live_tasks": 1, "max_schedules": 1, "min_schedule_interval": 2} {
		if got := n.metric(`orion_admission_refused_total{limit="` + limit + `"}`); got < want {
			t.Errorf("orion_admission_refused_total{limit=%q} %v, want at least %v", limit, got, want)
		}
	}
}

// Storage, on the real binary with its embedded etcd at a small quota:
// large DAGs posted past the first 507 are refused one after the other,
// etcd raises no alarm, the leader keeps its term, and after kill -9 the
// restarted server leads again (a lease, an election key and a term record
// still fit) and says the storage is limited, not that etcd is unreachable.
func TestStorageAdmissionRestart(t *testing.T) {
	n := newNode(t, "--embedded-etcd-quota-bytes", fmt.Sprint(16<<20), "--slots", "2", "--session-ttl", "3s")
	n.start()
	large := func(id string) []byte {
		var ts []string
		for i := range 14 {
			ts = append(ts, fmt.Sprintf(`{"id": "t%d", "command": "sleep 600 # %s"}`, i, strings.Repeat("x", 64000)))
		}
		return fmt.Appendf(nil, `{"id": %q, "name": %q, "tasks": [%s]}`, id, id, strings.Join(ts, ","))
	}
	accepted := 0
	for ; accepted < 100; accepted++ {
		code, out := n.do("POST", "/api/v1/dags", "application/json", large(fmt.Sprintf("large-%02d", accepted)))
		if code == 201 {
			continue
		}
		wantRefusal(t, "a large DAG at the limit", code, out, http.StatusInsufficientStorage, "storage_full", "storage_admission_ratio 0.5")
		break
	}
	t.Logf("%d large DAGs accepted before the first 507", accepted)
	var self struct {
		LeaderSince time.Time `json:"leader_since"`
	}
	n.getJSON("/api/v1/cluster/self", &self)
	for i := range 20 {
		code, out := n.do("POST", "/api/v1/dags", "application/json", large(fmt.Sprintf("more-%02d", i)))
		wantRefusal(t, "a large DAG past the first 507", code, out, http.StatusInsufficientStorage, "storage_full", "storage_admission_ratio")
	}
	var after struct {
		LeaderSince time.Time `json:"leader_since"`
	}
	n.getJSON("/api/v1/cluster/self", &after)
	if !after.LeaderSince.Equal(self.LeaderSince) {
		t.Errorf("the leader's term moved: since %s → %s", self.LeaderSince, after.LeaderSince)
	}
	storage := func() (int, map[string]any) {
		var r struct {
			Problem string         `json:"problem"`
			Storage map[string]any `json:"storage"`
		}
		code, body := n.do("GET", "/readyz", "", nil)
		_ = json.Unmarshal(body, &r)
		if r.Problem != "" {
			t.Errorf("/readyz has a problem: %s", r.Problem)
		}
		return code, r.Storage
	}
	if code, st := storage(); code != 200 || st["state"] != "limited" || st["nospace_alarm"] == true {
		t.Fatalf("/readyz at the limit: %d %v", code, st)
	}
	out, err := n.orion("cluster")
	if err != nil || !strings.Contains(out, "etcd storage: limited") || strings.Contains(out, "NOSPACE on member") {
		t.Errorf("orion cluster at the limit: %v\n%s", err, out)
	}

	n.kill9()
	restarted := time.Now()
	n.start()
	// The killed process's election key lives on until its 3 s lease
	// lapses, under the same name: wait for this process itself to lead.
	deadline := time.Now().Add(30 * time.Second)
	for {
		var me struct {
			Role          string     `json:"role"`
			FirstCommitAt *time.Time `json:"first_commit_at"`
		}
		if n.getJSON("/api/v1/cluster/self", &me); me.Role == "leader" && me.FirstCommitAt != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the restarted server does not lead: %+v\n%s", me, n.logs())
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("after kill -9 the restarted server led and was ready %v after its start", time.Since(restarted).Round(time.Millisecond))
	code, out2 := n.do("POST", "/api/v1/dags", "application/json", large("after-restart"))
	wantRefusal(t, "a large DAG after the restart", code, out2, http.StatusInsufficientStorage, "storage_full", "storage_admission_ratio")
	// Limited for the work it refused (published within a quarter second).
	deadline = time.Now().Add(5 * time.Second)
	for code, st := storage(); code != 200 || st["state"] != "limited" || st["nospace_alarm"] == true; code, st = storage() {
		if time.Now().After(deadline) {
			t.Fatalf("/readyz after the restart: %d %v", code, st)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if d, code := n.dag("large-00"); code != 200 || d.Status != "running" {
		t.Errorf("an accepted DAG after the restart: %d %+v", code, d)
	}
}

// The acceptance case of issue 27, on the real binary with its embedded
// etcd at a 16 MiB quota: DAGs still running fill the storage up to the
// admission limit; new DAGs get 507 with a JSON error naming the storage
// and its setting, the leader keeps its term, etcd raises no alarm, and
// /readyz and `orion cluster` say the storage is limited (not that etcd
// is unreachable). The user then cancels every DAG, over HTTP and with
// `orion cancel`: each cancellation gets through, and within a minute,
// with no step by hand (no `etcdctl del`), a new DAG is accepted and runs:
// the leader deleted the cancelled DAGs ahead of their retention.
func TestStorageFullOfRunningDAGsCancelled(t *testing.T) {
	// A 3 s lease: what the test watches is space, not whether a loaded
	// machine lets a 1 s lease lapse (that would move the term it checks).
	n := newNode(t, "--embedded-etcd-quota-bytes", fmt.Sprint(16<<20), "--slots", "2", "--session-ttl", "3s")
	n.start()
	// About 190 KiB each: 8 sleeping tasks with 24,000-byte commands.
	padded := func(id, cmd string) []byte {
		var ts []string
		for i := range 8 {
			ts = append(ts, fmt.Sprintf(`{"id": "t%d", "command": %q}`, i, cmd+" # "+strings.Repeat("x", 24000)))
		}
		return fmt.Appendf(nil, `{"id": %q, "name": %q, "tasks": [%s]}`, id, id, strings.Join(ts, ","))
	}
	post := func(body []byte) (int, []byte) { return n.do("POST", "/api/v1/dags", "application/json", body) }
	var self struct {
		LeaderSince time.Time `json:"leader_since"`
	}
	n.getJSON("/api/v1/cluster/self", &self)

	id := func(i int) string { return fmt.Sprintf("fill-%03d", i) }
	accepted := 0
	for ; ; accepted++ {
		if accepted == 200 {
			t.Fatal("200 DAGs accepted and no 507: the admission limit never applied")
		}
		code, out := post(padded(id(accepted), "sleep 600"))
		if code == http.StatusCreated {
			continue
		}
		wantRefusal(t, "a DAG at the limit", code, out, http.StatusInsufficientStorage, "storage_full", "storage full", "storage_admission_ratio 0.5")
		break
	}
	if accepted == 0 {
		t.Fatal("the first DAG was refused")
	}
	t.Logf("%d DAGs of 8 sleeping tasks accepted before the first 507", accepted)
	// A DAG whose tasks end at once is refused as well, as many times as
	// it is posted, and what is refused is not written.
	after := padded("after", "true")
	for range 10 {
		code, out := post(after)
		wantRefusal(t, "a DAG past the first 507", code, out, http.StatusInsufficientStorage, "storage_full", "storage_admission_ratio 0.5")
	}
	if _, code := n.dag("after"); code != http.StatusNotFound {
		t.Fatalf("the refused DAG exists: %d", code)
	}

	type ready struct {
		Status  string `json:"status"`
		Problem string `json:"problem"`
		Storage struct {
			State        string `json:"state"`
			NoSpaceAlarm bool   `json:"nospace_alarm"`
			Message      string `json:"message"`
		} `json:"storage"`
	}
	// The engine publishes its storage view every quarter second: poll.
	var r ready
	deadline := time.Now().Add(5 * time.Second)
	for {
		r = ready{}
		code, body := n.getJSON("/readyz", &r)
		if code != 200 || r.Status != "ready" || r.Problem != "" || r.Storage.NoSpaceAlarm {
			t.Fatalf("/readyz at the limit: %d %s", code, body)
		}
		if r.Storage.State == "limited" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz does not say the storage is limited: %s", body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("/readyz at the limit: %s", r.Storage.Message)
	if out, err := n.orion("cluster"); err != nil || !strings.Contains(out, "etcd storage: limited") || strings.Contains(out, "etcd alarm") ||
		strings.Contains(out, "unreachable") {
		t.Errorf("orion cluster at the limit: %v\n%s", err, out)
	}

	// The user cancels everything: one with the CLI, the rest over HTTP.
	cancelled := time.Now()
	if out, err := n.orion("cancel", id(0)); err != nil {
		t.Fatalf("orion cancel %s: %v\n%s", id(0), err, out)
	}
	for i := 1; i < accepted; i++ {
		if code, out := n.do("POST", "/api/v1/dags/"+id(i)+"/cancel", "", nil); code != http.StatusOK {
			t.Fatalf("cancel %s under storage pressure: %d %s", id(i), code, out)
		}
	}
	t.Logf("%d DAGs cancelled in %v", accepted, time.Since(cancelled).Round(time.Millisecond))
	// Within a minute, by itself.
	deadline = time.Now().Add(time.Minute)
	for {
		code, out := post(after)
		if code == http.StatusCreated || code == http.StatusOK {
			break
		}
		if code != http.StatusInsufficientStorage {
			t.Fatalf("a new DAG after the cancellations: %d %s", code, out)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no new DAG accepted within a minute of the cancellations: %s\n%s", out, n.logs())
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Logf("a new DAG accepted %v after the cancellations began", time.Since(cancelled).Round(time.Millisecond))
	if d := n.waitDAG("after", time.Minute); d.Status != "succeeded" {
		t.Fatalf("the new DAG: %+v", d)
	}
	// The first cancelled DAG went first (those that finished first are
	// deleted first), long before its 24 h retention; the others that are
	// still there are cancelled.
	if _, code := n.dag(id(0)); code != http.StatusNotFound {
		t.Errorf("the DAG cancelled first is still there (%d): nothing was deleted ahead of its retention", code)
	}
	left := 0
	for i := range accepted {
		d, code := n.dag(id(i))
		if code == http.StatusOK {
			left++
			if d.Status != "cancelled" {
				t.Errorf("%s: %s after its cancellation", id(i), d.Status)
			}
		}
	}
	deleted := n.metric("orion_storage_pressure_deleted_dags_total")
	if deleted < 1 {
		t.Error("orion_storage_pressure_deleted_dags_total is 0")
	}
	t.Logf("%.0f DAGs deleted ahead of their retention (%d cancelled left), %.0f compactions", deleted, left,
		n.metric("orion_storage_pressure_compactions_total"))

	var after2 struct {
		LeaderSince time.Time `json:"leader_since"`
	}
	n.getJSON("/api/v1/cluster/self", &after2)
	if !after2.LeaderSince.Equal(self.LeaderSince) {
		t.Errorf("the leader's term moved: since %s → %s", self.LeaderSince, after2.LeaderSince)
	}
	if code, body := n.getJSON("/readyz", &r); code != 200 || r.Problem != "" || r.Storage.NoSpaceAlarm {
		t.Errorf("/readyz at the end: %d %s", code, body)
	}
}
