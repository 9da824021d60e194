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
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/orion-sched/orion/internal/http/apitypes"
	"github.com/orion-sched/orion/internal/workerstream"
	"github.com/orion-sched/orion/test/internal/cluster"
)

// TestLeadershipUnderLoad is issue 27's "load cannot starve leadership"
// measurement, against a running cluster (test/cluster.sh): idle event
// streams that never read and worker streams that flood, on the leader,
// while `orion bench --server` runs; then it counts the elections
// (orion_leader_changes_total summed over the replicas) and wants none.
// It only runs when ORION_LOAD_SERVERS names the cluster:
//
//	ORION_LOAD_SERVERS   the replicas' API URLs, comma-separated (required)
//	ORION_LOAD_ETCD      the etcd members' client URLs, for bench's etcd phase
//	ORION_LOAD_STREAMS   idle event streams (default 1000, at most 2000); the
//	                     replicas' max_event_subscribers must admit them
//	ORION_LOAD_FLOODERS  flooding worker streams (default 4, at most 16)
//	ORION_LOAD_FLOOD_IDS stable (default: a worker in a tight loop, which
//	                     dials again under its own id) or fresh (a new id
//	                     each dial: a client with the token posing as ever
//	                     new workers)
//	ORION_LOAD_BENCH     bench's flags (default --tasks 10000 --chain 100 --shell-chain 50)
//
// Everything stays on loopback: the streams come from 127.0.0.2 to
// 127.0.0.11 (so that max_event_subscribers_per_client, 128, admits 100
// each), and the load ends with bench, or after loadMaxFor.
func TestLeadershipUnderLoad(t *testing.T) {
	servers := splitList(os.Getenv("ORION_LOAD_SERVERS"))
	if len(servers) == 0 {
		t.Skip("set ORION_LOAD_SERVERS to a running cluster's API URLs (test/cluster.sh up) to measure")
	}
	for _, s := range servers {
		if !isLoopbackURL(s) {
			t.Fatalf("ORION_LOAD_SERVERS: %s is not on loopback; this load stays on 127.0.0.0/8", s)
		}
	}
	nStreams := envInt(t, "ORION_LOAD_STREAMS", 1000, 2000)
	nFlooders := envInt(t, "ORION_LOAD_FLOODERS", 4, 16)
	benchArgs := strings.Fields(os.Getenv("ORION_LOAD_BENCH"))
	if len(benchArgs) == 0 {
		benchArgs = []string{"--tasks", "10000", "--chain", "100", "--shell-chain", "50"}
	}

	leader := loadLeader(t, servers[0])
	t.Logf("leader %s", leader)
	changesBefore := leaderChanges(t, servers)
	flooded0 := loadMetric(leader, "orion_worker_streams_flooded_total")
	dropped0 := loadMetric(leader, "orion_dropped_events_total")

	ctx, cancel := context.WithTimeout(context.Background(), loadMaxFor)
	defer cancel()

	streams, refused := openIdleStreams(t, leader, nStreams)
	defer func() {
		for _, c := range streams {
			_ = c.Close()
		}
	}()
	t.Logf("%d idle event streams open on %s (%d refused)", len(streams), leader, refused)

	// The watcher: who leads, every 200 ms, from every replica.
	var watch leaderWatch
	var side sync.WaitGroup
	side.Add(1)
	go func() { defer side.Done(); watch.run(ctx, servers) }()

	var fl floodCounts
	for i := range nFlooders {
		side.Add(1)
		go func() { defer side.Done(); floodStream(ctx, leader, i, &fl) }()
	}

	// bench, in the foreground of the load.
	args := append([]string{"bench", "--server", strings.Join(servers, ",")}, benchArgs...)
	if e := os.Getenv("ORION_LOAD_ETCD"); e != "" {
		args = append(args, "--etcd-endpoints", e)
	}
	cmd := exec.CommandContext(ctx, cluster.Bin, args...)
	cmd.Env = cluster.FilterEnv(os.Environ(), "ORION_")
	began := time.Now()
	out, benchErr := cmd.CombinedOutput()
	took := time.Since(began)
	cancel()
	side.Wait()

	open, closed := streamsState(streams)
	changes := leaderChanges(t, servers) - changesBefore
	summary := fmt.Sprintf("load: %d idle event streams on %s (%d refused; %d still open, %d cut by the server at the end), "+
		"%d flooding worker streams: %d streams dialled, %d heartbeats sent, leader counted %.0f closed for flooding; "+
		"%.0f events dropped; bench %v (%v): leader changes %d (orion_leader_changes_total over the replicas), "+
		"%d leader reads, %d unanswered, slowest %s, leaders seen %v",
		len(streams), leader, refused, open, closed, nFlooders, fl.dialled.Load(), fl.sent.Load(),
		loadMetric(leader, "orion_worker_streams_flooded_total")-flooded0,
		loadMetric(leader, "orion_dropped_events_total")-dropped0,
		took.Round(time.Second), benchErr, changes, watch.reads, watch.failed, ms(watch.slowest), watch.seen)
	t.Log(summary)
	t.Logf("orion %s:\n%s", strings.Join(args, " "), benchFigures(string(out)))
	for _, c := range watch.changes {
		t.Logf("leader change seen: %s", c)
	}
	if benchErr != nil {
		t.Errorf("bench: %v\n%s", benchErr, out)
	}
	if len(streams) < nStreams {
		t.Errorf("only %d of %d event streams admitted: raise max_event_subscribers", len(streams), nStreams)
	}
	if nFlooders > 0 && fl.dialled.Load() == 0 {
		t.Errorf("no flooding worker stream could be dialled")
	}
	if changes != 0 || len(watch.changes) > 0 {
		t.Errorf("leadership changed under load: %d elections, changes seen %v", changes, watch.changes)
	}
}

