package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/orion-sched/orion/internal/core"
	"github.com/orion-sched/orion/internal/model"
	"github.com/orion-sched/orion/internal/testutil/etcdtest"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestParseKey(t *testing.T) {
	for key, want := range map[string][2]string{
		"/orion/v1/dags/d1":         {"d1", ""},
		"/orion/v1/tasks/d1/t1":     {"d1", "t1"},
		"/orion/v1/tasks/d1/":       {"", "-"},
		"/orion/v1/tasks/d1/t1/x":   {"", "-"},
		"/orion/v1/dags/":           {"", "-"},
		"/orion/v1/election/abc":    {"", "-"},
		"/orion/v1/replicas/n1":     {"", "-"},
		"/elsewhere/orion/v1/dags/": {"", "-"},
	} {
		d, tk, ok := ParseKey(key)
		if want[1] == "-" {
			if ok {
				t.Errorf("%s parsed as %s/%s", key, d, tk)
			}
			continue
		}
		if !ok || d != want[0] || tk != want[1] {
			t.Errorf("%s: %q %q %v", key, d, tk, ok)
		}
	}
	if DAGTasksPrefix("d1") == DAGTasksPrefix("d10")[:len(DAGTasksPrefix("d1"))] {
		t.Error("d1's task prefix covers d10's tasks")
	}
}

func dagEntry(id string, n int) core.Entry {
	d := model.DAG{ID: id, Name: id}
	for i := 0; i < n; i++ {
		d.Tasks = append(d.Tasks, model.Task{ID: fmt.Sprintf("t%d", i), Kind: model.KindNoop, Timeout: model.Duration(time.Minute)})
	}
	return core.Entry{DAG: id, D: &core.DAGRecord{DAG: d, Status: core.DAGRunning, Run: 1}}
}

// Commits respect the per-transaction limits, keep the entries' order, and a
// write fenced on a key that is gone is rejected whole.
func TestCommitSplitsAndFences(t *testing.T) {
	_, cli := etcdtest.Start(t)
	ctx := context.Background()
	fence := testFence(t, cli)
	entries := []core.Entry{dagEntry("d1", 3)}
	for i := 0; i < 10; i++ {
		entries = append(entries, core.Entry{DAG: "d1", Task: "t0", T: &core.TaskRecord{Status: core.Running, Run: 1, Attempt: i + 1}})
	}
	entries = append(entries, core.Entry{DAG: "d0", Delete: true})
	got, err := Commit(ctx, cli, fence, entries[:1], Limits{MaxOps: 4, MaxBytes: 1 << 20})
	if err != nil || got.Txns != 1 {
		t.Fatalf("one entry: %+v %v", got, err)
	}
	// With MaxOps 1 four records go in four transactions, in order, so the
	// last one is what the key holds.
	got, err = Commit(ctx, cli, fence, entries[1:5], Limits{MaxOps: 1, MaxBytes: 1 << 20})
	if err != nil || got.Txns != 4 || len(got.Revs) != 4 || !(got.Revs[0] < got.Revs[3]) {
		t.Fatalf("split: %+v %v", got, err)
	}
	kv, _ := cli.Get(ctx, TaskKey("d1", "t0"))
	if !strings.Contains(string(kv.Kvs[0].Value), `"attempt":4`) {
		t.Fatalf("order lost: %s", kv.Kvs[0].Value)
	}
	// A byte limit splits as well.
	got, err = Commit(ctx, cli, fence, []core.Entry{dagEntry("big1", 50), dagEntry("big2", 50)}, Limits{MaxOps: 128, MaxBytes: 2000})
	if err != nil || got.Txns != 2 {
		t.Fatalf("byte split: %+v %v", got, err)
	}
	// The fence: once the key is gone, nothing commits.
	if _, err := cli.Delete(ctx, fence.Key); err != nil {
		t.Fatal(err)
	}
	got, err = Commit(ctx, cli, fence, []core.Entry{dagEntry("late", 1)}, DefaultLimits)
	if !errors.Is(err, ErrFenced) || len(got.Revs) != 0 {
		t.Fatalf("fenced write: %+v %v", got, err)
	}
	if r, _ := cli.Get(ctx, DAGKey("late")); len(r.Kvs) != 0 {
		t.Fatal("a fenced write landed")
	}
}

// Load reads everything at one revision, in pages, and reports values that
// do not decode instead of failing.
func TestLoadPagesAndReportsGarbage(t *testing.T) {
	_, cli := etcdtest.Start(t)
	ctx := context.Background()
	fence := testFence(t, cli)
	var entries []core.Entry
	for i := 0; i < 30; i++ {
		entries = append(entries, dagEntry(fmt.Sprintf("d%02d", i), 1))
	}
	if _, err := Commit(ctx, cli, fence, entries, DefaultLimits); err != nil {
		t.Fatal(err)
	}
	var tasks []core.Entry
	for i := 0; i < 1100; i++ { // pages of 256, 512, then the rest
		tasks = append(tasks, core.Entry{DAG: fmt.Sprintf("d%02d", i%30), Task: fmt.Sprintf("x%04d", i), T: &core.TaskRecord{Status: core.Running, Run: 1, Attempt: 1}})
	}
	if _, err := Commit(ctx, cli, fence, tasks, DefaultLimits); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, DAGKey("junk"), "{"); err != nil {
		t.Fatal(err)
	}
	snap, err := Load(ctx, cli)
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.DAGs) != 30 || len(snap.Tasks) != 1100 || len(snap.Bad) != 1 {
		t.Fatalf("loaded %d DAGs, %d tasks, %d bad", len(snap.DAGs), len(snap.Tasks), len(snap.Bad))
	}
	if snap.DAGs[0].Rev == 0 || snap.DAGs[0].D == nil {
		t.Fatalf("DAG entry without its create revision or record: %+v", snap.DAGs[0])
	}
}

