package drills

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"sort"
	"strings"
	"time"
)

// takeoverSteps are the log lines of a takeover, in the order they happen:
// a standby's stream to the leader drops, it deposes the leader (or fails
// to), campaigns, wins, and commits its term's first write. Their offsets
// from the fault say where a takeover's time went.
var takeoverSteps = []string{
	"lost the leader; reconnecting",
	"the silent leader no longer leads",
	"could not depose the silent leader",
	"deposed the leader after its stream dropped",
	"campaign failed; retrying",
	"became leader",
	"first write of the term committed",
}

// phases reads the survivors' logs (JSON, one object a line, "ts" in
// seconds) and returns, per replica, the first line of each takeover step
// after t0 with its offset, e.g. "n2: deposed … +412ms (probe 1ms, depose
// 398ms)". A figure for the report, never asserted.
func (d *drill) phases(t0 time.Time) string {
	var out []string
	for _, s := range d.c.Servers {
		f, err := os.Open(s.LogPath)
		if err != nil {
			continue
		}
		seen := map[string]string{}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Bytes()
			if len(line) == 0 || line[0] != '{' {
				continue
			}
			var l map[string]any
			if json.Unmarshal(line, &l) != nil {
				continue
			}
			ts, _ := l["ts"].(float64)
			msg, _ := l["msg"].(string)
			at := time.Unix(0, int64(ts*float64(time.Second)))
			if at.Before(t0) || at.After(t0.Add(10*time.Second)) || seen[msg] != "" {
				continue
			}
			for _, step := range takeoverSteps {
				if msg != step {
					continue
				}
				var extra []string
				for _, k := range []string{"probe", "depose", "requests", "since_won", "retried", "error"} {
					if v, ok := l[k]; ok {
						extra = append(extra, fmt.Sprintf("%s %v", k, v))
					}
				}
				seen[msg] = fmt.Sprintf("+%dms %s", int(math.Round(float64(at.Sub(t0))/1e6)), msg)
				if len(extra) > 0 {
					seen[msg] += " (" + strings.Join(extra, ", ") + ")"
				}
			}
		}
		f.Close()
		var steps []string
		for _, v := range seen {
			steps = append(steps, v)
		}
		sort.Slice(steps, func(i, j int) bool { return offset(steps[i]) < offset(steps[j]) })
		if len(steps) > 0 {
			out = append(out, s.Name+": "+strings.Join(steps, "; "))
		}
	}
	return strings.Join(out, "\n    ")
}

func offset(step string) int {
	var n int
	fmt.Sscanf(step, "+%dms", &n)
	return n
}
