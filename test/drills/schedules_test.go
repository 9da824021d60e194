package drills

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/orion-sched/orion/test/internal/cluster"
)

// TestScheduleDrills fires a schedule every second on a real cluster while
// its leader is killed, and checks from what ran (each run's task appends a
// line to a file) that every tick of the window ran exactly once:
//
//   - catchup all, the leader killed with kill -9 every few seconds and
//     SIGSTOPped once (60 s under ORION_DRILLS=1; one kill over about 10 s in
//     the short subset): no tick missing, none run twice;
//   - catchup skip, every replica SIGSTOPped for 5 s (ORION_DRILLS=1 only):
//     the ticks of the leader-less window are dropped, and only those.
//
// Every tick is listed with its run and the fence of the leader that
// dispatched it.
func TestScheduleDrills(t *testing.T) {
	full := os.Getenv("ORION_DRILLS") == "1"
	c := cluster.New(t, cluster.Options{OrphanGrace: 5 * time.Second})
	window, every := 10*time.Second, 4*time.Second
	if full {
		window, every = 60*time.Second, 6*time.Second
	}
	t.Run("catchup all across kill -9 and SIGSTOP of the leader", func(t *testing.T) {
		sd := newSchedDrill(t, c, "every", "all")
		start := time.Now()
		kills, stops := 0, 0
		for time.Since(start) < window-every {
			time.Sleep(every - every/3*time.Duration(kills%2)) // 6 s, 4 s, 6 s … (4 s, 2.7 s short)
			old, _ := c.Leader()
			t0 := time.Now()
			if full && stops == 0 && time.Since(start) > window/2 {
				old.Signal(syscall.SIGSTOP)
				time.Sleep(2 * time.Second)
				_, me := c.AwaitNewLeader(old.Name, t0, 30*time.Second)
				old.Signal(syscall.SIGCONT)
				c.WaitFor(old.Name+" a standby after SIGCONT", 30*time.Second, func() (bool, string) {
					me, err := c.Self(old)
					return err == nil && me.Role == "standby", fmt.Sprintf("%+v %v", me, err)
				})
				stops++
				t.Logf("SIGSTOP %s for 2 s: takeover %s", old.Name, me.FirstCommitAt.Sub(t0).Round(time.Millisecond))
				continue
			}
			old.Kill9()
			_, me := c.AwaitNewLeader(old.Name, t0, 30*time.Second)
			kills++
			t.Logf("kill -9 %s: takeover %s", old.Name, me.FirstCommitAt.Sub(t0).Round(time.Millisecond))
			c.Restart(old)
		}
		for time.Since(start) < window {
			time.Sleep(100 * time.Millisecond)
		}
		ticks := sd.finish(start.Add(window))
		var missing, doubled []string
		for _, tk := range ticks {
			switch {
			case tk.run == "":
				missing = append(missing, tk.at.Format("15:04:05"))
			case len(tk.execs) != 1:
				doubled = append(doubled, fmt.Sprintf("%s ran %d times", tk.run, len(tk.execs)))
			}
		}
		t.Logf("schedule @every 1s, catchup all, %d kill -9 and %d SIGSTOP of the leader over %s: %d ticks, %d missing, %d not run exactly once, %d fired late (over 1 s after the tick), latest %s",
			kills, stops, window, len(ticks), len(missing), len(doubled), lateCount(ticks), maxLate(ticks))
		if len(missing) > 0 || len(doubled) > 0 {
			t.Errorf("missing ticks %v; not run exactly once: %v", missing, doubled)
		}
	})
	if !full {
		return
	}
	t.Run("catchup skip across a 5 s leader-less window", func(t *testing.T) {
		sd := newSchedDrill(t, c, "skip", "skip")
		time.Sleep(5 * time.Second)
		t0 := time.Now()
		for _, s := range c.Servers {
			s.Signal(syscall.SIGSTOP)
		}
		time.Sleep(5 * time.Second)
		t1 := time.Now()
		for _, s := range c.Servers {
			s.Signal(syscall.SIGCONT)
		}
		c.Leader()
		back := time.Now()
		time.Sleep(5 * time.Second)
		ticks := sd.finish(time.Now())
		var gap []string
		for _, tk := range ticks {
			switch {
			case tk.run == "":
				gap = append(gap, tk.at.Format("15:04:05"))
				if tk.at.Before(t0.Add(-time.Second)) || tk.at.After(back.Add(2*time.Second)) {
					t.Errorf("tick %s missing outside the leader-less window %s .. %s (leader back %s)",
						tk.at.Format("15:04:05"), t0.Format("15:04:05.000"), t1.Format("15:04:05.000"), back.Format("15:04:05.000"))
				}
			case len(tk.execs) != 1:
				t.Errorf("%s ran %d times", tk.run, len(tk.execs))
			}
		}
		t.Logf("schedule @every 1s, catchup skip, every replica stopped %s .. %s, a leader again at %s: %d ticks, gap of %d: %v",
			t0.Format("15:04:05.000"), t1.Format("15:04:05.000"), back.Format("15:04:05.000"), len(ticks), len(gap), gap)
		if len(gap) == 0 {
			t.Errorf("catchup skip over a 5 s leader-less window dropped no tick")
		}
	})
}

