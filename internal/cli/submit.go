package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/orion-sched/orion/internal/client"
	"github.com/orion-sched/orion/internal/dag"
	"github.com/orion-sched/orion/internal/model"
	"github.com/orion-sched/orion/internal/schedule"
)

func newSubmitCmd() *cobra.Command {
	var (
		file    string
		id      string
		wait    bool
		timeout time.Duration
		params  []string
	)
	cmd := &cobra.Command{
		Use:   "submit -f FILE",
		Short: "Submit a DAG from a YAML or JSON file",
		Long: `Submit a DAG to the server and print its id.

The file is YAML or JSON: .json is read as JSON, .yaml/.yml as YAML, and
anything else (including stdin, -f -) is told apart by its first character.
It is parsed and validated locally first, so mistakes are reported before
anything is sent; the server validates again and has the last word.

Every submission carries a DAG id: the file's, the one given by --id, or a
new one (such as 20260102-150405-a1b2c3). A submission with an id is
idempotent, so the CLI can safely repeat it when the server is briefly
unavailable; submitting the same id and content again reports the existing
DAG instead of creating a second one.

-p name=value sets a parameter the DAG declares (params:), once per
parameter. The value is a string when the parameter's default is one (so
-p version=1.10 stays "1.10"); otherwise it is read as JSON when it parses
as JSON (-p n=3, -p ok=true, -p 'parts=["a","b"]') and as a string when it
does not (-p day=2026-11-27). Quote a JSON-looking value to keep it a
string: -p 'n="3"'. A parameter declared without a default must be set.

With --wait the command follows the DAG until it finishes, printing a line
whenever the task counts change, then a table of the tasks. The exit code is
0 if the DAG succeeded, 1 if it failed or was cancelled, and 2 on a usage,
validation or API error (or when --timeout expires).`,
		Example: `  # Submit a DAG and print its id
  orion submit -f etl.yaml

  # Submit and wait for the outcome; the exit code tells success from failure
  orion submit -f etl.yaml --wait --timeout 30m

  # Set the DAG's parameters
  orion submit -f etl.yaml -p region=eu -p day=2026-11-27

  # Choose the id, so that re-running the command is harmless
  orion submit -f etl.json --id nightly-2026-01-02

  # Read the DAG from stdin and print the final state as JSON
  cat etl.yaml | orion submit -f - --wait -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, g, err := setup(cmd)
			if err != nil {
				return err
			}
			raw, name, err := readFile(cmd.InOrStdin(), file)
			if err != nil {
				return err
			}
			if schedule.HasSchedule(raw, contentTypeOf(file, raw)) {
				// A scheduled DAG: the file defines a schedule, not a run.
				if id != "" || wait || len(params) > 0 {
					return fmt.Errorf("%s has a schedule: block: it creates or updates a schedule, which takes neither --id, --wait nor -p", name)
				}
				return putSchedule(cmd, raw, name, contentTypeOf(file, raw))
			}
			body, contentType, dagID, err := prepareSubmission(bytes.NewReader(raw), file, id, params)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			resp, err := c.Submit(ctx, body, contentType, params...)
			if err != nil {
				return err
			}
			if resp.ID == "" {
				resp.ID = dagID
			}
			out, errOut := cmd.OutOrStdout(), cmd.ErrOrStderr()
			if !resp.Created {
				fmt.Fprintf(errOut, "dag %s already exists with this definition; not submitted again\n", resp.ID)
			}
			if !wait {
				if g.output == outputJSON {
					return printJSON(out, resp)
				}
				fmt.Fprintln(out, resp.ID)
				return nil
			}
			progress := out
			if g.output == outputJSON {
				progress = errOut // keep stdout a single JSON document
			} else {
				fmt.Fprintln(out, resp.ID)
			}
			d, err := waitForDAG(ctx, c, resp.ID, timeout, progress, errOut)
			if err != nil {
				return err
			}
			if g.output == outputJSON {
				if err := printJSON(out, d); err != nil {
					return err
				}
			} else if d.TasksTruncated {
				// A big DAG: its summary, not a thousand lines.
				fmt.Fprintln(out)
				if err := printBigDAG(ctx, out, c, d, defaultBigRows); err != nil {
					return err
				}
				fmt.Fprintf(out, "\ndag %s %s in %s\n", d.ID, d.Status, dagDuration(&d.DAGSummary))
			} else {
				printWaitResult(out, d)
			}
			if d.Status != client.DAGSucceeded {
				return &DAGUnsuccessfulError{ID: d.ID, Status: d.Status}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVarP(&file, "file", "f", "", "DAG file (YAML or JSON); - reads stdin")
	f.StringVar(&id, "id", "", "DAG id to use instead of the file's (default: the file's, else a new one)")
	f.BoolVar(&wait, "wait", false, "wait for the DAG to finish and print its tasks")
	f.DurationVar(&timeout, "timeout", time.Hour, "with --wait: give up after this long (0: never)")
	f.StringArrayVarP(&params, "param", "p", nil, "set a parameter the DAG declares, as name=value (repeat for each)")
	_ = cmd.MarkFlagRequired("file")
	return cmd
}

// prepareSubmission reads and checks the DAG and returns the body to send,
// its content type and the DAG id it carries.
func prepareSubmission(stdin io.Reader, file, idFlag string, params []string) (body []byte, contentType, id string, err error) {
	name := file
	var raw []byte
	if file == "-" {
		name = "stdin"
		raw, err = io.ReadAll(stdin)
	} else {
		raw, err = os.ReadFile(file)
	}
	if err != nil {
		return nil, "", "", fmt.Errorf("reading %s: %w", name, err)
	}
	contentType = contentTypeOf(file, raw)
	d, err := dag.Parse(raw, contentType)
	if err != nil {
		return nil, "", "", fmt.Errorf("%s: %w", name, err)
	}
	fileID := d.ID
	switch {
	case idFlag != "":
		if !dag.ValidID(idFlag) {
			return nil, "", "", fmt.Errorf("--id %q is invalid: want 1-128 letters, digits, '.', '_' or '-', starting with a letter or digit", idFlag)
		}
		d.ID = idFlag
	case d.ID == "":
		d.ID = dag.NewID(time.Now())
	}
	if err := validateLocally(d, params); err != nil {
		return nil, "", "", fmt.Errorf("%s: %w", name, err)
	}
	if d.ID == fileID && (contentType != "application/yaml" || len(raw) <= dag.MaxYAMLBytes) {
		// The file already names its id: send it as written. A YAML file
		// larger than the server decodes as YAML goes as JSON (below).
		return raw, contentType, d.ID, nil
	}
	// Inject the id: the parsed DAG carries every field of the file (seed
	// aliases already mapped to their native form), so its JSON is the same
	// DAG with an id.
	body, err = json.Marshal(d)
	if err != nil {
		return nil, "", "", fmt.Errorf("%s: encoding DAG: %w", name, err)
	}
	return body, "application/json", d.ID, nil
}

// contentTypeOf names the body's format: by extension, else by sniffing the
// first character as the server does.
func contentTypeOf(file string, body []byte) string {
	switch strings.ToLower(filepath.Ext(file)) {
	case ".json":
		return "application/json"
	case ".yaml", ".yml":
		return "application/yaml"
	}
	b := bytes.TrimLeft(bytes.TrimPrefix(body, []byte("\xef\xbb\xbf")), " \t\r\n")
	if len(b) > 0 && b[0] == '{' {
		return "application/json"
	}
	return "application/yaml"
}

// validateLocally runs the server's checks on a copy of d, with the
// parameters -p sets, except the task count limit, which is the server's
// to configure. The body is sent as written: the server binds the params.
func validateLocally(d *model.DAG, params []string) error {
	c := *d
	c.Tasks = slices.Clone(d.Tasks)
	c.Normalize()
	overrides, err := dag.ParseParamFlags(params)
	if err != nil {
		return err
	}
	if err := dag.Bind(&c, overrides); err != nil {
		return err
	}
	return dag.Validate(&c, dag.Limits{MaxTasks: math.MaxInt})
}

// notFoundGrace is how long after submitting a 404 is taken for replication
// lag rather than an error.
const notFoundGrace = 5 * time.Second

// waitForDAG follows a DAG until it reaches a terminal status, printing a
// progress line to progress whenever its status or counts change. It reads
// the DAG once, then follows the event stream from the revision that read
// reflects, so the end is seen the moment a replica applies it; a server
// without the stream (or a stream that breaks) is polled instead, every
// pollInterval, until a stream opens again. Temporary errors (a leader
// change, a restart) are ridden out until the timeout.
func waitForDAG(ctx context.Context, c *client.Client, id string, timeout time.Duration, progress, warn io.Writer) (*client.DAG, error) {
	parent := ctx
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	w := &dagWatch{id: id, progress: progress}
	defer w.flush(true)
	warned := false
	start := time.Now()
	noStream := false // the server has no event stream: poll
	big := false      // a DAG of more tasks than a read lists: read its head only
	for {
		var d *client.DAG
		var err error
		if big {
			d, err = c.GetDAGHead(ctx, id, 0)
		} else {
			d, err = c.GetDAG(ctx, id)
		}
		switch {
		case err == nil:
			warned = false
			big = d.TasksTruncated
			if w.reset(d) {
				return d, nil
			}
			// A big DAG's tasks are not all listed: its counts come from
			// reading it again, not from following each task's events.
			if !noStream && !d.TasksTruncated {
				err := w.follow(ctx, c, d.Revision)
				var ae *client.APIError
				if errors.As(err, &ae) && (ae.Status == http.StatusNotFound || ae.Status == http.StatusNotAcceptable) {
					noStream = true
				}
				if err == nil || ctx.Err() != nil {
					continue // the DAG ended (read it), or the wait ends below
				}
			}
		case ctx.Err() != nil:
			// Reported below.
		case client.IsTemporary(err),
			// A replica that has not yet applied the submission may not
			// know the DAG for a moment.
			w.status == "" && client.IsNotFound(err) && time.Since(start) < notFoundGrace:
			if !warned {
				fmt.Fprintf(warn, "warning: %v; still waiting\n", err)
				warned = true
			}
		default:
			return nil, err
		}
		t := time.NewTimer(pollInterval)
		select {
		case <-ctx.Done():
			t.Stop()
			if parent.Err() == nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
				status := w.status
				if status == "" {
					status = "unknown"
				}
				return nil, fmt.Errorf("timed out after %s waiting for dag %s (status %s)", timeout, id, status)
			}
			return nil, fmt.Errorf("stopped waiting for dag %s: %w", id, parent.Err())
		case <-t.C:
		}
	}
}

// dagWatch is the state `submit --wait` keeps of the DAG it follows: the
// status of every task, from a read and the task events after it.
type dagWatch struct {
	id       string
	progress io.Writer
	status   string            // the DAG's
	tasks    map[string]string // task id → status
	printed  string            // the last progress line printed
	shown    time.Time         // when it was printed
}

// progressEvery bounds how often a following wait prints a line: a DAG of a
// thousand short tasks changes its counts thousands of times a second.
const progressEvery = 200 * time.Millisecond

// reset takes a fresh read of the DAG and reports whether it has ended.
func (w *dagWatch) reset(d *client.DAG) bool {
	w.status = d.Status
	w.show(formatCounts(d.Counts), true)
	if d.TasksTruncated {
		w.tasks = nil // its counts are d's, read again (flush has none to add)
		return client.DAGTerminal(d.Status)
	}
	w.tasks = make(map[string]string, len(d.Tasks))
	for i := range d.Tasks {
		w.tasks[d.Tasks[i].ID] = d.Tasks[i].Status
	}
	return client.DAGTerminal(d.Status)
}

// follow reads the event stream after revision rev until the DAG's record
// says it ended (nil: read it again), the stream asks for a re-read
// (resync) or it fails (an error).
func (w *dagWatch) follow(ctx context.Context, c *client.Client, rev int64) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.Events(ctx, strconv.FormatInt(rev, 10))
	if err != nil {
		return err
	}
	defer stream.Close()
	events := make(chan client.Event)
	failed := make(chan error, 1)
	go func() {
		for {
			ev, err := stream.Next()
			if err != nil {
				failed <- err
				return
			}
			select {
			case events <- ev:
			case <-ctx.Done():
				return
			}
		}
	}()
	tick := time.NewTicker(progressEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-failed:
			return err
		case <-tick.C:
			w.flush(false)
		case ev := <-events:
			switch {
			case ev.Type == "resync":
				return nil // events were lost: read the DAG again
			case ev.DAG != w.id || ev.Rev <= rev:
			case ev.Type == "task":
				w.tasks[ev.Task] = ev.Status
				w.flush(false)
			case ev.Type == "dag":
				w.status = ev.Status
				if client.DAGTerminal(ev.Status) {
					return nil // read the final DAG
				}
			case ev.Type == "dag_deleted":
				return nil // the read answers 404
			}
		}
	}
}

// flush prints the progress line if it changed, at most every
// progressEvery unless force is set.
func (w *dagWatch) flush(force bool) {
	if w.tasks == nil {
		return
	}
	counts := make(map[string]int, 8)
	for _, st := range w.tasks {
		counts[st]++
	}
	w.show(formatCounts(counts), force)
}

func (w *dagWatch) show(counts string, force bool) {
	line := fmt.Sprintf("%-8s %s", w.status, counts)
	if line == w.printed || (!force && time.Since(w.shown) < progressEvery) {
		return
	}
	fmt.Fprintf(w.progress, "%s %s\n", now().Format("15:04:05"), line)
	w.printed, w.shown = line, time.Now()
}

func printWaitResult(w io.Writer, d *client.DAG) {
	tw := newTable(w)
	row(tw, "TASK", "STATUS", "ATTEMPTS", "DURATION", "EXIT")
	for i := range d.Tasks {
		t := &d.Tasks[i]
		row(tw, t.ID, t.Status, fmt.Sprint(t.Attempts), taskDuration(t), exitCode(t.ExitCode))
	}
	tw.Flush()
	fmt.Fprintf(w, "\ndag %s %s in %s\n", d.ID, d.Status, dagDuration(&d.DAGSummary))
}
