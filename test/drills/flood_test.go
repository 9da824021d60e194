package drills

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/orion-sched/orion/test/internal/cluster"
)

// The flood drill: many clients submit as fast as they are let, and
// hundreds of event-stream clients never read, while the test, from an
// address of its own, submits probe DAGs and polls readiness and the
// leader. It runs on the namespace cluster, where the test's clients are
// not on loopback (loopback callers are never rate-limited), with a rate
// limit of floodRateLimit requests/s per address and replica.
const (
	floodRateLimit = 50
	floodAddrs     = 4                // client addresses of the flood (10.213.253.1…)
	floodClients   = 128              // concurrent submitters, half polite, half not
	floodSSE       = 300              // event-stream clients that never read, on the leader
	floodMaxDAGs   = 3000             // new DAGs the flood submits at most
	floodMaxTries  = 30000            // submission attempts at most
	floodFor       = 20 * time.Second // and for at most this long
	// A hostile client retries a refused submission after this, whatever
	// Retry-After says; a polite one waits Retry-After.
	floodHostileRetry = 20 * time.Millisecond
	// floodToken is the cluster's API token: off loopback a deployment has
	// one, and with it a standby's forwarded writes are limited where they
	// arrived, not again by the leader as if they were one client.
	floodToken = "flood-drill-token"
	// The flood's tasks are less urgent than the probes (0): a probe then
	// measures how soon the loop dispatches urgent work under the flood,
	// not the length of the flood's backlog (3,000 tasks on 8 slots).
	floodPriority = 5
)

// floodStats are one flood's figures.
type floodStats struct {
	mu                           sync.Mutex
	tries, accepted              int
	limited, limitedNoRetryAfter int
	unavailable, timeouts        int
	transport                    int
	unexpected                   []string

	probes       []time.Duration // submit → terminal, per probe
	probeFailed  []string
	reads        int
	readFailures []string
	maxRead      time.Duration
}

func (s *floodStats) add(f func(s *floodStats)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(s)
}

func flood(d *drill) {
	if d.floodIPs == nil {
		ips, err := d.lab.clientAddrs(floodAddrs)
		if err != nil {
			d.t.Fatalf("flood client addresses: %v", err)
		}
		d.floodIPs = ips
	}
	leader, _ := d.c.Leader()
	rssBefore, _ := procRSS(leader.PID())
	metricsBefore := d.scrape(leader)

	// The streams first: connected, then never read again.
	streams := d.openStreams(leader)
	defer func() {
		for _, c := range streams {
			_ = c.Close()
		}
	}()

	st := &floodStats{}
	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), floodFor)
	defer cancel()
	var nextID, tries atomic.Int64
	var wg sync.WaitGroup
	clients := make([]*http.Client, len(d.floodIPs))
	for i, ip := range d.floodIPs {
		dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 3 * time.Second}
		clients[i] = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: dialer.DialContext,
			MaxIdleConnsPerHost: floodClients}}
	}
	for i := range floodClients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d.submitter(ctx, clients[i%len(clients)], d.c.Servers[i%len(d.c.Servers)], i%2 == 0, &nextID, &tries, st)
		}()
	}
	// The test's own traffic, from its address: probes and reads.
	probeCtx, stopProbes := context.WithCancel(context.Background())
	var side sync.WaitGroup
	side.Add(2)
	go func() { defer side.Done(); d.probes(probeCtx, st) }()
	go func() { defer side.Done(); d.readiness(probeCtx, st) }()
	wg.Wait()
	floodTook := time.Since(began)
	// One probe more once the flood has passed, then stop.
	stopProbes()
	side.Wait()
	d.probeOnce(st, "after")

	open, closed := streamsState(streams)
	rssAfter, peak := procRSS(leader.PID())
	metricsAfter := d.scrape(leader)

	st.mu.Lock()
	defer st.mu.Unlock()
	slices.Sort(st.probes)
	maxProbe := time.Duration(-1)
	if len(st.probes) > 0 {
		maxProbe = st.probes[len(st.probes)-1]
	}
	delta := func(name string) float64 { return metricsAfter[name] - metricsBefore[name] }
	summary := fmt.Sprintf("flood: %d attempts in %v, %d DAGs accepted (%.0f/s), %d refused 429 (%d without Retry-After), "+
		"%d 503, %d 504, %d transport errors; leader %s counted %.0f rate-limited, %.0f events dropped, %.0f connections refused; "+
		"%d probe DAGs, max %s, median %s; %d readiness/leader reads, %d failed, slowest %s; "+
		"%d event streams that never read: %d cut by the server, %d still open; leader RSS %s before, %s after (peak %s)",
		st.tries, floodTook.Round(time.Millisecond), st.accepted, float64(st.accepted)/floodTook.Seconds(), st.limited, st.limitedNoRetryAfter,
		st.unavailable, st.timeouts, st.transport, leader.Name, delta("orion_rate_limited_total"), delta("orion_dropped_events_total"),
		delta("orion_http_connections_refused_total"), len(st.probes), ms(maxProbe), ms(median(st.probes)), st.reads, len(st.readFailures),
		ms(st.maxRead), len(streams), closed, open, mib(rssBefore), mib(rssAfter), mib(peak))
	d.t.Log(summary)
	d.res.notes = append(d.res.notes, summary)

	if st.limited == 0 {
		d.t.Errorf("%s: no submission was refused with 429: the flood did not reach the rate limit (%d rps per address)", d.prefix, floodRateLimit)
	}
	if st.limitedNoRetryAfter > 0 {
		d.t.Errorf("%s: %d 429 answers without Retry-After", d.prefix, st.limitedNoRetryAfter)
	}
	if len(st.unexpected) > 0 {
		d.t.Errorf("%s: submissions answered neither 2xx, 429, 503 nor 504: %s", d.prefix, strings.Join(first(st.unexpected, 10), "; "))
	}
	if len(st.probeFailed) > 0 {
		d.t.Errorf("%s: probe DAGs that did not succeed: %s", d.prefix, strings.Join(first(st.probeFailed, 10), "; "))
	}
	if len(st.readFailures) > 0 {
		d.t.Errorf("%s: %d readiness or leader reads unanswered: %s", d.prefix, len(st.readFailures), strings.Join(first(st.readFailures, 10), "; "))
	}
	if len(streams) < floodSSE {
		d.t.Errorf("%s: only %d of %d event streams opened", d.prefix, len(streams), floodSSE)
	}
}