// loadMaxFor bounds the whole load, bench included.
const loadMaxFor = 9 * time.Minute

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, strings.TrimRight(p, "/"))
		}
	}
	return out
}

func isLoopbackURL(s string) bool {
	host := strings.TrimPrefix(strings.TrimPrefix(s, "http://"), "https://")
	h, _, err := net.SplitHostPort(strings.SplitN(host, "/", 2)[0])
	ip := net.ParseIP(h)
	return err == nil && ip != nil && ip.IsLoopback()
}

func envInt(t *testing.T, name string, def, most int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n > most {
		t.Fatalf("%s=%q: want 0 to %d", name, s, most)
	}
	return n
}

func loadGet(url string) ([]byte, error) {
	hc := &http.Client{Timeout: 3 * time.Second}
	resp, err := hc.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err == nil && resp.StatusCode != 200 {
		err = fmt.Errorf("%s: %d %s", url, resp.StatusCode, strings.TrimSpace(string(b)))
	}
	return b, err
}

func loadLeader(t *testing.T, server string) string {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		b, err := loadGet(server + "/api/v1/leader")
		var l apitypes.Leader
		if err == nil && json.Unmarshal(b, &l) == nil && l.LeaderURL != "" {
			return strings.TrimRight(l.LeaderURL, "/")
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("no leader named by %s within 30s", server)
	return ""
}

// loadMetric reads one unlabelled sample of url's /metrics; -1 if absent.
func loadMetric(url, name string) float64 {
	b, err := loadGet(url + "/metrics")
	if err != nil {
		return -1
	}
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` (\S+)$`).FindSubmatch(b)
	if m == nil {
		return -1
	}
	v, _ := strconv.ParseFloat(string(m[1]), 64)
	return v
}

// leaderChanges sums orion_leader_changes_total (times a replica became
// leader) over the replicas.
func leaderChanges(t *testing.T, servers []string) int {
	sum := 0
	for _, s := range servers {
		v := loadMetric(s, "orion_leader_changes_total")
		if v < 0 {
			t.Fatalf("%s: no orion_leader_changes_total", s)
		}
		sum += int(v)
	}
	return sum
}

