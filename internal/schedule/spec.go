// Package schedule is what a schedule is and when it fires: its spec (a DAG
// plus a cron expression, a time zone, bounds and policies), validation
// with errors that name the field, the ids of the runs it creates, and the
// tick planner. Like the scheduling core it is pure: no clock reads, no
// I/O, no goroutines; time comes in as an argument, so the catch-up and
// overlap policies are tested with plain values.
//
// Exactly once falls out of determinism: the run for a tick has an id
// derived from the schedule and the tick time (RunID), and it is created
// through the ordinary idempotent submission. A leader that dies after
// creating a run but before recording the tick makes its successor derive
// the same id, which already exists.
package schedule

import (
	"fmt"
	"strings"
	"time"
	_ "time/tzdata" // IANA zones even on hosts without /usr/share/zoneinfo

	"github.com/robfig/cron/v3"

	"github.com/orion-sched/orion/internal/dag"
	"github.com/orion-sched/orion/internal/model"
)

// Catch-up policies: what happens to ticks that were not fired within their
// grace (no leader ran, the schedule was paused, or a run held the slot).
const (
	CatchupSkip   = "skip"   // late ticks are dropped
	CatchupLatest = "latest" // only the most recent due tick fires
	CatchupAll    = "all"    // every late tick fires, the most recent CatchupLimit of them
)

// Overlap policies: what a due tick does while the schedule has
// MaxActiveRuns runs still running.
const (
	OverlapAllow = "allow" // no limit unless max_active_runs is set; then it waits
	OverlapSkip  = "skip"  // the tick is dropped
	OverlapQueue = "queue" // the tick waits for a run to finish
)

// Defaults and bounds.
const (
	DefaultCatchup      = CatchupAll
	DefaultCatchupLimit = 10
	MaxCatchupLimit     = 1000
	DefaultOverlap      = OverlapAllow
	// DefaultGrace bounds how late a tick may fire and still count as on
	// time; a tick's grace is also never longer than the gap to the next
	// tick.
	DefaultGrace = time.Minute
	MaxIDLen     = 128 - len("-20060102T150405Z-m")
)

// CodeInvalid is the error code of a schedule that fails validation.
const CodeInvalid = "invalid_schedule"

// Spec is the `schedule:` block of a DAG file.
type Spec struct {
	Cron     string     `json:"cron" yaml:"cron"`
	Timezone string     `json:"timezone,omitempty" yaml:"timezone"`
	Start    *time.Time `json:"start,omitempty" yaml:"start"`
	End      *time.Time `json:"end,omitempty" yaml:"end"`
	Paused   bool       `json:"paused" yaml:"paused"`
	Catchup  string     `json:"catchup" yaml:"catchup"`
	// CatchupLimit bounds the late ticks `catchup: all` fires.
	CatchupLimit int `json:"catchup_limit" yaml:"catchup_limit"`
	// Grace is how late a tick may fire and still be on time.
	Grace         model.Duration `json:"grace" yaml:"grace"`
	Overlap       string         `json:"overlap" yaml:"overlap"`
	MaxActiveRuns int            `json:"max_active_runs" yaml:"max_active_runs"`
}

