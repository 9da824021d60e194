package drill

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// TaskKey names a task of a DAG.
type TaskKey struct{ DAG, Task string }

func (k TaskKey) String() string { return k.DAG + "/" + k.Task }

// RunLine is one line of runs.log: an attempt that started executing, and the
// pid of the process that started its shell (the replica or worker that ran
// it; 0 when the line does not say).
type RunLine struct {
	Attempt int
	PID     int
}

// Runs maps each task to its runs, in the order they were written (the
// order the attempts started).
type Runs map[TaskKey][]RunLine

// ParseRuns reads runs.log: one line "DAG/TASK ATTEMPT [PPID]" per attempt
// that started executing. Lines that do not parse are counted, not fatal.
func ParseRuns(r io.Reader) (Runs, int, error) {
	runs := Runs{}
	malformed := 0
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		k, r, ok := parseRunLine(line)
		if !ok {
			malformed++
			continue
		}
		runs[k] = append(runs[k], r)
	}
	return runs, malformed, sc.Err()
}

func parseRunLine(line string) (TaskKey, RunLine, bool) {
	f := strings.Fields(line)
	if len(f) < 2 || len(f) > 3 {
		return TaskKey{}, RunLine{}, false
	}
	dagID, task, ok := strings.Cut(f[0], "/")
	a, err := strconv.Atoi(f[1])
	if !ok || dagID == "" || task == "" || err != nil || a < 1 {
		return TaskKey{}, RunLine{}, false
	}
	r := RunLine{Attempt: a}
	if len(f) == 3 {
		if r.PID, err = strconv.Atoi(f[2]); err != nil || r.PID < 0 {
			return TaskKey{}, RunLine{}, false
		}
	}
	return TaskKey{dagID, task}, r, true
}

// TaskState is what the API reports of a task at the end of a drill.
type TaskState struct {
	Status   string
	Attempts int    // the latest attempt's number
	Worker   string // the latest attempt's worker
	History  []AttemptState
}

// AttemptState is a finished attempt from a task's history.
type AttemptState struct {
	Attempt int
	Worker  string
	Outcome string
}

// workerOf names the worker that ran attempt a, "" if the task has no
// record of it.
func (t *TaskState) workerOf(a int) (worker, outcome string) {
	if t == nil {
		return "", ""
	}
	if a == t.Attempts {
		return t.Worker, "latest"
	}
	for _, h := range t.History {
		if h.Attempt == a {
			return h.Worker, h.Outcome
		}
	}
	return "", ""
}

// Killed is a replica the drill killed, and when. Its own executor slots
// died with it; standalone workers never do.
type Killed struct {
	Name string
	PID  int
	At   time.Time // zero: always relevant
}

// Relevant keeps the kills that happened while a DAG could still run: after
// from (just before it was submitted) and, unless to is zero, before to
// (when the drill saw it finished). A kill after a DAG finished cannot
// excuse a rerun of its tasks.
func Relevant(killed []Killed, from, to time.Time) []Killed {
	var out []Killed
	for _, k := range killed {
		if k.At.IsZero() || (!k.At.Before(from) && (to.IsZero() || k.At.Before(to))) {
			out = append(out, k)
		}
	}
	return out
}

// IsKilledWorker reports whether worker was a killed replica's own slots.
// Those ids are "NAME/PID-SUFFIX": with a pid, only the killed incarnation
// matches (the restarted replica's slots are alive); an id under NAME/ in
// another form is taken as the killed replica's.
func IsKilledWorker(worker string, killed []Killed) bool {
	for _, k := range killed {
		rest, ok := strings.CutPrefix(worker, k.Name+"/")
		if !ok || k.Name == "" {
			continue
		}
		digits, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(digits)
		if err != nil || pid == k.PID {
			return true
		}
	}
	return false
}

// Finding is one extra run of a task, explained.
type Finding struct {
	Task      string `json:"task"` // DAG/TASK
	Attempt   int    `json:"attempt"`
	Worker    string `json:"worker,omitempty"`
	Duplicate bool   `json:"duplicate"` // false: a rerun after its worker was killed (allowed)
	Reason    string `json:"reason"`
}

// killedPID names the killed replica that had pid.
func killedPID(pid int, killed []Killed) (string, bool) {
	for _, k := range killed {
		if pid != 0 && k.PID == pid {
			return k.Name, true
		}
	}
	return "", false
}

