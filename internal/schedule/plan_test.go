package schedule

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/orion-sched/orion/internal/dag"
	"github.com/orion-sched/orion/internal/model"
)

// compile normalizes and compiles a spec, failing the test on error.
func compile(t *testing.T, s Spec) *Compiled {
	t.Helper()
	s.Normalize()
	c, err := s.Compile()
	if err != nil {
		t.Fatalf("compile %+v: %v", s, err)
	}
	return c
}

func at(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return t
}

// describe renders a plan compactly: +tick fired, -tick dropped (reason),
// ~ late, then the cursor and whether a tick waits.
func describe(p Plan) string {
	var b strings.Builder
	for _, a := range p.Actions {
		switch {
		case a.Fire:
			b.WriteString("+")
		default:
			b.WriteString("-")
		}
		b.WriteString(a.Tick.UTC().Format("15:04:05"))
		if a.Late {
			b.WriteString("~")
		}
		if a.Drop != "" {
			b.WriteString("(" + a.Drop + ")")
		}
		b.WriteString(" ")
	}
	if p.Dropped > 0 || p.Many {
		fmt.Fprintf(&b, "dropped=%d many=%v ", p.Dropped, p.Many)
	}
	fmt.Fprintf(&b, "cursor=%s", p.Cursor.UTC().Format("15:04:05.000"))
	if p.Waiting {
		b.WriteString(" waiting")
	}
	return b.String()
}

func TestPlanEverySecond(t *testing.T) {
	c := compile(t, Spec{Cron: "@every 1s"})
	base := at("2026-11-25T15:45:00Z")
	for _, tc := range []struct {
		now  string
		want string
	}{
		{"2026-11-25T15:45:00.500Z", "cursor=15:45:00.000"},
		{"2026-11-25T15:45:01Z", "+15:45:01 cursor=15:45:01.000"},
		{"2026-11-25T15:45:01.900Z", "+15:45:01 cursor=15:45:01.000"},
		// Two ticks due: the first is more than its grace (1 s, the gap to
		// the next tick) late, and catch-up all fires it anyway.
		{"2026-11-25T15:45:02.200Z", "+15:45:01~ +15:45:02 cursor=15:45:02.000"},
	} {
		p := c.Plan(State{Cursor: base}, at(tc.now))
		if got := describe(p); got != tc.want {
			t.Errorf("now %s: got %q, want %q", tc.now, got, tc.want)
		}
	}
	p := c.Plan(State{Cursor: base}, at("2026-11-25T15:45:00.500Z"))
	if !p.Wake.Equal(at("2026-11-25T15:45:01Z")) {
		t.Errorf("wake %s, want 15:45:01", p.Wake)
	}
}

// A leader-less window of 5 s over a schedule firing every second: what
// each catch-up policy fires when the next leader plans.
func TestPlanCatchupAfterOutage(t *testing.T) {
	cursor := at("2026-11-25T15:45:00Z")
	now := at("2026-11-25T15:45:05.300Z") // ticks :01 … :05 due, :05 on time
	for _, tc := range []struct {
		spec Spec
		want string
	}{
		// Dropped ticks older than the last late one are counted, not listed.
		{Spec{Cron: "@every 1s", Catchup: CatchupSkip},
			"-15:45:04~(catchup) +15:45:05 dropped=3 many=false cursor=15:45:05.000"},
		{Spec{Cron: "@every 1s", Catchup: CatchupLatest},
			"-15:45:04~(catchup) +15:45:05 dropped=3 many=false cursor=15:45:05.000"},
		{Spec{Cron: "@every 1s", Catchup: CatchupAll},
			"+15:45:01~ +15:45:02~ +15:45:03~ +15:45:04~ +15:45:05 cursor=15:45:05.000"},
		// The bound keeps the most recent late ticks.
		{Spec{Cron: "@every 1s", Catchup: CatchupAll, CatchupLimit: 2},
			"+15:45:03~ +15:45:04~ +15:45:05 dropped=2 many=false cursor=15:45:05.000"},
	} {
		c := compile(t, tc.spec)
		if got := describe(c.Plan(State{Cursor: cursor}, now)); got != tc.want {
			t.Errorf("catchup %s limit %d:\n got %q\nwant %q", tc.spec.Catchup, tc.spec.CatchupLimit, got, tc.want)
		}
	}
}