// Records are stored without HTML escaping: a command full of '<' costs one
// byte per '<' in etcd, as in the body that carried it, not six.
func TestRecordsAreNotHTMLEscaped(t *testing.T) {
	e := dagEntry("html", 1)
	e.D.Tasks[0].Kind, e.D.Tasks[0].Command = model.KindShell, strings.Repeat("<>&", 1000)
	ops, n, err := Ops(&e)
	if err != nil {
		t.Fatal(err)
	}
	v := string(ops[0].ValueBytes())
	if strings.Contains(v, `\u003c`) || !strings.Contains(v, "<>&<>&") || n != len(v) || n > 3000+1000 {
		t.Fatalf("%d bytes, escaped: %v", n, strings.Contains(v, `\u003c`))
	}
	// And it reads back the same.
	var back core.Entry
	back.DAG = "html"
	if err := decodeValue(&back, []byte(v)); err != nil || back.D.Tasks[0].Command != e.D.Tasks[0].Command {
		t.Fatalf("round trip: %v", err)
	}
}

func TestCheckSize(t *testing.T) {
	lim := Limits{MaxOps: 128, MaxBytes: 1 << 20, MaxRequest: 64 << 10}
	small := dagEntry("small", 3)
	if err := CheckSize(&small, lim); err != nil {
		t.Fatal(err)
	}
	big := dagEntry("big", 1)
	big.D.Tasks[0].Kind, big.D.Tasks[0].Command = model.KindShell, strings.Repeat("x", 64<<10)
	var tl *TooLargeError
	if err := CheckSize(&big, lim); !errors.As(err, &tl) || tl.Limit != 60<<10 || tl.Size <= 64<<10 || tl.DAG != "big" {
		t.Fatalf("%v", err)
	}
	if !strings.Contains(tl.Error(), "etcd_max_request_bytes") {
		t.Fatalf("message does not name the setting: %s", tl)
	}
	if (Limits{}).RecordLimit() != DefaultLimits.MaxRequest-recordOverhead {
		t.Fatal("zero limits do not default to etcd's request size")
	}
}

// Load's pages grow while their answers are small, shrink in proportion
// when one was over the budget, and never hold more of the largest record
// seen than the budget allows.
func TestNextPage(t *testing.T) {
	for _, c := range []struct{ limit, size, largest, want int }{
		{256, 100 << 10, 400, 512},              // small: doubles
		{loadMaxPage, 1 << 20, 16, loadMaxPage}, // at the cap
		{32768, 140 << 20, 4 << 10, 1872},       // over: in proportion (32768 × 8/140)
		{1000, 1 << 20, 1536 << 10, 5},          // large records: 8 MB / 1.5 MB
		{1, 20 << 20, 20 << 20, 1},              // never below one
		{512, loadPageBytes/2 + 1, 100, 512},    // between half and whole: kept
	} {
		if got := nextPage(c.limit, c.size, c.largest); got != c.want {
			t.Errorf("nextPage(%d, %d, %d) = %d, want %d", c.limit, c.size, c.largest, got, c.want)
		}
	}
}

// pickyKV refuses, as too large, every page that asks for more than max
// keys, and counts the pages asked for.
type pickyKV struct {
	clientv3.KV
	max     int64
	refused int
	limits  []int64
}

func (k *pickyKV) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	if op := clientv3.OpGet(key, opts...); op.Limit() > 0 {
		k.limits = append(k.limits, op.Limit())
		if op.Limit() > k.max {
			k.refused++
			return nil, status.Error(codes.ResourceExhausted, "grpc: received message larger than max")
		}
	}
	return k.KV.Get(ctx, key, opts...)
}

// A page refused as too large is asked again smaller, and the load goes
// on from where it was: every record read once, at one revision.
func TestLoadAsksAgainSmaller(t *testing.T) {
	_, cli := etcdtest.Start(t)
	ctx := context.Background()
	fence := testFence(t, cli)
	if _, err := Commit(ctx, cli, fence, []core.Entry{dagEntry("d", 1)}, DefaultLimits); err != nil {
		t.Fatal(err)
	}
	var tasks []core.Entry
	for i := 0; i < 1500; i++ {
		tasks = append(tasks, core.Entry{DAG: "d", Task: fmt.Sprintf("x%04d", i), T: &core.TaskRecord{Status: core.Running, Run: 1, Attempt: 1}})
	}
	for i := 0; i < len(tasks); i += 500 {
		if _, err := Commit(ctx, cli, fence, tasks[i:i+500], DefaultLimits); err != nil {
			t.Fatal(err)
		}
	}
	kv := &pickyKV{KV: cli, max: 300}
	snap, err := Load(ctx, kv)
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.DAGs) != 1 || len(snap.Tasks) != 1500 || len(snap.Bad) != 0 {
		t.Fatalf("loaded %d DAGs, %d tasks, %d bad", len(snap.DAGs), len(snap.Tasks), len(snap.Bad))
	}
	seen := map[string]bool{}
	for _, e := range snap.Tasks {
		if seen[e.Task] {
			t.Fatalf("%s read twice", e.Task)
		}
		seen[e.Task] = true
	}
	if kv.refused == 0 {
		t.Fatalf("no page was refused (pages asked: %v)", kv.limits)
	}
}

// testFence puts a test election key and returns its fence, as a won term
// would hold it.
func testFence(t *testing.T, cli *clientv3.Client) Fence {
	t.Helper()
	key := ElectionPrefix + "/test"
	resp, err := cli.Put(context.Background(), key, "me")
	if err != nil {
		t.Fatal(err)
	}
	return Fence{Key: key, Rev: resp.Header.Revision}
}