// Classify explains the runs of one task beyond its last. Every run that a
// later run superseded is either a rerun after a killed worker (allowed:
// at-least-once) or a duplicate. A run is known to have been on a killed
// worker when its line names a killed replica's pid (the shell's parent), or
// when the task's history puts its attempt on a killed replica's own slots.
// Otherwise it is a duplicate: the same attempt ran twice, the scheduler has
// no record of the attempt's worker, or the worker stayed alive.
func Classify(k TaskKey, runs []RunLine, t *TaskState, killed []Killed) (dups, reruns int, fs []Finding) {
	for i := 0; i+1 < len(runs); i++ {
		a := runs[i].Attempt
		f := Finding{Task: k.String(), Attempt: a, Duplicate: true}
		worker, outcome := t.workerOf(a)
		f.Worker = worker
		again := slices.ContainsFunc(runs[i+1:], func(r RunLine) bool { return r.Attempt == a })
		name, inKilled := killedPID(runs[i].PID, killed)
		switch {
		case inKilled:
			f.Duplicate = false
			f.Worker = fmt.Sprintf("%s (pid %d)", name, runs[i].PID)
			f.Reason = fmt.Sprintf("attempt %d ran in %s, which the drill killed; rerun", a, f.Worker)
			if again {
				f.Reason += fmt.Sprintf(" under the same attempt number %d", a)
			}
		case again:
			f.Reason = fmt.Sprintf("attempt %d ran more than once", a)
			if runs[i].PID != 0 {
				f.Reason += fmt.Sprintf(" (first in pid %d, which was not killed while the DAG ran)", runs[i].PID)
			}
		case worker == "":
			f.Reason = fmt.Sprintf("the scheduler has no record of attempt %d, which ran and was followed by another", a)
		case IsKilledWorker(worker, killed):
			f.Duplicate = false
			f.Reason = fmt.Sprintf("attempt %d ran on %s, which the drill killed; rerun", a, worker)
		default:
			f.Reason = fmt.Sprintf("attempt %d ran on %s, which stayed alive (outcome %s), and the task ran again", a, worker, outcome)
		}
		if f.Duplicate {
			dups++
		} else {
			reruns++
		}
		fs = append(fs, f)
	}
	return dups, reruns, fs
}

// Tally is the accounting of a set of drill DAGs.
type Tally struct {
	Tasks      int       `json:"tasks"`
	Lost       int       `json:"lost"`
	Duplicates int       `json:"duplicates"`
	Reruns     int       `json:"reruns_after_killed_worker"`
	Unlogged   int       `json:"succeeded_without_run"` // succeeded, yet no line in runs.log
	LostTasks  []string  `json:"lost_tasks,omitempty"`  // DAG/TASK status
	Findings   []Finding `json:"findings,omitempty"`
}

func (t *Tally) add(o Tally) {
	t.Tasks += o.Tasks
	t.Lost += o.Lost
	t.Duplicates += o.Duplicates
	t.Reruns += o.Reruns
	t.Unlogged += o.Unlogged
	t.LostTasks = append(t.LostTasks, o.LostTasks...)
	t.Findings = append(t.Findings, o.Findings...)
}

// Account tallies one DAG: tasks is every task of it by id (as the API
// reports them at the end), runs the parsed runs.log, killed the kills
// Relevant to the DAG.
func Account(dagID string, tasks map[string]*TaskState, runs Runs, killed []Killed) Tally {
	var t Tally
	ids := make([]string, 0, len(tasks))
	for id := range tasks {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		st := tasks[id]
		k := TaskKey{dagID, id}
		t.Tasks++
		if st.Status != "succeeded" {
			t.Lost++
			t.LostTasks = append(t.LostTasks, k.String()+" "+st.Status)
		} else if len(runs[k]) == 0 {
			t.Unlogged++
		}
		d, r, fs := Classify(k, runs[k], st, killed)
		t.Duplicates += d
		t.Reruns += r
		t.Findings = append(t.Findings, fs...)
	}
	return t
}

// Percentile is the nearest-rank p-th percentile (0 < p ≤ 100) of xs, or 0
// for none. xs is not modified.
func Percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	i := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}