// openIdleStreams opens n event streams on url from 127.0.0.2… (100 per
// address), each with a tiny receive buffer, reads the status line of each
// and nothing after it.
func openIdleStreams(t *testing.T, url string, n int) (conns []net.Conn, refused int) {
	host := strings.TrimPrefix(url, "http://")
	var firstErr string
	for i := range n {
		ip := net.IPv4(127, 0, 0, byte(2+i/100))
		dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: ip}, Timeout: 3 * time.Second,
			Control: func(_, _ string, c syscall.RawConn) error {
				var serr error
				err := c.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
				return errors.Join(err, serr)
			}}
		conn, err := dialer.Dial("tcp", host)
		if err == nil {
			fmt.Fprintf(conn, "GET /api/v1/events HTTP/1.1\r\nHost: %s\r\nAccept: text/event-stream\r\n\r\n", host)
			_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			var line string
			line, err = bufio.NewReaderSize(conn, 64).ReadString('\n')
			if err == nil && !strings.Contains(line, " 200 ") {
				err = fmt.Errorf("%q", strings.TrimSpace(line))
			}
			if err != nil {
				_ = conn.Close()
			}
		}
		if err != nil {
			refused++
			if firstErr == "" {
				firstErr = err.Error()
			}
			continue
		}
		conns = append(conns, conn)
	}
	if refused > 0 {
		t.Logf("%d event streams not opened, the first: %s", refused, firstErr)
	}
	return conns, refused
}

type floodCounts struct{ dialled, sent atomic.Int64 }

// floodStream sends heartbeats in a tight loop on worker streams to url,
// dialling again 100 ms (an agent's backoff) after the leader closes one,
// until ctx ends or 20,000 streams.
func floodStream(ctx context.Context, url string, i int, fl *floodCounts) {
	wsURL, err := workerstream.StreamURL(url)
	if err != nil {
		return
	}
	for k := 0; k < 20_000 && ctx.Err() == nil; k++ {
		dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		c, err := workerstream.DialWebsocket(dctx, wsURL, "", nil)
		cancel()
		if err == nil {
			fl.dialled.Add(1)
			hello := workerstream.Msg{Type: workerstream.TypeHello, Hello: &workerstream.Hello{
				Worker: floodID(i, k), Slots: 1, Version: workerstream.ProtocolVersion,
				Host: "load", PID: 1, Instance: fmt.Sprintf("load-%d-%d", i, k)}}
			if c.Send(hello) == nil {
				for j := 0; j < 5_000_000 && ctx.Err() == nil; j++ {
					if c.Send(workerstream.Msg{Type: workerstream.TypeHeartbeat}) != nil {
						break
					}
					fl.sent.Add(1)
				}
			}
			_ = c.Close()
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// leaderWatch asks every replica who leads, every 200 ms, and notes when
// a replica's answer changes.
type leaderWatch struct {
	reads, failed int
	slowest       time.Duration
	seen          []string
	changes       []string
}

func (w *leaderWatch) run(ctx context.Context, servers []string) {
	// Each replica's answer against its own previous one: replicas learn
	// of a change at different moments, and comparing one with another
	// would count the lag as changes.
	last := map[string]string{}
	for ctx.Err() == nil {
		for _, s := range servers {
			t0 := time.Now()
			b, err := loadGet(s + "/api/v1/leader")
			took := time.Since(t0)
			w.reads++
			w.slowest = max(w.slowest, took)
			var l apitypes.Leader
			if err != nil || json.Unmarshal(b, &l) != nil {
				if ctx.Err() == nil {
					w.failed++
				}
				continue
			}
			if prev, ok := last[s]; !ok || l.Leader != prev {
				if ok {
					w.changes = append(w.changes, fmt.Sprintf("%s %s says %q (was %q)", t0.UTC().Format("15:04:05.000"), l.Node, l.Leader, prev))
				}
				last[s] = l.Leader
				if !slices.Contains(w.seen, l.Leader) {
					w.seen = append(w.seen, l.Leader)
				}
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// benchFigures keeps bench's output but the progress lines.
func benchFigures(out string) string {
	var keep []string
	for _, l := range strings.Split(out, "\n") {
		if strings.TrimSpace(l) != "" {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}

// floodID is the worker id of flooder i's k-th stream (ORION_LOAD_FLOOD_IDS).
func floodID(i, k int) string {
	if os.Getenv("ORION_LOAD_FLOOD_IDS") == "fresh" {
		return fmt.Sprintf("load-flood-%d-%d", i, k)
	}
	return fmt.Sprintf("load-flood-%d", i)
}