// submitter submits one-task DAGs through s until the flood's bounds,
// each until it is accepted, with the same id (as a client does: no DAG
// twice).
func (d *drill) submitter(ctx context.Context, hc *http.Client, s *cluster.Server, polite bool, nextID, tries *atomic.Int64, st *floodStats) {
	for ctx.Err() == nil {
		n := nextID.Add(1)
		if n > floodMaxDAGs {
			return
		}
		id := fmt.Sprintf("%s-f%05d", d.prefix, n)
		body, _ := json.Marshal(map[string]any{"id": id, "name": id,
			"tasks": []map[string]any{{"id": "t", "kind": "shell", "command": recordCmd(d.runs, ""), "priority": floodPriority}}})
		for ctx.Err() == nil {
			if tries.Add(1) > floodMaxTries {
				return
			}
			code, hdr, err := post(ctx, hc, s.URL+"/api/v1/dags", body)
			var wait time.Duration
			st.add(func(st *floodStats) {
				st.tries++
				switch {
				case code == 200 || code == 201:
					st.accepted++
				case code == 429:
					st.limited++
					ra, perr := strconv.Atoi(hdr.Get("Retry-After"))
					if perr != nil || ra < 1 {
						st.limitedNoRetryAfter++
						ra = 1
					}
					wait = time.Duration(ra) * time.Second
					if !polite {
						wait = floodHostileRetry
					}
				case code == 503:
					st.unavailable++
					wait = 200 * time.Millisecond
				case code == 504:
					st.timeouts++
				case code == 0:
					if ctx.Err() == nil {
						st.transport++
					}
					wait = 100 * time.Millisecond
				default:
					st.unexpected = append(st.unexpected, fmt.Sprintf("%s via %s: %d %v", id, s.Name, code, err))
				}
			})
			if code == 200 || code == 201 {
				d.addAccepted(id)
				break
			}
			if code == 0 && ctx.Err() != nil {
				// Cut off by the flood's end: it may have been committed.
				d.addMaybe(id)
				return
			}
			select {
			case <-ctx.Done():
			case <-time.After(wait):
			}
		}
	}
}

func post(ctx context.Context, hc *http.Client, url string, body []byte) (int, http.Header, error) {
	req, err := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(string(body)))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+floodToken)
	resp, err := hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, resp.Header, nil
}

// addMaybe records a DAG whose submission was cut off: if the cluster has
// it, it must run like any other.
func (d *drill) addMaybe(id string) {
	if st, err := d.c.DAGAny(id); err == nil && st.ID == id {
		d.addAccepted(id)
	}
}