// Hourly ticks after a 5½ hour outage: no tick is on time, so latest fires
// the newest late one.
func TestPlanCatchupHourly(t *testing.T) {
	cursor, now := at("2026-11-25T00:00:00Z"), at("2026-11-25T05:30:00Z")
	for _, tc := range []struct {
		spec Spec
		want string
	}{
		{Spec{Cron: "@hourly", Catchup: CatchupSkip},
			"-04:00:00~(catchup) -05:00:00~(catchup) dropped=3 many=false cursor=05:00:00.000"},
		{Spec{Cron: "@hourly", Catchup: CatchupLatest},
			"-04:00:00~(catchup) +05:00:00~ dropped=3 many=false cursor=05:00:00.000"},
		{Spec{Cron: "0 * * * *", Catchup: CatchupAll, CatchupLimit: 3},
			"-02:00:00~(catchup) +03:00:00~ +04:00:00~ +05:00:00~ dropped=1 many=false cursor=05:00:00.000"},
	} {
		c := compile(t, tc.spec)
		if got := describe(c.Plan(State{Cursor: cursor}, now)); got != tc.want {
			t.Errorf("catchup %s:\n got %q\nwant %q", tc.spec.Catchup, got, tc.want)
		}
	}
}

func TestPlanOverlap(t *testing.T) {
	cursor := at("2026-11-25T15:45:00Z")
	now := at("2026-11-25T15:45:02.100Z") // :01 (late) and :02 due
	for _, tc := range []struct {
		spec   Spec
		active int
		want   string
	}{
		{Spec{Cron: "@every 1s"}, 5, "+15:45:01~ +15:45:02 cursor=15:45:02.000"},
		{Spec{Cron: "@every 1s", Overlap: OverlapSkip}, 0, "+15:45:01~ -15:45:02(overlap) cursor=15:45:02.000"},
		{Spec{Cron: "@every 1s", Overlap: OverlapSkip}, 1, "-15:45:01~(overlap) -15:45:02(overlap) cursor=15:45:02.000"},
		{Spec{Cron: "@every 1s", Overlap: OverlapQueue}, 1, "cursor=15:45:00.000 waiting"},
		{Spec{Cron: "@every 1s", Overlap: OverlapQueue}, 0, "+15:45:01~ cursor=15:45:01.000 waiting"},
		{Spec{Cron: "@every 1s", Overlap: OverlapQueue, MaxActiveRuns: 3}, 1, "+15:45:01~ +15:45:02 cursor=15:45:02.000"},
		{Spec{Cron: "@every 1s", MaxActiveRuns: 2}, 1, "+15:45:01~ cursor=15:45:01.000 waiting"},
		{Spec{Cron: "@every 1s", Overlap: OverlapSkip, MaxActiveRuns: 2}, 1, "+15:45:01~ -15:45:02(overlap) cursor=15:45:02.000"},
		// Queued ticks that grow late are then the catch-up policy's.
		{Spec{Cron: "@every 1s", Overlap: OverlapQueue, Catchup: CatchupLatest}, 0, "-15:45:01~(catchup) +15:45:02 cursor=15:45:02.000"},
	} {
		c := compile(t, tc.spec)
		if got := describe(c.Plan(State{Cursor: cursor, Active: tc.active}, now)); got != tc.want {
			t.Errorf("overlap %s max %d active %d:\n got %q\nwant %q", tc.spec.Overlap, tc.spec.MaxActiveRuns, tc.active, got, tc.want)
		}
	}
}

func TestPlanBounds(t *testing.T) {
	start, end := at("2026-11-25T10:00:00Z"), at("2026-11-25T12:00:00Z")
	c := compile(t, Spec{Cron: "*/30 * * * *", Start: &start, End: &end})
	got := c.Upcoming(at("2026-11-25T00:00:00Z"), 10)
	var s []string
	for _, t := range got {
		s = append(s, t.Format("15:04"))
	}
	if want := "10:00 10:30 11:00 11:30 12:00"; strings.Join(s, " ") != want {
		t.Errorf("ticks within start/end: %v, want %s", s, want)
	}
	p := c.Plan(State{Cursor: at("2026-11-25T11:59:00Z")}, at("2026-11-25T13:00:00Z"))
	if got := describe(p); got != "+12:00:00~ cursor=12:00:00.000" || !p.Wake.IsZero() {
		t.Errorf("past the end: %q wake %v", got, p.Wake)
	}
}