// schedDrill is one schedule under a drill.
type schedDrill struct {
	t   *testing.T
	c   *cluster.Cluster
	id  string
	log string
}

// tickRun is one tick of the window: its run (empty when it was not
// fired) and the executions its task logged.
type tickRun struct {
	at     time.Time
	run    string
	late   time.Duration // run submitted this long after its tick
	execs  []string
	fences []string
}

func newSchedDrill(t *testing.T, c *cluster.Cluster, id, catchup string) *schedDrill {
	sd := &schedDrill{t: t, c: c, id: id, log: filepath.Join(c.Work, id+"-runs.log")}
	spec := map[string]any{"cron": "@every 1s", "catchup": catchup}
	if catchup == "all" {
		spec["catchup_limit"] = 1000 // no tick of the window left out for the bound
	}
	body, _ := json.Marshal(map[string]any{
		"id":       id,
		"schedule": spec,
		"tasks": []map[string]any{{"id": "run", "kind": "shell", "max_retries": 0,
			"command": fmt.Sprintf(`echo "$ORION_DAG_ID $ORION_ATTEMPT $ORION_LEADER_FENCE $$" >> %s`, sd.log)}},
	})
	c.WaitFor("creating schedule "+id, 30*time.Second, func() (bool, string) {
		s, _ := c.Leader()
		code, out, _, err := c.Do("POST", s.URL, "/api/v1/schedules", "application/json", body)
		if code != 0 && code != 201 && code != 200 && code != 503 && code != 504 {
			t.Fatalf("creating schedule: %d %s", code, out)
		}
		return code == 201 || code == 200, fmt.Sprintf("%d %s %v", code, out, err)
	})
	return sd
}

type scheduleView struct {
	CreatedAt time.Time  `json:"created_at"`
	LastTick  *time.Time `json:"last_tick"`
}

type runsView struct {
	Runs []struct {
		ID          string    `json:"id"`
		Tick        time.Time `json:"tick"`
		Status      string    `json:"status"`
		SubmittedAt time.Time `json:"submitted_at"`
	} `json:"runs"`
}