// openStreams opens floodSSE event streams on s, from the flood's
// addresses, each with a tiny receive buffer, reads the status line of each
// and nothing after it.
func (d *drill) openStreams(s *cluster.Server) []net.Conn {
	host := strings.TrimPrefix(s.URL, "http://")
	var out []net.Conn
	var refused []string
	for i := range floodSSE {
		ip := d.floodIPs[i%len(d.floodIPs)]
		dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 3 * time.Second,
			Control: func(_, _ string, c syscall.RawConn) error {
				var serr error
				err := c.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
				return errors.Join(err, serr)
			}}
		conn, err := dialer.Dial("tcp", host)
		if err != nil {
			refused = append(refused, err.Error())
			continue
		}
		fmt.Fprintf(conn, "GET /api/v1/events HTTP/1.1\r\nHost: %s\r\nAccept: text/event-stream\r\nAuthorization: Bearer %s\r\n\r\n", host, floodToken)
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		line, err := bufio.NewReaderSize(conn, 64).ReadString('\n')
		if err != nil || !strings.Contains(line, " 200 ") {
			refused = append(refused, fmt.Sprintf("%q %v", strings.TrimSpace(line), err))
			_ = conn.Close()
			continue
		}
		out = append(out, conn)
	}
	if len(refused) > 0 {
		d.t.Logf("%s: %d event streams not opened: %s", d.prefix, len(refused), strings.Join(first(refused, 5), "; "))
	}
	return out
}

// streamsState reads what each stream holds, for at most a second each
// in total, and counts those the server has closed (EOF or reset) and those
// still open.
func streamsState(conns []net.Conn) (open, closed int) {
	deadline := time.Now().Add(2 * time.Second)
	buf := make([]byte, 64<<10)
	for _, c := range conns {
		_ = c.SetReadDeadline(deadline)
		for {
			_, err := c.Read(buf)
			if err == nil {
				continue
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				open++
			} else {
				closed++
			}
			break
		}
		if time.Now().After(deadline) {
			deadline = time.Now().Add(50 * time.Millisecond) // the rest: what is already there
		}
	}
	return open, closed
}

// probes submits a 3-task probe DAG (priority 0) through each replica in turn and waits
// for it to end, one after the other, until ctx ends.
func (d *drill) probes(ctx context.Context, st *floodStats) {
	for i := 0; ctx.Err() == nil; i++ {
		d.probeOnce(st, strconv.Itoa(i))
	}
}

func (d *drill) probeOnce(st *floodStats, tag string) {
	id := fmt.Sprintf("%s-probe-%s", d.prefix, tag)
	var tasks []map[string]any
	for k, name := range []string{"p1", "p2", "p3"} {
		tk := map[string]any{"id": name, "kind": "shell", "command": recordCmd(d.runs, ""), "priority": 0}
		if k > 0 {
			tk["depends_on"] = []string{fmt.Sprintf("p%d", k)}
		}
		tasks = append(tasks, tk)
	}
	s := d.c.Servers[len(id)%len(d.c.Servers)]
	t0 := time.Now()
	d.c.Submit(s.URL, map[string]any{"id": id, "name": id, "tasks": tasks})
	d.addAccepted(id)
	deadline := t0.Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		if dg, err := d.c.DAG(s, id); err == nil && dg.Status != "running" {
			if dg.Status != "succeeded" {
				st.add(func(st *floodStats) { st.probeFailed = append(st.probeFailed, id+" "+dg.Status) })
				return
			}
			took := time.Since(t0)
			st.add(func(st *floodStats) { st.probes = append(st.probes, took) })
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	st.add(func(st *floodStats) { st.probeFailed = append(st.probeFailed, id+" not finished within 2m") })
}

// readiness polls /readyz and /api/v1/leader on every replica every 200 ms.
func (d *drill) readiness(ctx context.Context, st *floodStats) {
	for ctx.Err() == nil {
		for _, s := range d.c.Servers {
			for _, path := range []string{"/readyz", "/api/v1/leader"} {
				t0 := time.Now()
				code, body, err := d.c.Get(s.URL, path)
				took := time.Since(t0)
				st.add(func(st *floodStats) {
					st.reads++
					st.maxRead = max(st.maxRead, took)
					if code != 200 {
						st.readFailures = append(st.readFailures, fmt.Sprintf("%s %s %s: %d %s %v", t0.Format("15:04:05.000"), s.Name, path, code,
							strings.TrimSpace(string(body)), err))
					}
				})
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// scrape reads s's counters that the flood moves.
func (d *drill) scrape(s *cluster.Server) map[string]float64 {
	out := map[string]float64{}
	code, body, err := d.c.Get(s.URL, "/metrics")
	if err != nil || code != 200 {
		d.t.Logf("%s /metrics: %d %v", s.Name, code, err)
		return out
	}
	for _, line := range strings.Split(string(body), "\n") {
		for _, name := range []string{"orion_rate_limited_total", "orion_dropped_events_total", "orion_http_connections_refused_total"} {
			if v, ok := strings.CutPrefix(line, name+" "); ok {
				out[name], _ = strconv.ParseFloat(strings.TrimSpace(v), 64)
			}
		}
	}
	return out
}

// procRSS is a process's resident set and its peak, from /proc.
func procRSS(pid int) (rss, peak int64) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1, -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "VmRSS:":
			rss = kb << 10
		case "VmHWM:":
			peak = kb << 10
		}
	}
	return rss, peak
}

func mib(b int64) string {
	if b < 0 {
		return "?"
	}
	return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20))
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return -1
	}
	return ds[len(ds)/2]
}
