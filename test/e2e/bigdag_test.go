package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/orion-sched/orion/test/internal/cluster"
)

// Big DAGs (issue 31): a DAG too large for one etcd record is stored in
// chunks under its key and made visible by its head record. These tests
// run one on the 3 etcd + 3 replicas + 2 workers cluster.

// bigDAGTasks is the size of TestBigDAGThroughLeaderKill: 20,000 in make
// test, ORION_BIG_DAG_TASKS (make drills sets 100,000) otherwise.
func bigDAGTasks(t *testing.T) int {
	n := 20_000
	if s := os.Getenv("ORION_BIG_DAG_TASKS"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 10 {
			t.Fatalf("ORION_BIG_DAG_TASKS=%q: want a number of tasks, at least 10", s)
		}
		n = v
	}
	return n
}

// wideDAG is a DAG of n tasks: start, a fan-out of n-4 noop tasks, a
// fan-in, then a chain of two. pad, when not empty, is each task's name,
// to make the DAG larger in bytes.
func wideDAG(id string, n int, pad string) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, `{"id":%q,"name":"wide","tasks":[{"id":"start","kind":"noop"}`, id)
	for i := 0; i < n-4; i++ {
		fmt.Fprintf(&b, `,{"id":"fan-%06d","kind":"noop","depends_on":["start"]`, i)
		if pad != "" {
			fmt.Fprintf(&b, `,"name":%q`, pad)
		}
		b.WriteByte('}')
	}
	b.WriteString(`,{"id":"join","kind":"noop","depends_on":[`)
	for i := 0; i < n-4; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"fan-%06d"`, i)
	}
	b.WriteString(`]},{"id":"chain-1","kind":"noop","depends_on":["join"]},{"id":"chain-2","kind":"noop","depends_on":["chain-1"]}]}`)
	return b.Bytes()
}

// bigCluster is cluster.New's with workers of 64 slots each: a big DAG of
// noop tasks is bounded by commits, not by the work, and 8 slots would
// make it a test of patience.
func bigCluster(t *testing.T) *cluster.Cluster {
	c := cluster.Define(t, cluster.Options{})
	for _, w := range c.Workers {
		w.Args = append(w.Args, "--slots", "64")
	}
	c.StartEtcd()
	c.StartOrion()
	return c
}

// submitBig posts body through the first running replica with a client
// that waits as long as a large submission takes, retrying while no leader
// takes it (the id makes a retry idempotent).
func submitBig(t *testing.T, c *cluster.Cluster, body []byte) time.Duration {
	t.Helper()
	hc := &http.Client{Timeout: 2 * time.Minute, Transport: c.HTTP.Transport}
	began := time.Now()
	var last string
	for attempt := 0; attempt < 20; attempt++ {
		for _, s := range c.Servers {
			if !s.Running() {
				continue
			}
			resp, err := hc.Post(s.URL+"/api/v1/dags", "application/json", bytes.NewReader(body))
			if err != nil {
				last = err.Error()
				continue
			}
			var out bytes.Buffer
			_, _ = out.ReadFrom(resp.Body)
			resp.Body.Close()
			switch resp.StatusCode {
			case 200, 201:
				return time.Since(began)
			case 502, 503, 504:
				last = fmt.Sprintf("%d %s", resp.StatusCode, out.String())
			default:
				t.Fatalf("submitting %d bytes: %d %s", len(body), resp.StatusCode, out.String())
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Fatalf("submitting %d bytes: no replica took it: %s", len(body), last)
	return 0
}

// clusterEtcd is a client of the cluster's etcd, to read what Orion wrote
// as any etcd user can.
func clusterEtcd(t *testing.T, c *cluster.Cluster) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.ClientURLs, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		MaxCallRecvMsgSize: 256 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// dagHead reads a DAG's head record from etcd: its status, and the chunks
// it names (0: none).
func dagHead(ctx context.Context, cli *clientv3.Client, id string) (status string, chunks int, err error) {
	resp, err := cli.Get(ctx, "/orion/v1/dags/"+id)
	if err != nil || len(resp.Kvs) == 0 {
		return "", 0, err
	}
	var h struct {
		Status string `json:"status"`
		Spec   *struct {
			Chunks int `json:"chunks"`
		} `json:"spec"`
	}
	if err := json.Unmarshal(resp.Kvs[0].Value, &h); err != nil {
		return "", 0, err
	}
	if h.Spec != nil {
		chunks = h.Spec.Chunks
	}
	return h.Status, chunks, nil
}

// taskRecords reads every task record of a DAG from etcd at one revision,
// in pages, and returns each task's status and attempt.
func taskRecords(t *testing.T, cli *clientv3.Client, id string) map[string][2]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	prefix := "/orion/v1/tasks/" + id + "/"
	out := map[string][2]string{}
	key, end := prefix, clientv3.GetPrefixRangeEnd(prefix)
	var rev int64
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(5000)}
		if rev > 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		resp, err := cli.Get(ctx, key, opts...)
		if err != nil {
			t.Fatal(err)
		}
		rev = resp.Header.Revision
		for _, kv := range resp.Kvs {
			var r struct {
				Status  string `json:"status"`
				Attempt int    `json:"attempt"`
			}
			if err := json.Unmarshal(kv.Value, &r); err != nil {
				t.Fatalf("%s: %v", kv.Key, err)
			}
			out[strings.TrimPrefix(string(kv.Key), prefix)] = [2]string{r.Status, strconv.Itoa(r.Attempt)}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return out
		}
		key = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// A DAG of bigDAGTasks tasks (a wide fan-out, a fan-in, a chain) runs to
// success through a kill -9 of the leader in the middle of its fan-out:
// it is stored in chunks, every task runs once (attempt 1, succeeded), none
// is lost, and no replica saw etcd refuse a request for its size.
func TestBigDAGThroughLeaderKill(t *testing.T) {
	n := bigDAGTasks(t)
	c := bigCluster(t)
	cli := clusterEtcd(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()

	const id = "big"
	body := wideDAG(id, n, "")
	began := time.Now()
	took := submitBig(t, c, body)
	t.Logf("%d tasks (%d bytes of JSON) accepted in %v", n, len(body), took.Round(time.Millisecond))
	if _, chunks, err := dagHead(ctx, cli, id); err != nil || (len(body) > 512<<10 && chunks < 1) {
		t.Fatalf("the DAG's head names %d chunks (%v)", chunks, err)
	}

	// Mid fan-out: a third of the tasks have a record (dispatched or done).
	c.WaitFor("a third of the tasks under way", 10*time.Minute, func() (bool, string) {
		resp, err := cli.Get(ctx, "/orion/v1/tasks/"+id+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			return false, err.Error()
		}
		return resp.Count >= int64(n/3), fmt.Sprintf("%d task records", resp.Count)
	})
	old, rep := c.Leader()
	t0 := time.Now()
	old.Kill9()
	nl, me := c.AwaitNewLeader(old.Name, t0, 30*time.Second)
	t.Logf("killed leader %s (pid %d) %v after the submission; %s leads, first commit %v after the kill",
		old.Name, rep.PID, t0.Sub(began).Round(time.Millisecond), nl.Name, me.FirstCommitAt.Sub(t0).Round(time.Millisecond))

	var status string
	c.WaitFor("the big DAG finished", 20*time.Minute, func() (bool, string) {
		var err error
		status, _, err = dagHead(ctx, cli, id)
		return status != "" && status != "running", fmt.Sprintf("status %q %v", status, err)
	})
	t.Logf("%d tasks: %s %v after the submission", n, status, time.Since(began).Round(time.Millisecond))
	if status != "succeeded" {
		t.Fatalf("the DAG ended %s", status)
	}

	recs := taskRecords(t, cli, id)
	if len(recs) != n {
		t.Errorf("%d task records, want %d", len(recs), n)
	}
	bad := 0
	for task, r := range recs {
		if r != [2]string{"succeeded", "1"} {
			if bad++; bad <= 5 {
				t.Errorf("task %s: %s in attempt %s, want succeeded in attempt 1", task, r[0], r[1])
			}
		}
	}
	if bad > 5 {
		t.Errorf("... %d tasks in all not succeeded once", bad)
	}

	// The replicas' own view agrees (the new leader's, read whole once).
	hc := &http.Client{Timeout: 2 * time.Minute, Transport: c.HTTP.Transport}
	resp, err := hc.Get(nl.URL + "/api/v1/dags/" + id)
	if err != nil {
		t.Fatal(err)
	}
	var d cluster.DAGState
	err = json.NewDecoder(resp.Body).Decode(&d)
	resp.Body.Close()
	if err != nil || d.Status != "succeeded" || d.Counts["succeeded"] != n {
		t.Fatalf("%s shows %s %v (%v)", nl.Name, d.Status, d.Counts, err)
	}

	for _, s := range c.Servers {
		raw, _ := os.ReadFile(s.LogPath)
		for _, refused := range []string{"request is too large", "too many operations", "dag_too_large"} {
			if bytes.Contains(raw, []byte(refused)) {
				t.Errorf("%s logged %q", s.Name, refused)
			}
		}
	}
}

// A chunked DAG of 5,000 tasks survives a standby's cold start (the
// restarted replica builds it from its chunks) and its deletion removes
// every key it had: etcdctl finds nothing under its prefixes.
func TestChunkedDAGColdLoadAndDelete(t *testing.T) {
	c := cluster.New(t, cluster.Options{})
	cli := clusterEtcd(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	const id, n = "chunky", 5000
	body := wideDAG(id, n, strings.Repeat("p", 200)) // about 1.5 MB: past etcd's request limit in one record
	submitBig(t, c, body)
	c.WaitFor("the chunked DAG finished", 4*time.Minute, func() (bool, string) {
		st, _, err := dagHead(ctx, cli, id)
		return st == "succeeded", fmt.Sprintf("status %q %v", st, err)
	})

	etcdctl := func(args ...string) []string {
		t.Helper()
		out, err := exec.Command("etcdctl", append([]string{"--endpoints", c.Endpoints}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("etcdctl %v: %v: %s", args, err, out)
		}
		return strings.Fields(string(out))
	}
	chunks := etcdctl("get", "--prefix", "--keys-only", "/orion/v1/dags/"+id+"/spec/")
	if _, named, err := dagHead(ctx, cli, id); err != nil || named < 2 || len(chunks) != named {
		t.Fatalf("the head names %d chunks (%v); etcd holds %v", named, err, chunks)
	}
	t.Logf("%d tasks in %d bytes of JSON: chunks %v", n, len(body), chunks)

	// A standby restarts cold and builds the DAG from etcd.
	leader, _ := c.Leader()
	var standby *cluster.Server
	for _, s := range c.Servers {
		if s != leader {
			standby = s
			break
		}
	}
	standby.Kill9()
	c.Restart(standby)
	hc := &http.Client{Timeout: time.Minute, Transport: c.HTTP.Transport}
	c.WaitFor(standby.Name+" shows the DAG", time.Minute, func() (bool, string) {
		resp, err := hc.Get(standby.URL + "/api/v1/dags/" + id)
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		var d cluster.DAGState
		if err := json.NewDecoder(resp.Body).Decode(&d); err != nil {
			return false, err.Error()
		}
		return d.Status == "succeeded" && d.Counts["succeeded"] == n, fmt.Sprintf("%d: %s %v", resp.StatusCode, d.Status, d.Counts)
	})

	// The same submission again, through the restarted standby: the same
	// DAG, so nothing is created (Idempotency by its id).
	resp, err := hc.Post(standby.URL+"/api/v1/dags", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var again struct {
		Created bool `json:"created"`
	}
	err = json.NewDecoder(resp.Body).Decode(&again)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || again.Created {
		t.Fatalf("the same DAG submitted again: %d created=%v (%v)", resp.StatusCode, again.Created, err)
	}

	code, out, _, err := c.Do("DELETE", standby.URL, "/api/v1/dags/"+id, "", nil)
	if err != nil || (code != 200 && code != 204) {
		t.Fatalf("DELETE: %d %s %v", code, out, err)
	}
	for _, prefix := range []string{"/orion/v1/dags/" + id, "/orion/v1/tasks/" + id + "/"} {
		if keys := etcdctl("get", "--prefix", "--keys-only", prefix); len(keys) != 0 {
			t.Errorf("after the deletion, %s holds %d keys: %v", prefix, len(keys), keys[:min(len(keys), 5)])
		}
	}
	c.WaitFor(standby.Name+" forgets the DAG", 30*time.Second, func() (bool, string) {
		code, _, err := c.Get(standby.URL, "/api/v1/dags/"+id)
		return code == 404, fmt.Sprintf("%d %v", code, err)
	})
}
