package model

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// MarshalJSON writes by hand what json.Marshal of the Go syntax writes.
func TestDurationMarshalJSONMatchesEncoder(t *testing.T) {
	for _, d := range []time.Duration{0, 1, 999, 1500 * time.Nanosecond, 12 * time.Millisecond,
		30 * time.Second, -90 * time.Second, time.Hour + 30*time.Minute, 1<<63 - 1, -1 << 63} {
		got, err := Duration(d).MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		want, _ := json.Marshal(d.String())
		if string(got) != string(want) {
			t.Errorf("%v: MarshalJSON = %s, json.Marshal of its string = %s", d, got, want)
		}
		var back Duration
		if err := json.Unmarshal(got, &back); err != nil || back.D() != d {
			t.Errorf("%v: read back as %v, %v", d, back.D(), err)
		}
	}
}

// Each form reads the same through the quoted fast path, escapes, numbers
// and whitespace, and what is not a duration is refused with its reason.
func TestDurationUnmarshalJSON(t *testing.T) {
	for in, want := range map[string]time.Duration{
		`"30s"`:                30 * time.Second,
		`"1h30m"`:              90 * time.Minute,
		`"1.5µs"`:              1500 * time.Nanosecond,
		`"\u0033\u0030s"`:      30 * time.Second,
		`"90"`:                 90 * time.Second,
		`"0.5"`:                500 * time.Millisecond,
		`" 2m "`:               2 * time.Minute,
		`""`:                   0,
		`45`:                   45 * time.Second,
		`1e1`:                  10 * time.Second,
		` 3 `:                  3 * time.Second,
		`null`:                 0,
		`"-1m"`:                -time.Minute,
		`"2562047h47m16.854s"`: 2562047*time.Hour + 47*time.Minute + 16854*time.Millisecond,
	} {
		var d Duration
		err := d.UnmarshalJSON([]byte(in))
		if err != nil || d.D() != want {
			t.Errorf("%s: got %v, %v; want %v", in, d.D(), err, want)
		}
	}
	for in, reason := range map[string]string{
		`"soon"`:    "is not a duration",
		`"5 s"`:     "is not a duration",
		`"inf"`:     "out of range",
		`"\u00b5s"`: "is not a duration",
		`"1e300"`:   "out of range",
		`true`:      "is not a duration",
	} {
		var d Duration
		err := d.UnmarshalJSON([]byte(in))
		if err == nil || !strings.Contains(err.Error(), reason) {
			t.Errorf("%s: error %v, want one saying %q", in, err, reason)
		}
	}
}