// No tick falls past LastTick, whatever the expression: a time beyond year
// 9999 has no RFC 3339 form, and would fail every JSON answer listing it.
func TestTicksStopAtTheHorizon(t *testing.T) {
	for _, cron := range []string{"@every 1m", "* * * * * *", "0 0 * * *", "@yearly"} {
		start := at("9999-12-31T23:58:00Z")
		c := compile(t, Spec{Cron: cron, Start: &start})
		for _, tick := range c.Upcoming(at("9999-12-31T00:00:00Z"), 100) {
			if tick.After(LastTick) {
				t.Fatalf("%s: tick %v after the horizon", cron, tick)
			}
			if _, err := tick.MarshalJSON(); err != nil {
				t.Fatalf("%s: tick %v does not encode: %v", cron, tick, err)
			}
		}
		if n := c.Next(LastTick); !n.IsZero() {
			t.Errorf("%s: a tick after the horizon: %v", cron, n)
		}
	}
}

func TestTimeZones(t *testing.T) {
	// 09:00 in Berlin is 08:00 UTC in winter, 07:00 in summer.
	c := compile(t, Spec{Cron: "0 9 * * *", Timezone: "Europe/Berlin"})
	if got := c.Next(at("2026-01-10T00:00:00Z")); !got.Equal(at("2026-01-10T08:00:00Z")) {
		t.Errorf("winter: %s", got)
	}
	if got := c.Next(at("2026-07-10T00:00:00Z")); !got.Equal(at("2026-07-10T07:00:00Z")) {
		t.Errorf("summer: %s", got)
	}
}

func ticks(c *Compiled, from, to time.Time) []string {
	var out []string
	for t := c.Next(from); !t.IsZero() && !t.After(to); t = c.Next(t) {
		out = append(out, t.Format(time.RFC3339))
	}
	return out
}

func TestDaylightSaving(t *testing.T) {
	ny := "America/New_York"
	// Fall back (2026-11-01, 02:00 EDT → 01:00 EST): 01:30 happens twice;
	// a daily 01:30 fires once, at the first.
	daily := compile(t, Spec{Cron: "30 1 * * *", Timezone: ny})
	got := ticks(daily, at("2026-10-31T12:00:00Z"), at("2026-11-02T12:00:00Z"))
	if want := []string{"2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("fall back, daily 01:30: %v, want %v", got, want)
	}
	// Every 30 minutes keeps firing through the repeated hour: four ticks
	// between 01:00 EDT and 01:30 EST.
	half := compile(t, Spec{Cron: "*/30 * * * *", Timezone: ny})
	got = ticks(half, at("2026-11-01T04:59:00Z"), at("2026-11-01T06:30:00Z"))
	if want := []string{"2026-11-01T05:00:00Z", "2026-11-01T05:30:00Z", "2026-11-01T06:00:00Z", "2026-11-01T06:30:00Z"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("fall back, */30: %v, want %v", got, want)
	}
	// Spring forward (2026-03-08, 02:00 EST → 03:00 EDT): 02:30 does not
	// exist that day, and does not fire.
	early := compile(t, Spec{Cron: "30 2 * * *", Timezone: ny})
	got = ticks(early, at("2026-03-07T00:00:00Z"), at("2026-03-09T12:00:00Z"))
	if want := []string{"2026-03-07T07:30:00Z", "2026-03-09T06:30:00Z"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("spring forward, daily 02:30: %v, want %v", got, want)
	}
}