// finish waits until the leader has handled every tick up to until (its
// cursor reached it), pauses the schedule, waits for its runs to finish and
// returns every tick from the first after its creation to its last, with
// the runs and executions found, and logs them. Without the wait, a firer
// that stopped firing would leave a short window with nothing missing in
// it, and the drill would pass.
func (sd *schedDrill) finish(until time.Time) []tickRun {
	t, c := sd.t, sd.c
	until = until.Truncate(time.Second)
	c.WaitFor("the cursor of "+sd.id+" reaching "+until.Format("15:04:05"), 60*time.Second, func() (bool, string) {
		var sv scheduleView
		s, _ := c.Leader()
		if err := c.GetJSON(s.URL, "/api/v1/schedules/"+sd.id, &sv); err != nil {
			return false, err.Error()
		}
		return sv.LastTick != nil && !sv.LastTick.Before(until), fmt.Sprintf("last tick %v", sv.LastTick)
	})
	c.WaitFor("pausing schedule "+sd.id, 30*time.Second, func() (bool, string) {
		s, _ := c.Leader()
		code, out, _, err := c.Do("POST", s.URL, "/api/v1/schedules/"+sd.id+"/pause", "", nil)
		return code == 200, fmt.Sprintf("%d %s %v", code, out, err)
	})
	var sv scheduleView
	var rv runsView
	c.WaitFor("the runs of "+sd.id+" finished", 60*time.Second, func() (bool, string) {
		s, _ := c.Leader()
		if err := c.GetJSON(s.URL, "/api/v1/schedules/"+sd.id, &sv); err != nil {
			return false, err.Error()
		}
		rv = runsView{}
		if err := c.GetJSON(s.URL, "/api/v1/schedules/"+sd.id+"/runs", &rv); err != nil {
			return false, err.Error()
		}
		for _, r := range rv.Runs {
			if r.Status != "succeeded" {
				return false, r.ID + " " + r.Status
			}
		}
		return true, ""
	})
	execs := map[string][]string{}
	fences := map[string][]string{}
	f, err := os.Open(sd.log)
	if err != nil {
		t.Fatalf("no run logged: %v", err)
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) == 4 {
			execs[fs[0]] = append(execs[fs[0]], sc.Text())
			fences[fs[0]] = append(fences[fs[0]], fs[2])
		}
	}
	f.Close()
	byTick := map[int64]int{}
	last := sv.CreatedAt
	if sv.LastTick != nil {
		last = *sv.LastTick
	}
	for i, r := range rv.Runs {
		byTick[r.Tick.Unix()] = i
		if r.Tick.After(last) {
			last = r.Tick
		}
	}
	if last.Before(until) {
		t.Errorf("the window of %s ends at %s, before %s", sd.id, last.Format("15:04:05"), until.Format("15:04:05"))
	}
	var out []tickRun
	for at := sv.CreatedAt.Truncate(time.Second).Add(time.Second); !at.After(last); at = at.Add(time.Second) {
		tk := tickRun{at: at}
		if i, ok := byTick[at.Unix()]; ok {
			r := rv.Runs[i]
			tk.run, tk.late, tk.execs, tk.fences = r.ID, r.SubmittedAt.Sub(r.Tick), execs[r.ID], fences[r.ID]
		}
		out = append(out, tk)
	}
	for id := range execs {
		if !strings.HasPrefix(id, sd.id+"-") {
			continue
		}
		found := false
		for _, tk := range out {
			found = found || tk.run == id
		}
		if !found {
			t.Errorf("%s ran but is not a tick of the window", id)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].at.Before(out[j].at) })
	var b strings.Builder
	fmt.Fprintf(&b, "%-10s %-24s %-6s %-9s %s\n", "TICK", "RUN", "RAN", "LATE", "LEADER FENCE")
	for _, tk := range out {
		run, late := tk.run, ""
		if run == "" {
			run = "(none)"
		} else {
			late = tk.late.Round(time.Millisecond).String()
		}
		fmt.Fprintf(&b, "%-10s %-24s %-6d %-9s %s\n", tk.at.Format("15:04:05"), run, len(tk.execs), late, strings.Join(tk.fences, ","))
	}
	t.Logf("ticks of %s:\n%s", sd.id, b.String())
	return out
}

func lateCount(ticks []tickRun) int {
	n := 0
	for _, tk := range ticks {
		if tk.run != "" && tk.late > time.Second {
			n++
		}
	}
	return n
}

func maxLate(ticks []tickRun) time.Duration {
	var m time.Duration
	for _, tk := range ticks {
		if tk.run != "" && tk.late > m {
			m = tk.late
		}
	}
	return m.Round(time.Millisecond)
}