// Schedule is a schedule as stored: its id, its spec and the DAG each tick
// runs.
type Schedule struct {
	ID string `json:"id"`
	Spec
	DAG       model.DAG `json:"dag"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// Normalize applies the defaults.
func (s *Spec) Normalize() {
	s.Cron = strings.TrimSpace(s.Cron)
	s.Timezone = strings.TrimSpace(s.Timezone)
	if s.Timezone == "" {
		s.Timezone = "UTC"
	}
	s.Catchup = strings.ToLower(strings.TrimSpace(s.Catchup))
	if s.Catchup == "" {
		s.Catchup = DefaultCatchup
	}
	if s.CatchupLimit == 0 && s.Catchup == CatchupAll {
		s.CatchupLimit = DefaultCatchupLimit
	}
	s.Overlap = strings.ToLower(strings.TrimSpace(s.Overlap))
	if s.Overlap == "" {
		s.Overlap = DefaultOverlap
	}
	if s.Grace == 0 {
		s.Grace = model.Duration(DefaultGrace)
	}
	if s.Start != nil {
		t := s.Start.UTC()
		s.Start = &t
	}
	if s.End != nil {
		t := s.End.UTC()
		s.End = &t
	}
}

// parser reads five fields, an optional leading seconds field, and the
// descriptors (@hourly, @daily, @every 90s, ...).
var parser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Validate checks a normalized schedule and returns a *dag.ValidationError
// (code invalid_schedule, or the DAG's own codes) listing every problem,
// each naming its field.
func (s *Schedule) Validate(limits dag.Limits) error {
	var details []string
	add := func(format string, args ...any) { details = append(details, fmt.Sprintf(format, args...)) }
	switch {
	case s.ID == "":
		add("id: a schedule needs an id (its runs are named <id>-<tick time>)")
	case !dag.ValidID(s.ID):
		add("id: %q is not a valid id (letters, digits, '.', '_', '-'; starting with a letter or digit)", s.ID)
	case len(s.ID) > MaxIDLen:
		add("id: %q is longer than %d characters (a run's id adds the tick time to it)", s.ID, MaxIDLen)
	}
	c, cerr := s.Compile()
	if cerr != nil {
		details = append(details, cerr.(*fieldErrors).list...)
	} else if c.next(neverRef).IsZero() {
		// Day and month fields no date has (30 2 *, 31 4 *): cron finds
		// no tick within five years of any time, since only February 29
		// depends on the year. Refused, rather than a schedule that
		// silently never fires.
		add("schedule.cron: %q never fires: no date matches its day-of-month and month fields", s.Cron)
	}
	switch s.Catchup {
	case CatchupSkip, CatchupLatest, CatchupAll:
	default:
		add("schedule.catchup: %q is not one of skip, latest, all", s.Catchup)
	}
	switch {
	case s.CatchupLimit < 0:
		add("schedule.catchup_limit: %d is negative", s.CatchupLimit)
	case s.CatchupLimit > MaxCatchupLimit:
		add("schedule.catchup_limit: %d is more than %d", s.CatchupLimit, MaxCatchupLimit)
	case s.CatchupLimit > 0 && s.Catchup != CatchupAll:
		add("schedule.catchup_limit: only catchup: all takes a limit (catchup is %s)", s.Catchup)
	}
	if s.Grace < 0 {
		add("schedule.grace: %s is negative", s.Grace.D())
	}
	switch s.Overlap {
	case OverlapAllow, OverlapSkip, OverlapQueue:
	default:
		add("schedule.overlap: %q is not one of allow, skip, queue", s.Overlap)
	}
	if s.MaxActiveRuns < 0 {
		add("schedule.max_active_runs: %d is negative", s.MaxActiveRuns)
	}
	if s.Start != nil && s.End != nil && !s.End.After(*s.Start) {
		add("schedule.end: %s is not after start %s", s.End.Format(time.RFC3339), s.Start.Format(time.RFC3339))
	} else if s.Start != nil && s.Start.After(LastTick) {
		add("schedule.start: %s is after %s, the last time a tick may have", s.Start.Format(time.RFC3339), LastTick.Format(time.RFC3339))
	} else if cerr == nil && s.Start != nil && c.Next(s.Start.Add(-time.Nanosecond)).IsZero() {
		// A window with no tick in it (start too close to the horizon,
		// or to end) would be a schedule that silently never fires.
		add("schedule.start: no tick of %q falls between start %s and %s", s.Cron, s.Start.Format(time.RFC3339), c.lastFire().Format(time.RFC3339))
	}
	if len(details) > 0 {
		msg := details[0]
		if len(details) > 1 {
			msg = fmt.Sprintf("%d problems: %s", len(details), strings.Join(details, "; "))
		}
		return &dag.ValidationError{Code: CodeInvalid, Message: msg, Details: details}
	}
	// The DAG each tick runs, validated as a submission under a run's id:
	// bound with a tick's params, so a required param other than tick,
	// interval_start and interval_end is refused (a schedule sets no other).
	sample := c.Next(neverRef)
	if sample.IsZero() {
		sample = time.Date(2006, 1, 2, 15, 4, 5, 0, time.UTC)
	}
	d, err := s.RunDAG(RunID(s.ID, sample), sample)
	if err != nil {
		return err
	}
	return dag.Validate(d, limits)
}

type fieldErrors struct{ list []string }

func (e *fieldErrors) Error() string { return strings.Join(e.list, "; ") }

// Compile parses the cron expression in the schedule's time zone.
func (s *Spec) Compile() (*Compiled, error) {
	var errs fieldErrors
	loc, err := time.LoadLocation(s.Timezone)
	switch {
	case s.Timezone == "" || strings.EqualFold(s.Timezone, "local"):
		errs.list = append(errs.list, fmt.Sprintf("schedule.timezone: %q is not an IANA time zone (such as UTC or Europe/Berlin)", s.Timezone))
	case err != nil:
		errs.list = append(errs.list, fmt.Sprintf("schedule.timezone: unknown time zone %q (want an IANA name such as UTC or Europe/Berlin)", s.Timezone))
	}
	c := &Compiled{loc: loc}
	switch expr := s.Cron; {
	case expr == "":
		errs.list = append(errs.list, "schedule.cron: missing (five fields, an optional leading seconds field, @hourly, @daily, ... or @every <duration>)")
	case strings.HasPrefix(expr, "TZ=") || strings.HasPrefix(expr, "CRON_TZ="):
		errs.list = append(errs.list, "schedule.cron: give the time zone in schedule.timezone, not in the expression")
	case strings.HasPrefix(expr, "@every"):
		d, err := time.ParseDuration(strings.TrimSpace(strings.TrimPrefix(expr, "@every")))
		switch {
		case err != nil:
			errs.list = append(errs.list, fmt.Sprintf("schedule.cron: %q: %v", expr, err))
		case d < time.Second || d%time.Second != 0:
			errs.list = append(errs.list, fmt.Sprintf("schedule.cron: %q: @every takes whole seconds, at least 1s", expr))
		default:
			c.every = d
		}
	default:
		sch, err := parser.Parse(expr)
		if err != nil {
			errs.list = append(errs.list, fmt.Sprintf("schedule.cron: %q: %v", expr, err))
			break
		}
		spec, ok := sch.(*cron.SpecSchedule)
		if !ok {
			errs.list = append(errs.list, fmt.Sprintf("schedule.cron: %q is not supported", expr))
			break
		}
		if loc != nil {
			spec.Location = loc
		}
		c.spec = spec
		c.fixedHours = spec.Hour&allHours != allHours
	}
	if len(errs.list) > 0 {
		return nil, &errs
	}
	if s.Start != nil {
		c.start = *s.Start
	}
	if s.End != nil {
		c.end = *s.End
	}
	c.grace = s.Grace.D()
	c.catchup, c.limit, c.overlap, c.maxActive = s.Catchup, s.CatchupLimit, s.Overlap, s.MaxActiveRuns
	return c, nil
}

const allHours = 1<<24 - 1

// neverRef is where Validate looks for a first tick: a fixed time, so that
// validation is a function of the schedule alone.
var neverRef = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// Compiled is a schedule's tick function.
type Compiled struct {
	loc        *time.Location
	spec       *cron.SpecSchedule
	every      time.Duration
	fixedHours bool
	start, end time.Time
	grace      time.Duration
	catchup    string
	limit      int
	overlap    string
	maxActive  int
}

// Location is the schedule's time zone.
func (c *Compiled) Location() *time.Location { return c.loc }

// next is the first tick strictly after t, ignoring start and end; ticks are
// a function of time alone (not of the history), so any replica computes
// the same ones. @every ticks count from the Unix epoch in whole seconds:
// @every 1h fires on the hour, @every 90s at the same instants everywhere.
// A wall-clock time that a fall-back transition repeats fires once, at its
// first occurrence, for expressions with fixed hours (as cron does); a
// time that a spring-forward transition skips does not fire that day.
func (c *Compiled) next(t time.Time) time.Time {
	if c.every > 0 {
		n := t.Unix()
		step := int64(c.every / time.Second)
		k := n/step + 1
		if n < 0 && n%step != 0 {
			k = n / step
		}
		return time.Unix(k*step, 0).UTC()
	}
	for {
		n := c.spec.Next(t)
		if n.IsZero() || !c.fixedHours || !c.repeated(n) {
			return n.UTC()
		}
		t = n
	}
}

// repeated reports whether n's wall-clock time already occurred earlier
// that day (n is inside the hour a fall-back transition repeats).
func (c *Compiled) repeated(n time.Time) bool {
	_, offNow := n.In(c.loc).Zone()
	_, offBefore := n.Add(-3 * time.Hour).In(c.loc).Zone()
	if offBefore <= offNow {
		return false
	}
	earlier := n.Add(-time.Duration(offBefore-offNow) * time.Second)
	a, b := earlier.In(c.loc), n.In(c.loc)
	return a.Hour() == b.Hour() && a.Minute() == b.Minute() && a.Second() == b.Second() && a.Day() == b.Day()
}

// LastTick is the horizon of every schedule: no tick falls after it. Times
// past year 9999 have no RFC 3339 form, so neither JSON nor a run's id could
// carry them; a tick beyond it is no tick.
var LastTick = time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)

// lastFire is the latest time a tick of the schedule may have: its end, or
// the horizon.
func (c *Compiled) lastFire() time.Time {
	if !c.end.IsZero() && c.end.Before(LastTick) {
		return c.end
	}
	return LastTick
}

// Next is the first tick strictly after t within the schedule's bounds, or
// the zero time when there is none.
func (c *Compiled) Next(t time.Time) time.Time {
	if !c.start.IsZero() && t.Before(c.start) {
		t = c.start.Add(-time.Nanosecond)
	}
	if !t.Before(c.lastFire()) {
		return time.Time{}
	}
	n := c.next(t)
	if n.IsZero() || n.After(c.lastFire()) {
		return time.Time{}
	}
	return n
}

// Prev is the latest tick strictly before t, ignoring start and end (the
// tick before a run's, which starts its data interval), or the zero time
// when there is none within ten years. It searches back in windows that
// double from a second, so it costs about the ticks of one window.
func (c *Compiled) Prev(t time.Time) time.Time {
	if c.every > 0 {
		step := int64(c.every / time.Second)
		n := t.Add(-time.Nanosecond).Unix()
		k := n / step
		if n < 0 && n%step != 0 {
			k--
		}
		return time.Unix(k*step, 0).UTC()
	}
	for w := time.Second; w <= 10*365*24*time.Hour; w *= 2 {
		n := c.next(t.Add(-w - time.Nanosecond))
		if n.IsZero() || !n.Before(t) {
			continue
		}
		for {
			m := c.next(n)
			if m.IsZero() || !m.Before(t) {
				return n
			}
			n = m
		}
	}
	return time.Time{}
}

// Upcoming lists the next n ticks after t.
func (c *Compiled) Upcoming(t time.Time, n int) []time.Time {
	out := make([]time.Time, 0, n)
	for len(out) < n {
		t = c.Next(t)
		if t.IsZero() {
			break
		}
		out = append(out, t)
	}
	return out
}

// graceOf is how late tick may fire and still be on time: the schedule's
// grace, and never longer than the gap to the following tick.
func (c *Compiled) graceOf(tick time.Time) time.Duration {
	g := c.grace
	if n := c.next(tick); !n.IsZero() && n.Sub(tick) < g {
		g = n.Sub(tick)
	}
	return g
}

// intervalScan is how many ticks MinInterval looks at.
const intervalScan = 1000

// MinInterval is the shortest time between two consecutive ticks among the
// schedule's first intervalScan ticks after a fixed reference time (so that
// it is a function of the schedule alone): @every's duration, or for a
// cron expression the closest pair its fields allow (every second, "*/5 *
// * * * *": 5 s; "0,30 0 * * * *": 30 s). 0 when it ticks at most once.
func (c *Compiled) MinInterval() time.Duration {
	if c.every > 0 {
		return c.every
	}
	var least time.Duration
	prev := c.next(neverRef)
	for i := 0; i < intervalScan && !prev.IsZero(); i++ {
		n := c.next(prev)
		if n.IsZero() {
			break
		}
		if d := n.Sub(prev); least == 0 || d < least {
			least = d
		}
		prev = n
	}
	return least
}
