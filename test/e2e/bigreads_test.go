package e2e

import (
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// bigDAG is a DAG of start, wide tasks after it (every failEvery-th fails,
// the first sleeping ones run for an hour), a map group of items after
// start, and a join after them all.
func bigDAG(wide, failEvery, sleeping, items int) string {
	var b strings.Builder
	b.WriteString(`{"id":"big","tasks":[{"id":"start","kind":"noop"}`)
	join := []string{`"fan"`}
	for i := range wide {
		id := fmt.Sprintf("w%05d", i)
		switch {
		case i < sleeping:
			fmt.Fprintf(&b, `,{"id":%q,"kind":"sleep","duration":"1h","depends_on":["start"]}`, id)
		case i%failEvery == 0:
			fmt.Fprintf(&b, `,{"id":%q,"command":"exit 3","max_retries":0,"depends_on":["start"]}`, id)
		default:
			fmt.Fprintf(&b, `,{"id":%q,"kind":"noop","depends_on":["start"]}`, id)
		}
		join = append(join, `"`+id+`"`)
	}
	items_ := make([]string, items)
	for i := range items_ {
		items_[i] = fmt.Sprint(i)
	}
	fmt.Fprintf(&b, `,{"id":"fan","kind":"noop","depends_on":["start"],"for_each":[%s]}`, strings.Join(items_, ","))
	fmt.Fprintf(&b, `,{"id":"join","kind":"noop","depends_on":[%s]}]}`, strings.Join(join, ","))
	return b.String()
}

// A DAG of a few thousand tasks as a user reads it: GET /api/v1/dags/{id}
// lists its first 1000 tasks and its shape, the tasks route pages the
// rest and filters by status, `orion get dag` summarises it (its groups,
// the failed tasks, then the running ones, a screenful) and --all lists
// every task.
func TestBigDAGReads(t *testing.T) {
	const wide, failEvery, sleeping, items = 3000, 500, 2, 2000
	n := newNode(t, "--slots", "8", "--max-tasks-per-dag", "5000", "--max-body-bytes", "4194304")
	n.start()
	code, out := n.do("POST", "/api/v1/dags", "application/json", []byte(bigDAG(wide, failEvery, sleeping, items)))
	if code != 201 {
		t.Fatalf("submit: %d %s", code, out)
	}
	type head struct {
		TaskCount      int            `json:"task_count"`
		Counts         map[string]int `json:"counts"`
		Tasks          []struct{ ID string }
		TasksTruncated bool `json:"tasks_truncated"`
		Shape          *struct {
			Nodes []struct {
				ID     string         `json:"id"`
				Kind   string         `json:"kind"`
				Tasks  int            `json:"tasks"`
				Counts map[string]int `json:"counts"`
			} `json:"nodes"`
		} `json:"shape"`
	}
	failed := (wide+failEvery-1)/failEvery - 1 // w00000 sleeps
	var h head
	deadline := time.Now().Add(3 * time.Minute)
	for {
		if code, body := n.getJSON("/api/v1/dags/big", &h); code != 200 {
			t.Fatalf("GET: %d %s", code, body)
		}
		// Start, the noops, fan and its instances; and the shape's counts,
		// which may be a second older.
		if h.Counts["running"] == sleeping && h.Counts["succeeded"] == wide+1+items-failed-sleeping+1 &&
			h.Shape != nil && len(h.Shape.Nodes) == 4 && h.Shape.Nodes[2].Counts["succeeded"] == items &&
			h.Shape.Nodes[1].Counts["failed"] == failed && h.Shape.Nodes[1].Counts["running"] == sleeping {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the DAG did not settle: %v\n%s", h.Counts, n.logs())
		}
		time.Sleep(200 * time.Millisecond)
	}
	if h.Counts["failed"] != failed || h.TaskCount != 1+wide+1+items+1 || len(h.Tasks) != 1000 || !h.TasksTruncated ||
		h.Shape == nil || len(h.Shape.Nodes) != 4 {
		t.Fatalf("head: count %d, counts %v, %d tasks, truncated %v, shape %+v", h.TaskCount, h.Counts, len(h.Tasks), h.TasksTruncated, h.Shape)
	}
	if nd := h.Shape.Nodes[1]; nd.ID != "~1" || nd.Tasks != wide || nd.Counts["failed"] != failed {
		t.Fatalf("the fan-out node: %+v", nd)
	}
	if nd := h.Shape.Nodes[2]; nd.ID != "fan" || nd.Kind != "map" || nd.Counts["succeeded"] != items {
		t.Fatalf("the map node: %+v", nd)
	}

	// Every failed task, a page at a time.
	var ids []string
	for cursor, pages := "", 0; pages == 0 || cursor != ""; pages++ {
		var p struct {
			Tasks []struct{ ID, Status string }
			Next  string
		}
		path := "/api/v1/dags/big/tasks?status=failed&limit=4"
		if cursor != "" {
			path += "&cursor=" + url.QueryEscape(cursor)
		}
		if code, body := n.getJSON(path, &p); code != 200 || pages > 100 {
			t.Fatalf("GET %s: %d %s", path, code, body)
		}
		for _, tk := range p.Tasks {
			if tk.Status != "failed" {
				t.Fatalf("%s listed as failed: %s", tk.ID, tk.Status)
			}
			ids = append(ids, tk.ID)
		}
		cursor = p.Next
	}
	if len(ids) != failed {
		t.Fatalf("%d failed listed: %v", len(ids), ids)
	}

	sum, err := n.orion("get", "dag", "big")
	if err != nil {
		t.Fatalf("orion get dag: %v\n%s", err, sum)
	}
	for _, want := range []string{fmt.Sprintf("Tasks:      %d (", h.TaskCount), "~1 (w00000, w00001, w00002, ...)  1      3000", "fan ", "map",
		fmt.Sprintf("Failed (%d):", failed), "exit status 3", "Running, longest first (2):", "w00000", "--all"} {
		if !strings.Contains(sum, want) {
			t.Errorf("orion get dag big does not say %q:\n%s", want, sum)
		}
	}
	if lines := strings.Count(sum, "\n"); lines > 60 {
		t.Errorf("the summary is %d lines:\n%s", lines, sum)
	}
	all, err := n.orion("get", "dag", "big", "--all")
	if err != nil || strings.Count(all, "\n") < wide+3 || !strings.Contains(all, "w02999") || strings.Contains(all, "fan[") {
		t.Fatalf("orion get dag --all: %v, %d lines", err, strings.Count(all, "\n"))
	}
	js, err := n.orion("get", "dag", "big", "--all", "-o", "json")
	var d head
	if err != nil || json.Unmarshal([]byte(js), &d) != nil || len(d.Tasks) != wide+3 || d.TasksTruncated {
		t.Fatalf("orion get dag --all -o json: %v, %d tasks, truncated %v", err, len(d.Tasks), d.TasksTruncated)
	}

	// submit --wait on a big DAG: counts read again as it runs, then its
	// summary, not a line per task.
	file := filepath.Join(t.TempDir(), "big2.json")
	body := strings.Replace(bigDAG(1200, 600, 0, 10), `"id":"big"`, `"id":"big2"`, 1)
	if err := os.WriteFile(file, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	wait, err := n.orion("submit", "-f", file, "--wait", "--timeout", "2m")
	if err == nil || !strings.Contains(wait, "Failed (2):") || !strings.Contains(wait, "dag big2 failed in") ||
		strings.Count(wait, "\n") > 80 {
		t.Fatalf("orion submit --wait: %v, %d lines\n%s", err, strings.Count(wait, "\n"), wait)
	}
}
