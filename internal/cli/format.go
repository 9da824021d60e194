package cli

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/orion-sched/orion/internal/client"
)

// now is the clock for ages and running durations; tests may pin it.
var now = time.Now

func newTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
}

// row writes cells as one tab-separated line; cells are made single-line so
// a stray tab or newline cannot break the columns.
func row(w io.Writer, cells ...string) {
	for i, c := range cells {
		cells[i] = cell(c)
	}
	fmt.Fprintln(w, strings.Join(cells, "\t"))
}

var cellReplacer = strings.NewReplacer("\t", " ", "\r\n", " ", "\n", " ", "\r", " ")

func cell(s string) string {
	s = strings.TrimSpace(cellReplacer.Replace(s))
	if s == "" {
		return "-"
	}
	return s
}

// truncate shortens s to at most n runes, marking the cut.
func truncate(s string, n int) string {
	s = strings.TrimSpace(cellReplacer.Replace(s))
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-3]) + "..."
}

// formatDuration renders a duration compactly: 850ms, 4.2s, 3m07s, 2h05m.
func formatDuration(d time.Duration) string {
	switch {
	case d < 0:
		return "-"
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%.1fs", d.Seconds())
	case d < time.Hour:
		d = d.Round(time.Second)
		return fmt.Sprintf("%dm%02ds", int(d/time.Minute), int(d%time.Minute/time.Second))
	case d < 48*time.Hour:
		d = d.Round(time.Minute)
		return fmt.Sprintf("%dh%02dm", int(d/time.Hour), int(d%time.Hour/time.Minute))
	}
	d = d.Round(time.Hour)
	return fmt.Sprintf("%dd%02dh", int(d/(24*time.Hour)), int(d%(24*time.Hour)/time.Hour))
}

// formatAge renders how long ago t was: "5m ago".
func formatAge(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := now().Sub(t)
	switch {
	case d < time.Second:
		return "just now"
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d/time.Minute))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh ago", int(d/time.Hour))
	}
	return fmt.Sprintf("%dd ago", int(d/(24*time.Hour)))
}

// formatTime renders an instant in local time with its age.
func formatTime(t *time.Time) string {
	if t == nil || t.IsZero() {
		return "-"
	}
	return fmt.Sprintf("%s (%s)", t.Local().Format("2006-01-02 15:04:05"), formatAge(*t))
}

// dagDuration is how long a DAG has run: to its end if finished, else to now.
func dagDuration(s *client.DAGSummary) string {
	if s.SubmittedAt.IsZero() {
		return "-"
	}
	end := now()
	if s.FinishedAt != nil {
		end = *s.FinishedAt
	}
	return formatDuration(end.Sub(s.SubmittedAt))
}

// taskDuration is the attempt's duration if finished, the time since it
// started if running, else "-".
func taskDuration(t *client.Task) string {
	switch {
	case t.DurationMs != nil:
		return formatDuration(time.Duration(*t.DurationMs) * time.Millisecond)
	case t.StartedAt != nil && t.FinishedAt != nil:
		return formatDuration(t.FinishedAt.Sub(*t.StartedAt))
	case t.StartedAt != nil && t.Status == client.StatusRunning:
		return formatDuration(now().Sub(*t.StartedAt))
	}
	return "-"
}

func attemptDuration(a *client.Attempt) string {
	if a.StartedAt == nil || a.FinishedAt == nil {
		return "-"
	}
	return formatDuration(a.FinishedAt.Sub(*a.StartedAt))
}

func exitCode(c *int) string {
	if c == nil {
		return "-"
	}
	return strconv.Itoa(*c)
}

// countOrder is the order statuses appear in progress lines and summaries:
// outcomes first, then what is in flight, then what waits.
var countOrder = []string{
	client.StatusSucceeded, client.StatusFailed, client.StatusUpstreamFailed, client.StatusCancelled,
	client.StatusSkipped, client.StatusRunning, client.StatusRetrying, client.StatusReady, client.StatusPending,
}

// formatCounts renders non-zero counts as "succeeded=3 running=2"; statuses
// this CLI does not know come last, sorted.
func formatCounts(counts map[string]int) string {
	var parts []string
	known := make(map[string]bool, len(countOrder))
	for _, s := range countOrder {
		known[s] = true
		if n := counts[s]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", s, n))
		}
	}
	var extra []string
	for s, n := range counts {
		if !known[s] && n > 0 {
			extra = append(extra, fmt.Sprintf("%s=%d", s, n))
		}
	}
	sort.Strings(extra)
	if parts = append(parts, extra...); len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, " ")
}
