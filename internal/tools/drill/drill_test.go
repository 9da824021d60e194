package drill

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/orion-sched/orion/internal/dag"
	"github.com/orion-sched/orion/internal/model"
)

func TestPercentile(t *testing.T) {
	xs := []float64{90, 10, 50, 30, 70, 20, 40, 60, 80, 100}
	for _, c := range []struct {
		p    float64
		want float64
	}{{50, 50}, {99, 100}, {100, 100}, {10, 10}, {1, 10}, {90, 90}} {
		if got := Percentile(xs, c.p); got != c.want {
			t.Errorf("Percentile(%v) = %v, want %v", c.p, got, c.want)
		}
	}
	if xs[0] != 90 {
		t.Error("Percentile sorted its input")
	}
	if Percentile(nil, 50) != 0 {
		t.Error("empty: want 0")
	}
	if got := Percentile([]float64{7}, 99); got != 7 {
		t.Errorf("one value: %v", got)
	}
	if got := Percentile([]float64{1, 2, 3, 4}, 50); got != 2 {
		t.Errorf("nearest rank p50 of 1..4 = %v, want 2", got)
	}
}

func TestParseRuns(t *testing.T) {
	in := strings.Join([]string{
		"drill-a-1/c0-000 1",
		"drill-a-1/c1-000 1",
		"",
		"drill-a-1/c0-000 2 4242",
		"garbage",
		"drill-a-1/c0-002 1 x",
		"drill-a-1/c0-002 1 2 3",
		"drill-a-1/ 1",
		"drill-a-1/c0-001 x",
		"drill-a-1/c0-001 0",
		"drill-a-2/c0-000 1",
	}, "\n")
	runs, bad, err := ParseRuns(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if bad != 6 {
		t.Errorf("malformed = %d, want 6", bad)
	}
	if got := runs[TaskKey{"drill-a-1", "c0-000"}]; !slices.Equal(got, []RunLine{{1, 0}, {2, 4242}}) {
		t.Errorf("c0-000 runs %v", got)
	}
	if len(runs) != 3 {
		t.Errorf("%d tasks, want 3: %v", len(runs), runs)
	}
}

func TestIsKilledWorker(t *testing.T) {
	killed := []Killed{{Name: "n1", PID: 1234}}
	for w, want := range map[string]bool{
		"n1/1234-abcdef": true,
		"n1/1234":        true,
		"n1/5678-abcdef": false, // the restarted n1's slots
		"n1/local":       true,  // unknown form under n1/: the brief's rule
		"n2/1234-abcdef": false,
		"w1":             false,
		"n10/1234-ab":    false,
		"":               false,
	} {
		if got := IsKilledWorker(w, killed); got != want {
			t.Errorf("IsKilledWorker(%q) = %v, want %v", w, got, want)
		}
	}
}

func TestAccount(t *testing.T) {
	killed := []Killed{{Name: "n1", PID: 100}}
	tasks := map[string]*TaskState{
		// ran once: fine
		"a": {Status: "succeeded", Attempts: 1, Worker: "w1"},
		// ran on the killed leader's slots, then again: a rerun
		"b": {Status: "succeeded", Attempts: 2, Worker: "w2",
			History: []AttemptState{{Attempt: 1, Worker: "n1/100-aa", Outcome: "requeue"}}},
		// ran on a live worker, then again: a duplicate
		"c": {Status: "succeeded", Attempts: 2, Worker: "w2",
			History: []AttemptState{{Attempt: 1, Worker: "w1", Outcome: "orphan"}}},
		// the same attempt twice: a duplicate whatever the worker
		"d": {Status: "succeeded", Attempts: 1, Worker: "n1/100-aa"},
		// never finished: lost
		"e": {Status: "running", Attempts: 1, Worker: "w1"},
		// succeeded with no run logged
		"f": {Status: "succeeded", Attempts: 1, Worker: "w1"},
		// attempt unknown to the scheduler ran before the recorded one
		"g": {Status: "succeeded", Attempts: 3, Worker: "w1"},
		// the same attempt number ran in the killed replica (its pid in
		// the line), then elsewhere: a rerun, though history lacks it
		"h": {Status: "succeeded", Attempts: 1, Worker: "n2/200-bb"},
		// the same attempt twice in a live process: a duplicate
		"i": {Status: "succeeded", Attempts: 1, Worker: "n2/200-bb"},
	}
	r := func(as ...int) []RunLine { // attempt, pid pairs
		var out []RunLine
		for i := 0; i < len(as); i += 2 {
			out = append(out, RunLine{as[i], as[i+1]})
		}
		return out
	}
	runs := Runs{
		{"D", "a"}: r(1, 0),
		{"D", "b"}: r(1, 0, 2, 0),
		{"D", "c"}: r(1, 300, 2, 200),
		{"D", "d"}: r(1, 0, 1, 0),
		{"D", "e"}: r(1, 0),
		{"D", "g"}: r(2, 0, 3, 0),
		{"D", "h"}: r(1, 100, 1, 200),
		{"D", "i"}: r(1, 200, 1, 200),
		{"X", "a"}: r(1, 0, 2, 0, 3, 0), // another DAG: ignored
	}
	got := Account("D", tasks, runs, killed)
	if got.Tasks != 9 || got.Lost != 1 || got.Duplicates != 4 || got.Reruns != 2 || got.Unlogged != 1 {
		t.Fatalf("tally %+v", got)
	}
	if len(got.LostTasks) != 1 || got.LostTasks[0] != "D/e running" {
		t.Errorf("lost tasks %v", got.LostTasks)
	}
	dups := map[string]bool{}
	for _, f := range got.Findings {
		if f.Duplicate {
			dups[f.Task] = true
		} else if !(f.Task == "D/b" && f.Worker == "n1/100-aa") && !(f.Task == "D/h" && f.Worker == "n1 (pid 100)") {
			t.Errorf("unexpected rerun %+v", f)
		}
	}
	for _, k := range []string{"D/c", "D/d", "D/g", "D/i"} {
		if !dups[k] {
			t.Errorf("%s not reported as a duplicate: %+v", k, got.Findings)
		}
	}
}

func TestRelevant(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	killed := []Killed{{"n1", 1, at(5)}, {"n2", 2, at(15)}, {"n3", 3, at(25)}, {"n4", 4, time.Time{}}}
	names := func(ks []Killed) (out []string) {
		for _, k := range ks {
			out = append(out, k.Name)
		}
		return out
	}
	if got := names(Relevant(killed, at(10), at(20))); !slices.Equal(got, []string{"n2", "n4"}) {
		t.Errorf("window 10..20: %v", got)
	}
	if got := names(Relevant(killed, at(10), time.Time{})); !slices.Equal(got, []string{"n2", "n3", "n4"}) {
		t.Errorf("open window from 10: %v", got)
	}
	// A DAG finished before a later kill: that kill does not excuse its reruns.
	tasks := map[string]*TaskState{"a": {Status: "succeeded", Attempts: 1, Worker: "n2/2-x"}}
	runs := Runs{{"D", "a"}: {{1, 1}, {1, 2}}}
	if got := Account("D", tasks, runs, Relevant(killed, at(0), at(10))); got.Duplicates != 0 || got.Reruns != 1 {
		t.Errorf("a run in n1, killed while the DAG ran, is a rerun: %+v", got)
	}
	runs = Runs{{"D", "a"}: {{1, 2}, {1, 3}}}
	if got := Account("D", tasks, runs, Relevant(killed, at(0), at(10))); got.Duplicates != 1 || got.Reruns != 0 {
		t.Errorf("a run in n2, killed after the DAG finished, was excused: %+v", got)
	}
}

func TestDAGSpec(t *testing.T) {
	runs := "/tmp/it's here/runs.log"
	body, err := DAGSpec("drill-20260101-000000-abcdef-3", runs, 40)
	if err != nil {
		t.Fatal(err)
	}
	d, err := dag.Load(body, "application/json", dag.Limits{})
	if err != nil {
		t.Fatalf("the drill DAG does not load: %v\n%s", err, body)
	}
	if d.ID != "drill-20260101-000000-abcdef-3" || len(d.Tasks) != 40 {
		t.Fatalf("id %q, %d tasks", d.ID, len(d.Tasks))
	}
	roots := 0
	for _, task := range d.Tasks {
		if len(task.DependsOn) == 0 {
			roots++
		}
		if task.Kind != model.KindShell || !strings.Contains(task.Command, `>> '/tmp/it'\''s here/runs.log'`) ||
			!strings.Contains(task.Command, `"$ORION_DAG_ID/$ORION_TASK_ID $ORION_ATTEMPT $PPID"`) {
			t.Fatalf("task %s: %+v", task.ID, task)
		}
	}
	if roots != 4 {
		t.Errorf("%d chains, want 4", roots)
	}
	if _, err := DAGSpec("x", runs, 5); err != nil {
		t.Fatal(err)
	}
}

func TestReadProcSelf(t *testing.T) {
	t.Setenv("ORION_DRILL_TEST", "yes=really")
	p, err := ReadProc(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	exe, _ := os.Executable()
	if len(p.Argv) == 0 || p.Argv[0] != os.Args[0] {
		t.Errorf("argv %q, want it to start with %q", p.Argv, os.Args[0])
	}
	wd, _ := os.Getwd()
	if p.Cwd != wd {
		t.Errorf("cwd %q, want %q", p.Cwd, wd)
	}
	// environ is the initial environment: t.Setenv does not change it, but
	// PATH (or HOME) from the start is there.
	if envValue(p.Env, "PATH") != os.Getenv("PATH") && os.Getenv("PATH") != "" {
		t.Errorf("PATH from environ %q", envValue(p.Env, "PATH"))
	}
	if p.Exe != exe {
		t.Errorf("exe %q, want %q", p.Exe, exe)
	}
	if p.StartTime == 0 || p.State == 0 {
		t.Errorf("stat: state %q start %d", p.State, p.StartTime)
	}
	if gone(os.Getpid(), p.StartTime) {
		t.Error("this process is gone?")
	}
	if !gone(os.Getpid(), p.StartTime+1) {
		t.Error("a different start time must read as gone (pid reuse)")
	}
	if IsOrionServer(p.Argv) {
		t.Error("the test binary is not an orion server")
	}
	if _, err := ReadProc(0); err == nil {
		t.Error("pid 0 read")
	}
}

func TestOwnsListener(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Skip(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	ok, err := OwnsListener(os.Getpid(), port)
	if err != nil || !ok {
		t.Fatalf("OwnsListener(self, %d) = %v, %v", port, ok, err)
	}
	// pid 1 does not own our socket (and may not be readable: either answer
	// must not be "yes").
	if ok, _ := OwnsListener(1, port); ok && os.Getpid() != 1 {
		t.Error("pid 1 owns our listener?")
	}
	ln2, _ := net.Listen("tcp", "127.0.0.1:0")
	p2 := ln2.Addr().(*net.TCPAddr).Port
	ln2.Close()
	if ok, _ := OwnsListener(os.Getpid(), p2); ok {
		t.Error("a closed port reads as owned")
	}
}

func TestListenInodes(t *testing.T) {
	table := `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:5E51 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 111 1 0 100 0 0 10 0
   1: 0100007F:5E51 0100007F:9C40 01 00000000:00000000 00:00000000 00000000     0        0 222 1 0 20 4 30 10 -1
   2: 00000000:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 333 1 0 100 0 0 10 0
`
	got := map[uint64]bool{}
	if err := listenInodes(strings.NewReader(table), 0x5E51, got); err != nil {
		t.Fatal(err)
	}
	if !got[111] || got[222] || got[333] || len(got) != 1 {
		t.Errorf("inodes %v, want only 111", got)
	}
}

func TestIsOrionServer(t *testing.T) {
	for argv, want := range map[string]bool{
		"/repo/bin/orion server --name n1":             true,
		"orion --config x.yaml server":                 true,
		"/usr/local/bin/orion-linux-amd64 server":      true,
		"/repo/bin/orion worker --server http://x:1":   false,
		"/repo/bin/orion etcd --name e1":               false,
		"/usr/bin/python3 server.py orion":             false,
		"/repo/bin/orion drill kill-leader --server x": false,
	} {
		if got := IsOrionServer(strings.Fields(argv)); got != want {
			t.Errorf("IsOrionServer(%q) = %v, want %v", argv, got, want)
		}
	}
	if IsOrionServer([]string{"bash", "-c", "orion server"}) {
		t.Error("a shell running orion is not the server")
	}
}

func TestIsLocalHost(t *testing.T) {
	for h, want := range map[string]bool{
		"127.0.0.1": true, "localhost": true, "::1": true, "[::1]": true, "127.0.0.5": true, "0.0.0.0": true,
		"192.0.2.1": false, "example.com": false, "": false,
	} {
		if got := isLocalHost(h); got != want {
			t.Errorf("isLocalHost(%q) = %v, want %v", h, got, want)
		}
	}
}

func TestBuildRestart(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	orion := filepath.Join(bin, "orion")
	if err := os.WriteFile(orion, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	logf := filepath.Join(dir, "n1.log")
	work := filepath.Join(dir, "work")
	p := &ProcInfo{
		PID:           42,
		Argv:          []string{"bin/orion", "server", "--name", "n1"},
		Cwd:           dir,
		Env:           []string{"PATH=/nowhere", "A=1"},
		Exe:           orion + deletedSuffix, // rebuilt since: fall back to argv[0]
		Stdout:        logf,
		StdoutRegular: true,
	}
	spec, err := BuildRestart(p, "n1", work)
	if err != nil {
		t.Fatal(err)
	}
	if spec.Path != orion || !slices.Equal(spec.Argv, p.Argv) || spec.Dir != dir || spec.LogPath != logf ||
		!slices.Equal(spec.Env, p.Env) {
		t.Fatalf("spec %+v", spec)
	}
	spec.Env[0] = "changed"
	if p.Env[0] != "PATH=/nowhere" {
		t.Error("the spec shares the saved env")
	}

	// The live executable wins; output to a pipe goes to WORKDIR/NAME.log.
	p.Exe, p.Stdout, p.StdoutRegular = orion, "pipe:[123]", false
	spec, err = BuildRestart(p, "n1", work)
	if err != nil || spec.Path != orion || spec.LogPath != filepath.Join(work, "n1.log") {
		t.Fatalf("spec %+v, %v", spec, err)
	}

	// A bare argv[0] is looked up on the saved PATH.
	p.Exe, p.Argv = "", []string{"orion", "server"}
	p.Env = []string{"PATH=/nowhere:" + bin}
	if spec, err = BuildRestart(p, "n1", work); err != nil || spec.Path != orion {
		t.Fatalf("PATH lookup: %+v, %v", spec, err)
	}
	p.Env = []string{"PATH=/nowhere"}
	if _, err = BuildRestart(p, "n1", work); err == nil {
		t.Error("found orion on a PATH without it")
	}
	// An empty environment stays empty (not the drill's).
	p.Env = []string{}
	p.Argv = []string{orion, "server"}
	if spec, err = BuildRestart(p, "n1", work); err != nil || spec.Env == nil || len(spec.Env) != 0 {
		t.Fatalf("empty env: %#v, %v", spec.Env, err)
	}
	if _, err = BuildRestart(&ProcInfo{Cwd: dir}, "n1", work); err == nil {
		t.Error("no argv accepted")
	}
	if _, err = BuildRestart(&ProcInfo{Argv: []string{orion}, Cwd: dir + deletedSuffix}, "n1", work); err == nil {
		t.Error("a deleted cwd accepted")
	}
}

// TestStartDetached restarts a real (shell) process from a saved spec and
// checks it got the saved argv, cwd, env and log, in its own session.
func TestStartDetached(t *testing.T) {
	dir := t.TempDir()
	logf := filepath.Join(dir, "out.log")
	spec := RestartSpec{
		Path:    "/bin/sh",
		Argv:    []string{"/bin/sh", "-c", `echo "argv=$0 A=$A cwd=$(pwd) sid=$(ps -o sid= -p $$ 2>/dev/null | tr -d ' ')"; echo err >&2`, "zero"},
		Dir:     dir,
		Env:     []string{"A=saved", "PATH=/usr/bin:/bin"},
		LogPath: logf,
	}
	c, err := startDetached(spec, "header")
	if err != nil {
		t.Fatal(err)
	}
	if err := <-c.done; err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(logf)
	out := string(b)
	for _, want := range []string{"header", "argv=zero A=saved cwd=" + dir, "err"} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
	if i := strings.Index(out, "sid="); i >= 0 {
		if sid := strings.Fields(out[i+4:]); len(sid) > 0 && sid[0] != "" && sid[0] != strconv.Itoa(c.pid) {
			t.Errorf("session id %s, want the child's own pid %d", sid[0], c.pid)
		}
	}
}

func TestClusterDirAndPidFile(t *testing.T) {
	dir := t.TempDir()
	cwd := filepath.Join(dir, "data", "n1")
	if err := os.MkdirAll(cwd, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, ok := clusterDirOf(cwd, "n1"); ok {
		t.Error("no pids dir yet: not cluster.sh's layout")
	}
	if err := os.MkdirAll(filepath.Join(dir, "pids"), 0o755); err != nil {
		t.Fatal(err)
	}
	got, ok := clusterDirOf(cwd, "n1")
	if !ok || got != dir {
		t.Fatalf("clusterDirOf = %q %v", got, ok)
	}
	if _, ok := clusterDirOf(cwd, "n2"); ok {
		t.Error("another name matched")
	}
	pf := filepath.Join(dir, "pids", "n1.pid")
	if ok, err := updatePidFile(dir, "n1", 10, 20); ok || err != nil {
		t.Error("updated a missing pid file")
	}
	os.WriteFile(pf, []byte("11\n"), 0o644)
	if ok, _ := updatePidFile(dir, "n1", 10, 20); ok {
		t.Error("updated a pid file of another process")
	}
	os.WriteFile(pf, []byte("10\n"), 0o644)
	if ok, err := updatePidFile(dir, "n1", 10, 20); !ok || err != nil {
		t.Fatalf("update: %v %v", ok, err)
	}
	if b, _ := os.ReadFile(pf); string(b) != "20\n" {
		t.Errorf("pid file %q", b)
	}
}

func TestScriptEnv(t *testing.T) {
	base := []string{"PATH=/bin", "ORION_CLUSTER_DIR="}
	got := scriptEnv(base, "n2", "/c", "http://127.0.0.1:26082")
	if envValue(got, "ORION_CLUSTER_DIR") != "/c" || envValue(got, "ORION_CLUSTER_BASE_PORT") != "26000" {
		t.Errorf("derived env %v", got)
	}
	got = scriptEnv([]string{"ORION_CLUSTER_DIR=/mine", "ORION_CLUSTER_BASE_PORT=30000"}, "n2", "/c", "http://127.0.0.1:26082")
	if envValue(got, "ORION_CLUSTER_DIR") != "/mine" || envValue(got, "ORION_CLUSTER_BASE_PORT") != "30000" {
		t.Errorf("the caller's settings must win: %v", got)
	}
	if got = scriptEnv(base, "n2", "", "http://127.0.0.1:26082"); len(got) != 2 {
		t.Errorf("no layout, nothing added: %v", got)
	}
	if got = scriptEnv(base, "alpha", "/c", "http://127.0.0.1:26082"); envValue(got, "ORION_CLUSTER_BASE_PORT") != "" {
		t.Errorf("a name outside nK gives no port: %v", got)
	}
}

func TestParseRestartMode(t *testing.T) {
	for _, s := range []string{"auto", "Script", " none "} {
		if _, err := ParseRestartMode(s); err != nil {
			t.Error(err)
		}
	}
	if _, err := ParseRestartMode("systemd"); err == nil {
		t.Error("systemd accepted")
	}
}

func TestVerdict(t *testing.T) {
	r := &Report{Planned: 3, Drills: make([]Result, 3), OK: true}
	if v := verdict(r); !strings.HasPrefix(v, "PASS") {
		t.Error(v)
	}
	r = &Report{Planned: 3, Failures: 1, Lost: 2, Duplicates: 1}
	if v := verdict(r); v != "FAIL: 1 of 3 drills failed, 2 tasks lost, 1 duplicate runs" {
		t.Error(v)
	}
}

// TestDAGCommandWritesRunLine runs a drill task's command the way the shell
// executor does and parses what it appended: the pid must be the process
// that started the shell.
func TestDAGCommandWritesRunLine(t *testing.T) {
	runsPath := filepath.Join(t.TempDir(), "run's.log")
	body, err := DAGSpec("drill-x-1", runsPath, 4)
	if err != nil {
		t.Fatal(err)
	}
	d, err := dag.Load(body, "application/json", dag.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("/bin/sh", "-c", d.Tasks[1].Command)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "ORION_DAG_ID=drill-x-1", "ORION_TASK_ID=" + d.Tasks[1].ID, "ORION_ATTEMPT=2"}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	f, err := os.Open(runsPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	runs, bad, err := ParseRuns(f)
	if err != nil || bad != 0 {
		t.Fatalf("%v, %d malformed", err, bad)
	}
	got := runs[TaskKey{"drill-x-1", d.Tasks[1].ID}]
	if len(got) != 1 || got[0] != (RunLine{2, os.Getpid()}) {
		t.Fatalf("runs %v, want attempt 2 in pid %d", got, os.Getpid())
	}
}
