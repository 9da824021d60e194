package executor

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/orion-sched/orion/internal/model"
)

// A shell task publishes outputs by writing to the file $ORION_OUTPUTS
// names, in either form; only a success publishes, and the file is gone
// once read.
func TestShellOutputs(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 4)
	for name, c := range map[string]struct {
		cmd  string
		want string
	}{
		"lines":   {`echo rows=42 >> "$ORION_OUTPUTS"; printf 'day=%s\n' 2026-11-27 >> "$ORION_OUTPUTS"`, `{"day":"2026-11-27","rows":"42"}`},
		"json":    {`echo '{"parts": ["a", "b"], "n": 2}' > "$ORION_OUTPUTS"`, `{"n":2,"parts":["a","b"]}`},
		"heredoc": {`printf 'files<<EOF\na.csv\nb.csv\nEOF\n' > "$ORION_OUTPUTS"`, `{"files":"a.csv\nb.csv"}`},
		"none":    {`true`, `null`},
	} {
		r := h.run(shell(c.cmd))
		if r.Outcome != model.Succeeded {
			t.Errorf("%s: %+v", name, r)
			continue
		}
		got, _ := model.OutputValue(r.Outputs)
		if string(got) != c.want {
			t.Errorf("%s: outputs %s, want %s", name, got, c.want)
		}
	}
	// A failure publishes nothing.
	r := h.run(shell(`echo a=1 > "$ORION_OUTPUTS"; exit 3`))
	if r.Outcome != model.Failed || r.Outputs != nil {
		t.Errorf("failed attempt: %+v", r)
	}
	// Every attempt gets its own path, in a directory that goes with the
	// executor; read files are removed.
	r1 := h.run(shell(`echo "$ORION_OUTPUTS"`))
	r2 := h.run(shell(`echo "$ORION_OUTPUTS"`))
	p1, p2 := strings.TrimSpace(r1.OutputTail), strings.TrimSpace(r2.OutputTail)
	if p1 == p2 || !strings.HasPrefix(p1, h.l.LogDir()) {
		t.Errorf("paths %q and %q", p1, p2)
	}
	entries, err := os.ReadDir(filepath.Dir(p1))
	if err != nil || len(entries) != 0 {
		t.Errorf("outputs dir holds %v (%v): want every file removed", entries, err)
	}
}

// Outputs are never cut: a file over max_output_bytes (the attempt's, as
// its leader set it), a malformed one, or one that is not a regular file
// fails the attempt with a message that says so, in its result and its
// log.
func TestShellOutputsRefused(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 4)
	run := func(cmd string, max int) model.Result {
		h.n++
		id := model.AttemptID{DAG: "d", Task: fmt.Sprintf("t%d", h.n), Attempt: 1}
		h.l.Start(model.Attempt{AttemptID: id, Spec: shell(cmd), MaxOutputBytes: max})
		return h.wait(id, bound)
	}
	for name, c := range map[string]struct {
		cmd  string
		max  int
		want string
	}{
		"over the bound": {`head -c 5000 /dev/zero | tr '\0' x | sed 's/^/a=/' > "$ORION_OUTPUTS"`, 1024, "outputs file of 5002 bytes exceeds max_output_bytes (1024)"},
		"huge":           {`head -c 50000000 /dev/zero > "$ORION_OUTPUTS"`, 0, "outputs file of 50000000 bytes exceeds max_output_bytes (65536)"},
		"malformed":      {`echo 'not an output' > "$ORION_OUTPUTS"`, 0, "outputs line 1: want name=value"},
		"fifo":           {`mkfifo "$ORION_OUTPUTS"`, 0, "outputs: $ORION_OUTPUTS is not a regular file"},
	} {
		r := run(c.cmd, c.max)
		if r.Outcome != model.Failed || !strings.Contains(r.Error, c.want) || r.Outputs != nil {
			t.Errorf("%s: %s %q, want failed with %q", name, r.Outcome, r.Error, c.want)
		}
		if !strings.Contains(r.OutputTail, "orion: "+r.Error) {
			t.Errorf("%s: tail %q does not say why", name, r.OutputTail)
		}
	}
}

// An http task takes the outputs it declares from the response body: the
// body as a string, and values at JSON paths, numbers as written.
func TestHTTPOutputs(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/json":
			io.WriteString(w, `{"items": [{"id": 12345678901234567890}, {"id": 2}], "next": "<b>"}`)
		case "/text":
			io.WriteString(w, "plain")
		case "/huge":
			io.WriteString(w, `{"a": "`+strings.Repeat("x", MaxHTTPOutputBody)+`"}`)
		case "/bad":
			w.WriteHeader(500)
			io.WriteString(w, `{"a": 1}`)
		}
	}))
	t.Cleanup(srv.Close)
	h := newHarness(t, 4, func(c *LocalConfig) { c.HTTPClient = srv.Client() })
	task := func(path string, o *model.HTTPOutputs) model.Task {
		return model.Task{Kind: model.KindHTTP, URL: srv.URL + path, Outputs: o}
	}
	r := h.run(task("/json", &model.HTTPOutputs{Body: "raw", JSON: map[string]string{"first": ".items[0].id", "next": "next", "items": ".items"}}))
	got, _ := model.OutputValue(r.Outputs)
	want := `{"first":12345678901234567890,"items":[{"id":12345678901234567890},{"id":2}],"next":"<b>","raw":"{\"items\": [{\"id\": 12345678901234567890}, {\"id\": 2}], \"next\": \"<b>\"}"}`
	if r.Outcome != model.Succeeded || string(got) != want {
		t.Errorf("json: %s %q\n%s\nwant %s", r.Outcome, r.Error, got, want)
	}
	for name, c := range map[string]struct {
		task model.Task
		want string
	}{
		"not JSON":  {task("/text", &model.HTTPOutputs{JSON: map[string]string{"a": "a"}}), "outputs.json: the response body is not JSON"},
		"no key":    {task("/json", &model.HTTPOutputs{JSON: map[string]string{"a": ".items[0].nope"}}), `outputs.json.a: .items[0].nope: .items[0] has no key "nope"`},
		"too large": {task("/json", &model.HTTPOutputs{Body: "raw"}), ""},
		"huge body": {task("/huge", &model.HTTPOutputs{Body: "raw"}), "the response body is over 1048576 bytes"},
		"status":    {task("/bad", &model.HTTPOutputs{Body: "raw"}), "unexpected status"},
	} {
		var r model.Result
		if name == "too large" {
			h.n++
			id := model.AttemptID{DAG: "d", Task: fmt.Sprintf("t%d", h.n), Attempt: 1}
			h.l.Start(model.Attempt{AttemptID: id, Spec: c.task, MaxOutputBytes: 20})
			r = h.wait(id, bound)
			c.want = "exceed max_output_bytes (20)"
		} else {
			r = h.run(c.task)
		}
		if r.Outcome != model.Failed || !strings.Contains(r.Error, c.want) || r.Outputs != nil {
			t.Errorf("%s: %s %q, want failed with %q", name, r.Outcome, r.Error, c.want)
		}
	}
}
