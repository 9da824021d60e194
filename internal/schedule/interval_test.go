package schedule

import (
	"testing"
	"time"
)

// MinInterval is the closest two ticks come, whatever the expression's
// form: what min_schedule_interval is compared with.
func TestMinInterval(t *testing.T) {
	for _, c := range []struct {
		cron string
		tz   string
		want time.Duration
	}{
		{"@every 1s", "", time.Second},
		{"@every 90s", "", 90 * time.Second},
		{"* * * * * *", "", time.Second},
		{"*/5 * * * * *", "", 5 * time.Second},
		{"0,30 0 * * * *", "", 30 * time.Second}, // twice within a minute, once an hour
		{"*/15 * * * *", "", 15 * time.Minute},
		{"0 4 * * *", "Europe/Berlin", 23 * time.Hour}, // the spring-forward day is 23 h long
		{"0 2 * * *", "Europe/Berlin", 24 * time.Hour}, // 02:00 does not happen that day: no tick, not a short gap
		{"@hourly", "", time.Hour},
		{"0 0 29 2 *", "", (4*365 + 1) * 24 * time.Hour}, // leap days only
	} {
		s := Spec{Cron: c.cron, Timezone: c.tz}
		s.Normalize()
		comp, err := s.Compile()
		if err != nil {
			t.Fatalf("%s: %v", c.cron, err)
		}
		if got := comp.MinInterval(); got != c.want {
			t.Errorf("%s (%s): %s, want %s", c.cron, s.Timezone, got, c.want)
		}
	}
}