// A schedule paused for a year at one tick a second: the planner looks back
// from now rather than walk 31 million ticks.
func TestPlanLongBacklog(t *testing.T) {
	// Bounded by the ticks it enumerates, not by how long it took (no timed
	// assertion): a counting walk would report exactly 31,536,000 earlier
	// ticks and Many unset.
	c := compile(t, Spec{Cron: "* * * * * *", Catchup: CatchupAll, CatchupLimit: 3})
	p := c.Plan(State{Cursor: at("2025-11-25T00:00:00Z")}, at("2026-11-25T00:00:00.5Z"))
	if p.Dropped > maxScan {
		t.Errorf("the planner walked %d ticks; at most %d", p.Dropped, maxScan)
	}
	if got, want := describe(p), "+23:59:57~ +23:59:58~ +23:59:59~ +00:00:00 dropped="; !strings.HasPrefix(got, want) || !p.Many {
		t.Errorf("got %q, want prefix %q and many", got, want)
	}
	every := compile(t, Spec{Cron: "@every 1s", Catchup: CatchupSkip})
	p = every.Plan(State{Cursor: at("2025-11-25T00:00:00Z")}, at("2026-11-25T00:00:00.5Z"))
	if got := describe(p); !strings.HasPrefix(got, "-23:59:59~(catchup) +00:00:00 dropped=") || !p.Many {
		t.Errorf("skip: %q", got)
	}
}

func TestEveryIsAlignedToTheEpoch(t *testing.T) {
	c := compile(t, Spec{Cron: "@every 1h"})
	if got := c.Next(at("2026-11-25T15:45:12Z")); !got.Equal(at("2026-11-25T16:00:00Z")) {
		t.Errorf("@every 1h after 15:45:12: %s", got)
	}
	c = compile(t, Spec{Cron: "@every 90s"})
	if got := c.Next(at("2026-11-25T15:45:12Z")); got.Unix()%90 != 0 {
		t.Errorf("@every 90s: %s is not a multiple of 90 s", got)
	}
}

func TestRunID(t *testing.T) {
	tick := at("2026-11-25T15:45:00Z")
	id := RunID("nightly-etl", tick)
	if id != "nightly-etl-20261125T154500Z" {
		t.Fatalf("RunID: %s", id)
	}
	for _, tc := range []struct {
		run    string
		sched  string
		manual bool
		ok     bool
	}{
		{id, "nightly-etl", false, true},
		{ManualRunID("nightly-etl", tick.Add(300*time.Millisecond)), "nightly-etl", true, true},
		{ManualRunID("a-m", tick), "a-m", true, true},
		{RunID("a-20261125T154500Z", tick), "a-20261125T154500Z", false, true},
		{"nightly-etl", "", false, false},
		{"x-2026112XT154500Z", "", false, false},
	} {
		s, tk, manual, ok := ParseRunID(tc.run)
		if s != tc.sched || manual != tc.manual || ok != tc.ok || (ok && !tk.Equal(tick)) {
			t.Errorf("ParseRunID(%q) = %q %s %v %v", tc.run, s, tk, manual, ok)
		}
	}
}

