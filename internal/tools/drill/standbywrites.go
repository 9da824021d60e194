package drill

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/orion-sched/orion/internal/client"
)

// standbyWrites submits one-task DAGs without an id through the standbys
// while the leader is stopped, as clients that know a standby's address do,
// and records how long each took to be answered. A standby forwards each to
// the leader; one sent to the frozen leader must be sent again to its
// successor (or refused with 503 and Retry-After) within about a second of
// the fault, never left waiting for the old leader to wake up, and each must
// make one DAG, under the id the standby chose.
type standbyWrites struct {
	d       *driller
	prefix  string
	started time.Time
	cancel  context.CancelFunc
	done    chan struct{}

	mu   sync.Mutex
	sent []standbyWrite
}

type standbyWrite struct {
	name, via, id string
	at            time.Time
	took          time.Duration
	code          int
	retryAfter    string
	err           error
}

// standbyWriteTimeout is the writers' client timeout: far above the bound
// a write must meet, so that one left waiting shows as such.
const standbyWriteTimeout = 30 * time.Second

// maxStandbyWrites bounds the writes of one drill per standby.
const maxStandbyWrites = 500

func (d *driller) startStandbyWrites(ctx context.Context, prefix string, standbys []client.Replica) *standbyWrites {
	ctx, cancel := context.WithCancel(ctx)
	sw := &standbyWrites{d: d, prefix: prefix, started: time.Now(), cancel: cancel, done: make(chan struct{})}
	hc := &http.Client{Timeout: standbyWriteTimeout, Transport: d.api.hc.Transport}
	var wg sync.WaitGroup
	for i, s := range standbys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 1; n <= maxStandbyWrites && ctx.Err() == nil; n++ {
				sw.send(hc, s, fmt.Sprintf("%s-s%d-%03d", prefix, i+1, n))
				if !sleepCtx(ctx, 20*time.Millisecond) {
					return
				}
			}
		}()
	}
	go func() {
		wg.Wait()
		close(sw.done)
	}()
	return sw
}

func (sw *standbyWrites) send(hc *http.Client, s client.Replica, name string) {
	body, _ := json.Marshal(map[string]any{"name": name, "tasks": []map[string]any{{
		"id": "t", "kind": "shell", "command": recordCommand(sw.d.runsPath, ""), "max_retries": 3, "timeout": "30s"}}})
	w := standbyWrite{name: name, via: s.Name, at: time.Now()}
	req, _ := http.NewRequest(http.MethodPost, strings.TrimRight(s.APIURL, "/")+"/api/v1/dags", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "orion-drill")
	if sw.d.api.token != "" {
		req.Header.Set("Authorization", "Bearer "+sw.d.api.token)
	}
	resp, err := hc.Do(req)
	w.took = time.Since(w.at)
	if err != nil {
		w.err = err
	} else {
		var a struct {
			ID string `json:"id"`
		}
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		_ = json.Unmarshal(b, &a)
		w.code, w.retryAfter, w.id = resp.StatusCode, resp.Header.Get("Retry-After"), a.ID
	}
	sw.mu.Lock()
	sw.sent = append(sw.sent, w)
	sw.mu.Unlock()
}

// stop ends the writes and fills res: how many, how answered, the slowest,
// and the submissions that made other than one DAG (duplicates). The DAGs
// made are returned, to be accounted with the drill's.
func (sw *standbyWrites) stop(ctx context.Context, res *Result) []string {
	sw.cancel()
	<-sw.done
	sw.mu.Lock()
	sent := sw.sent
	sw.mu.Unlock()
	byName := map[string][]string{}
	if l, err := sw.d.client().ListDAGs(ctx, "", 1000); err == nil {
		for _, d := range l.DAGs {
			if strings.HasPrefix(d.Name, sw.prefix+"-") {
				byName[d.Name] = append(byName[d.Name], d.ID)
			}
		}
	} else {
		res.fail(fmt.Errorf("listing the DAGs written through the standbys: %w", err))
	}
	var slowest time.Duration
	var made []string
	res.StandbyWrites = len(sent)
	for _, w := range sent {
		slowest = max(slowest, w.took)
		ids := byName[w.name]
		switch {
		case w.err != nil:
			res.StandbyUnanswered++
		case w.code/100 == 2:
			if len(ids) == 0 || ids[0] != w.id {
				res.StandbyNotApplied++
			}
		case w.code == http.StatusServiceUnavailable && w.retryAfter != "":
			res.Standby503++
		default:
			res.StandbyUnexpected++
		}
		if len(ids) > 1 {
			res.StandbyDuplicates++
		}
		made = append(made, ids...)
	}
	if len(sent) > 0 {
		res.StandbyWriteMaxMS = ms(slowest)
	}
	if res.StandbyUnanswered+res.StandbyUnexpected+res.StandbyNotApplied+res.StandbyDuplicates > 0 {
		res.fail(fmt.Errorf("writes through the standbys: %d unanswered, %d answered neither 2xx nor 503 with Retry-After, "+
			"%d answered 2xx without their DAG, %d made more than one DAG", res.StandbyUnanswered, res.StandbyUnexpected,
			res.StandbyNotApplied, res.StandbyDuplicates))
	}
	return made
}
