package drills

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// runLine is one line of runs.log: one execution of a task, written by the
// task's own shell as it starts (recordCmd), so the history is what ran,
// not what the scheduler believes ran.
type runLine struct {
	DAG, Task string
	Attempt   int
	Fence     int64 // ORION_LEADER_FENCE: the term of the leader that dispatched it
	PID       int   // the shell, leader of the task's process group
	PPID      int   // the worker process that started the shell
	At        time.Time
}

func (r runLine) String() string {
	return fmt.Sprintf("%s/%s attempt %d fence %d pid %d worker pid %d at %s",
		r.DAG, r.Task, r.Attempt, r.Fence, r.PID, r.PPID, r.At.Format("15:04:05.000"))
}

// recordCmd is the shell command of every drill task: one line per
// execution, appended in one write (O_APPEND), then the task's work.
func recordCmd(runsPath string, sleep string) string {
	cmd := `echo "$ORION_DAG_ID $ORION_TASK_ID $ORION_ATTEMPT $ORION_LEADER_FENCE $$ $PPID $(date +%s%N)" >> '` + runsPath + `'`
	if sleep != "" {
		cmd += "; sleep " + sleep
	}
	return cmd
}

// readRuns parses runs.log. A line that does not parse is an error: every
// line is written whole by one echo.
func readRuns(path string) ([]runLine, error) {
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []runLine
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) != 7 {
			return nil, fmt.Errorf("runs.log: malformed line %q", sc.Text())
		}
		var r runLine
		var nums [5]int64
		for i, s := range fs[2:] {
			if nums[i], err = strconv.ParseInt(s, 10, 64); err != nil {
				return nil, fmt.Errorf("runs.log: malformed line %q: %v", sc.Text(), err)
			}
		}
		r.DAG, r.Task = fs[0], fs[1]
		r.Attempt, r.Fence, r.PID, r.PPID = int(nums[0]), nums[1], int(nums[2]), int(nums[3])
		r.At = time.Unix(0, nums[4])
		out = append(out, r)
	}
	return out, sc.Err()
}

// processGroups maps each process group to the live (not zombie) processes
// in it, from /proc.
func processGroups() map[int][]int {
	out := map[int][]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		// After the command: state, ppid, pgrp.
		f := strings.Fields(s[i+1:])
		if len(f) < 3 || f[0] == "Z" {
			continue
		}
		pgrp, err := strconv.Atoi(f[2])
		if err == nil {
			out[pgrp] = append(out[pgrp], pid)
		}
	}
	return out
}

// cmdline is a process's command line, for messages.
func cmdline(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " "))
}