func TestValidateNamesTheField(t *testing.T) {
	base := func() *Schedule {
		s := &Schedule{ID: "etl", Spec: Spec{Cron: "@hourly"},
			DAG: model.DAG{ID: "etl", Name: "etl", Tasks: []model.Task{{ID: "a", Kind: model.KindNoop, MaxRetries: 1, Timeout: model.Duration(time.Minute)}}}}
		return s
	}
	for _, tc := range []struct {
		edit func(s *Schedule)
		want string
	}{
		{func(s *Schedule) { s.Cron = "61 * * * *" }, "schedule.cron"},
		{func(s *Schedule) { s.Cron = "* * *" }, "schedule.cron"},
		{func(s *Schedule) { s.Cron = "@every 500ms" }, "schedule.cron"},
		{func(s *Schedule) { s.Cron = "0 0 30 2 *" }, `schedule.cron: "0 0 30 2 *" never fires`},
		{func(s *Schedule) { s.Cron = "0 0 31 4,6,9,11 *" }, "never fires"},
		{func(s *Schedule) { s.Timezone = "Mars/Olympus" }, "schedule.timezone: unknown time zone"},
		{func(s *Schedule) { s.MaxActiveRuns = -1 }, "schedule.max_active_runs: -1 is negative"},
		{func(s *Schedule) { s.CatchupLimit = -2 }, "schedule.catchup_limit: -2 is negative"},
		{func(s *Schedule) { s.Catchup = "some" }, "schedule.catchup"},
		{func(s *Schedule) { s.Overlap = "never" }, "schedule.overlap"},
		{func(s *Schedule) { s.Grace = model.Duration(-time.Second) }, "schedule.grace"},
		{func(s *Schedule) { s.ID = "" }, "id: a schedule needs an id"},
		{func(s *Schedule) { s.ID = strings.Repeat("x", MaxIDLen+1) }, "id:"},
		// A start at the horizon has no tick after it: refused, not stored
		// to break every later listing (its next tick has no RFC 3339 form).
		{func(s *Schedule) { t := at("9999-12-31T23:59:59Z"); s.Start = &t }, "schedule.start: no tick of \"@hourly\" falls between"},
		{func(s *Schedule) { t := at("9999-12-31T23:30:00Z"); s.Start = &t }, "falls between"},
		{func(s *Schedule) {
			a, b := at("2026-11-25T10:01:00Z"), at("2026-11-25T10:59:00Z")
			s.Start, s.End = &a, &b
		}, "no tick of \"@hourly\" falls between start 2026-11-25T10:01:00Z and 2026-11-25T10:59:00Z"},
	} {
		s := base()
		tc.edit(s)
		s.Normalize()
		err := s.Validate(dag.Limits{})
		var ve *dag.ValidationError
		if !errors.As(err, &ve) || ve.Code != CodeInvalid || !strings.Contains(ve.Message, tc.want) {
			t.Errorf("want %q, got %v", tc.want, err)
		}
	}
	for _, cron := range []string{"@hourly", "0 0 29 2 *", "0 9 31 * 1", "@every 1h"} {
		s := base()
		s.Cron = cron
		s.Normalize()
		if err := s.Validate(dag.Limits{}); err != nil {
			t.Errorf("valid schedule %q: %v", cron, err)
		}
	}
}

func TestParseFile(t *testing.T) {
	yml := `id: nightly
name: nightly ETL
schedule:
  cron: "0 2 * * *"
  timezone: Europe/Berlin
  catchup: latest
  overlap: skip
  start: 2026-12-01T00:00:00Z
tasks:
  - id: extract
    command: echo hi
`
	if !HasSchedule([]byte(yml), "") {
		t.Fatal("HasSchedule: false")
	}
	s, err := Parse([]byte(yml), "application/yaml")
	if err != nil {
		t.Fatal(err)
	}
	if s.ID != "nightly" || s.Cron != "0 2 * * *" || s.Timezone != "Europe/Berlin" || s.Catchup != CatchupLatest ||
		s.Overlap != OverlapSkip || s.Start == nil || len(s.DAG.Tasks) != 1 || s.DAG.Tasks[0].Kind != model.KindShell {
		t.Fatalf("parsed %+v", s)
	}
	if err := s.Validate(dag.Limits{}); err != nil {
		t.Fatal(err)
	}
	js := `{"id":"j","schedule":{"cron":"@every 5s"},"tasks":[{"id":"a","kind":"noop"}]}`
	if s, err := Parse([]byte(js), ""); err != nil || s.Cron != "@every 5s" || s.Catchup != CatchupAll {
		t.Fatalf("json: %+v %v", s, err)
	}
	for _, bad := range []string{
		"id: x\nschedule:\n  cron: '@hourly'\n  crn: x\ntasks: [{id: a}]\n",
		`{"id":"x","schedule":{"cron":"@hourly","catchup_lmit":3},"tasks":[{"id":"a"}]}`,
		"id: x\ntasks: [{id: a}]\n",
	} {
		if _, err := Parse([]byte(bad), ""); err == nil {
			t.Errorf("Parse(%q): no error", bad)
		}
	}
	if HasSchedule([]byte("id: x\ntasks: []\n"), "") {
		t.Error("HasSchedule without a block")
	}
}

func TestRunDAG(t *testing.T) {
	s := &Schedule{ID: "etl", DAG: model.DAG{ID: "etl", Name: "etl", Tasks: []model.Task{
		{ID: "a", Kind: model.KindShell, Command: "true", Env: map[string]string{"K": "v"}},
		{ID: "b", Kind: model.KindNoop}}}}
	tick := at("2026-11-25T15:45:00Z")
	d, err := s.RunDAG(RunID("etl", tick), tick)
	if err != nil {
		t.Fatal(err)
	}
	if d.ID != "etl-20261125T154500Z" || d.Tasks[0].Env[EnvTick] != "2026-11-25T15:45:00Z" || d.Tasks[0].Env["K"] != "v" ||
		d.Tasks[1].Env != nil {
		t.Fatalf("run DAG %+v", d)
	}
	if _, ok := s.DAG.Tasks[0].Env[EnvTick]; ok {
		t.Fatal("RunDAG changed the schedule's DAG")
	}
}

