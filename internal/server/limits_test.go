package server_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/orion-sched/orion/internal/config"
	"github.com/orion-sched/orion/internal/http/apitypes"
	"github.com/orion-sched/orion/internal/server/servertest"
	"github.com/orion-sched/orion/internal/testutil/testkit"
)

// wantLimit checks a global limit's refusal through the API: its status,
// its code, Retry-After when the count goes down by itself, a message and
// a detail naming the setting and its value.
func wantLimit(t *testing.T, what string, code int, b []byte, hdr http.Header, status int, errCode apitypes.Code, setting string, retry bool) {
	t.Helper()
	var eb apitypes.ErrorBody
	if code != status || json.Unmarshal(b, &eb) != nil || eb.Error.Code != errCode || !strings.Contains(eb.Error.Message, setting) {
		t.Fatalf("%s: want %d %s naming %q, got %d %s", what, status, errCode, setting, code, b)
	}
	if got := hdr.Get("Retry-After") != ""; got != retry {
		t.Errorf("%s: Retry-After %q", what, hdr.Get("Retry-After"))
	}
	if status == http.StatusTooManyRequests && (len(eb.Error.Details) != 1 || eb.Error.Details[0] != setting) {
		t.Errorf("%s: details %q, want [%q]", what, eb.Error.Details, setting)
	}
}

// The global limits through a node's real API: live DAGs and tasks
// (submissions and retries alike), schedules and their interval.
func TestGlobalLimitsThroughTheAPI(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd")
	}
	s, base := servertest.Start(t, func(cfg *config.Server) {
		cfg.Slots, cfg.MaxLiveDAGs, cfg.MaxLiveTasks, cfg.MaxTasksPerDAG = 4, 2, 4, 4
		cfg.MaxSchedules, cfg.MinScheduleInterval = 1, time.Minute
	})
	c := apiClient{t, base}
	post := func(body string) (int, []byte, http.Header) { return c.do("POST", "/api/v1/dags", body) }
	if code, b, _ := post(sleepingDAG("a", 2, 0)); code != http.StatusCreated {
		t.Fatalf("a: %d %s", code, b)
	}
	code, b, hdr := post(sleepingDAG("big", 3, 0))
	wantLimit(t, "3 tasks more", code, b, hdr, http.StatusTooManyRequests, apitypes.CodeTooManyLiveTasks, "max_live_tasks 4", true)
	if code, b, _ := post(noopDAG("quick")); code != http.StatusCreated {
		t.Fatalf("quick: %d %s", code, b)
	}
	code, b, hdr = post(noopDAG("third"))
	wantLimit(t, "a third DAG", code, b, hdr, http.StatusTooManyRequests, apitypes.CodeTooManyLiveDAGs, "max_live_dags 2", true)

	// quick finishes; cancelled, a is done too; both retried: the second
	// retry would be a third live DAG once a new one runs.
	testkit.WaitFor(t, 15*time.Second, "quick to succeed", func() bool { return c.dagStatus("quick") == "succeeded" })
	if code, b, _ := c.do("POST", "/api/v1/dags/a/cancel", ""); code != http.StatusOK {
		t.Fatalf("cancel a: %d %s", code, b)
	}
	testkit.WaitFor(t, 15*time.Second, "a to be cancelled", func() bool { return c.dagStatus("a") == "cancelled" })
	if code, b, _ := post(sleepingDAG("b", 1, 0)); code != http.StatusCreated {
		t.Fatalf("b: %d %s", code, b)
	}
	if code, b, _ := post(sleepingDAG("c", 1, 0)); code != http.StatusCreated {
		t.Fatalf("c: %d %s", code, b)
	}
	var code2 int
	testkit.WaitFor(t, 15*time.Second, "a's tasks to stop", func() bool {
		code2, b, hdr = c.do("POST", "/api/v1/dags/a/retry", "")
		return code2 != http.StatusConflict
	})
	wantLimit(t, "a retry past the limit", code2, b, hdr, http.StatusTooManyRequests, apitypes.CodeTooManyLiveDAGs, "max_live_dags 2", true)

	sched := func(id, cron string) string {
		return fmt.Sprintf(`{"id": %q, "schedule": {"cron": %q}, "tasks": [{"id": "a", "kind": "noop"}]}`, id, cron)
	}
	code, b, hdr = c.do("POST", "/api/v1/schedules", sched("often", "*/30 * * * * *"))
	wantLimit(t, "a schedule every 30 s", code, b, hdr, http.StatusBadRequest, apitypes.CodeScheduleTooFrequent, "min_schedule_interval 1m0s", false)
	if code, b, _ := c.do("POST", "/api/v1/schedules", sched("hourly", "@hourly")); code != http.StatusCreated {
		t.Fatalf("hourly: %d %s", code, b)
	}
	code, b, hdr = c.do("POST", "/api/v1/schedules", sched("daily", "@daily"))
	wantLimit(t, "a second schedule", code, b, hdr, http.StatusTooManyRequests, apitypes.CodeTooManySchedules, "max_schedules 1", false)

	for limit, want := range map[string]float64{"max_live_tasks": 1, "max_live_dags": 2, "min_schedule_interval": 1, "max_schedules": 1} {
		if got := testutil.ToFloat64(s.Metrics.Refused.WithLabelValues(limit)); got != want {
			t.Errorf("refusals of %s: %v, want %v", limit, got, want)
		}
	}
}