// A run stands for its data interval, [the tick before, its tick): the
// DAG record carries it (templates read run.*), and params named tick,
// interval_start and interval_end, when declared, are set to it.
func TestRunDAGParams(t *testing.T) {
	s := &Schedule{ID: "etl", Spec: Spec{Cron: "0 6 * * 1-5"}, DAG: model.DAG{ID: "etl", Name: "etl",
		Params: model.Params{"tick": []byte("null"), "interval_start": []byte("null"), "region": []byte(`"eu"`)},
		Tasks:  []model.Task{{ID: "a", Kind: model.KindShell, Command: "load {{ params.tick }}", Pool: "p-{{ params.region }}", Timeout: model.Duration(time.Minute)}}}}
	s.Spec.Normalize()
	tick := at("2026-11-23T06:00:00Z") // a Monday: the tick before is Friday's
	d, err := s.RunDAG(RunID("etl", tick), tick)
	if err != nil {
		t.Fatal(err)
	}
	want := &model.ScheduledRun{Schedule: "etl", Tick: tick, IntervalStart: at("2026-11-20T06:00:00Z"), IntervalEnd: tick}
	if !reflect.DeepEqual(d.Scheduled, want) {
		t.Errorf("scheduled %+v, want %+v", d.Scheduled, want)
	}
	if string(d.Params["tick"]) != `"2026-11-23T06:00:00Z"` || string(d.Params["interval_start"]) != `"2026-11-20T06:00:00Z"` ||
		string(d.Params["region"]) != `"eu"` {
		t.Errorf("params %v", d.Params)
	}
	if _, ok := d.Params["interval_end"]; ok {
		t.Error("interval_end set though not declared")
	}
	if d.Tasks[0].Pool != "p-eu" || d.Tasks[0].Command != "load {{ params.tick }}" {
		t.Errorf("pool %q command %q: want the pool rendered, the command kept", d.Tasks[0].Pool, d.Tasks[0].Command)
	}
	if !model.IsNull(s.DAG.Params["tick"]) {
		t.Error("RunDAG changed the schedule's DAG")
	}
	if err := s.Validate(dag.Limits{}); err != nil {
		t.Errorf("valid schedule: %v", err)
	}
	// A required param a schedule cannot set is refused when the schedule is.
	s.DAG.Params["day"] = []byte("null")
	if err := s.Validate(dag.Limits{}); err == nil || !strings.Contains(err.Error(), "param day is required") {
		t.Errorf("a required param no tick sets: %v", err)
	}
}

func TestPrev(t *testing.T) {
	for _, c := range []struct{ cron, t, want string }{
		{"0 6 * * 1-5", "2026-11-23T06:00:00Z", "2026-11-20T06:00:00Z"},
		{"0 6 * * 1-5", "2026-11-23T06:00:01Z", "2026-11-23T06:00:00Z"},
		{"* * * * * *", "2026-11-23T06:00:00Z", "2026-11-23T05:59:59Z"},
		{"@every 90s", "2026-11-23T06:00:00Z", "2026-11-23T05:58:30Z"},
		{"@every 1h", "2026-11-23T06:00:00Z", "2026-11-23T05:00:00Z"},
		{"0 0 29 2 *", "2028-02-29T00:00:00Z", "2024-02-29T00:00:00Z"},
		{"0 9-17 * * 1-5", "2026-11-23T09:00:00Z", "2026-11-20T17:00:00Z"},
	} {
		sp := Spec{Cron: c.cron}
		sp.Normalize()
		cc, err := sp.Compile()
		if err != nil {
			t.Fatal(err)
		}
		if got := cc.Prev(at(c.t)); !got.Equal(at(c.want)) {
			t.Errorf("%s before %s: %s, want %s", c.cron, c.t, got, c.want)
		}
	}
}
