package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"github.com/orion-sched/orion/internal/client"
	"github.com/orion-sched/orion/internal/model"
)

func newGetTaskCmd() *cobra.Command {
	var offset, limit int
	cmd := &cobra.Command{
		Use:   "task DAG/TASK",
		Short: "Show one task in detail",
		Long: `Show one task: its spec, its latest attempt, the tail of its output and
the history of earlier attempts, and the outputs it published with its
success (with -o json, as their JSON values). The task is named DAG/TASK or
DAG TASK. A map group (a task with for_each) lists its instances, a page at
a time (--offset, --limit); an instance is named GROUP[INDEX] (quote it for
the shell).`,
		Example: `  orion get task 20260102-150405-a1b2c3/extract
  orion get task nightly-etl load -o json
  orion get task nightly-etl process --offset 100 --limit 50
  orion get task nightly-etl 'process[3]'`,
		Args: taskRefArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			dagID, taskID, _ := splitTaskRef(args)
			c, g, err := setup(cmd)
			if err != nil {
				return err
			}
			t, err := c.GetTask(cmd.Context(), dagID, taskID)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			var page *client.InstanceList
			if t.Map != nil && t.Map.Expanded {
				if page, err = c.Instances(cmd.Context(), dagID, taskID, offset, limit); err != nil {
					return err
				}
			}
			if g.output == outputJSON {
				if page != nil {
					return printJSON(out, struct {
						*client.Task
						Instances *client.InstanceList `json:"instances"`
					}{t, page})
				}
				return printJSON(out, t)
			}
			if err := printTask(out, dagID, t); err != nil {
				return err
			}
			if page != nil {
				return printInstances(out, page)
			}
			return nil
		},
	}
	cmd.Flags().IntVar(&offset, "offset", 0, "a map group's first instance listed")
	cmd.Flags().IntVar(&limit, "limit", 20, "how many of a map group's instances to list (at most 1000)")
	return cmd
}

// printInstances lists a page of a map group's instances.
func printInstances(out io.Writer, page *client.InstanceList) error {
	last := page.Offset + len(page.Instances)
	fmt.Fprintf(out, "\nInstances %d to %d of %d:\n", page.Offset, max(last-1, page.Offset), page.Total)
	tw := newTable(out)
	row(tw, "INSTANCE", "STATUS", "ATTEMPTS", "WORKER", "DURATION", "EXIT", "ITEM", "ERROR")
	for i := range page.Instances {
		t := &page.Instances[i]
		item := ""
		if t.Instance != nil {
			item = truncate(string(t.Instance.Item), 40)
		}
		row(tw, t.ID, t.Status, fmt.Sprint(t.Attempts), t.Worker, taskDuration(t), exitCode(t.ExitCode), item, truncate(t.Error, 60))
	}
	return tw.Flush()
}

func printTask(out io.Writer, dagID string, t *client.Task) error {
	hw := newTable(out)
	row(hw, "DAG:", dagID)
	row(hw, "Task:", t.ID)
	if t.Spec.Name != "" {
		row(hw, "Name:", t.Spec.Name)
	}
	row(hw, "Kind:", string(t.Kind))
	for _, kv := range specLines(&t.Spec) {
		row(hw, kv[0]+":", kv[1])
	}
	row(hw, "Depends on:", strings.Join(t.DependsOn, ", "))
	// Labels no wider than "Depends on:", so that a task without rules
	// prints as it always did.
	switch {
	case t.Role == roleHandler:
		row(hw, "Runs:", "as the DAG's "+t.ID+" handler, once its tasks have ended")
	case t.Role == roleNotification:
		row(hw, "Runs:", "as a notification, once the DAG's tasks and handlers have ended")
	case t.TriggerRule != "" && t.TriggerRule != model.AllSuccess:
		row(hw, "Rule:", string(t.TriggerRule))
	}
	if t.When != "" {
		row(hw, "When:", truncate(t.When, 200))
	}
	if t.Spec.ContinueOnFailure {
		row(hw, "On failure:", "continue: a failure counts as a success for its dependants and the DAG")
	}
	if t.Skipped != "" {
		row(hw, "Skipped:", skipReasons[t.Skipped])
	}
	row(hw, "Priority:", fmt.Sprint(t.Priority))
	row(hw, "Status:", t.Status)
	row(hw, "Attempts:", fmt.Sprintf("%d (retries used %d of %d)", t.Attempts, t.Retries, t.MaxRetries))
	if req := t.Spec.Requires(); len(req) > 0 {
		row(hw, "Requires:", model.FormatLabels(req))
	}
	if t.Waiting != "" {
		row(hw, "Waiting:", t.Waiting)
	}
	row(hw, "Worker:", t.Worker)
	row(hw, "Started:", formatTime(t.StartedAt))
	row(hw, "Finished:", formatTime(t.FinishedAt))
	row(hw, "Duration:", taskDuration(t))
	row(hw, "Exit code:", exitCode(t.ExitCode))
	if t.Error != "" {
		row(hw, "Error:", t.Error)
	}
	if t.RetryAt != nil {
		row(hw, "Retry at:", formatTime(t.RetryAt))
	}
	if t.Cause != "" {
		row(hw, "Cause:", t.Cause)
	}
	if t.Event != "" {
		row(hw, "Last event:", t.Event)
	}
	if m := t.Map; m != nil {
		row(hw, "Map:", mapText(m))
	}
	if in := t.Instance; in != nil {
		row(hw, "Instance:", fmt.Sprintf("%d of map group %s, item %s", in.Index, in.Group, truncate(string(in.Item), 200)))
	}
	if err := hw.Flush(); err != nil {
		return err
	}

	if len(t.History) > 0 {
		if t.HistoryOmitted > 0 {
			fmt.Fprintf(out, "\nHistory (the last %d earlier attempts; %d before them are counted, not kept):\n", len(t.History), t.HistoryOmitted)
		} else {
			fmt.Fprintln(out, "\nHistory:")
		}
		tw := newTable(out)
		row(tw, "ATTEMPT", "WORKER", "OUTCOME", "EXIT", "DURATION", "STARTED", "ERROR")
		for i := range t.History {
			a := &t.History[i]
			started := "-"
			if a.StartedAt != nil {
				started = a.StartedAt.Local().Format("2006-01-02 15:04:05")
			}
			row(tw, fmt.Sprint(a.Attempt), a.Worker, a.Outcome, exitCode(a.ExitCode), attemptDuration(a),
				started, truncate(a.Error, 60))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}

	if len(t.Outputs) > 0 {
		fmt.Fprintln(out, "\nOutputs:")
		if err := printValues(out, t.Outputs); err != nil {
			return err
		}
	}

	fmt.Fprintln(out, "\nOutput (tail):")
	if t.OutputTail == "" {
		fmt.Fprintln(out, "  (none)")
		return nil
	}
	for _, line := range strings.Split(strings.TrimRight(t.OutputTail, "\n"), "\n") {
		fmt.Fprintf(out, "  %s\n", line)
	}
	return nil
}

// printValues lists params or outputs, one per line, sorted by name: a
// string as it is (a template renders it so), anything else as JSON, each
// shortened to a line.
func printValues(out io.Writer, values map[string]json.RawMessage) error {
	names := make([]string, 0, len(values))
	for k := range values {
		names = append(names, k)
	}
	sort.Strings(names)
	tw := newTable(out)
	for _, k := range names {
		v := string(values[k])
		var s string
		if json.Unmarshal(values[k], &s) == nil {
			v = s
		}
		fmt.Fprintf(tw, "  %s\t%s\n", cell(k), cell(truncate(strings.ReplaceAll(v, "\n", `\n`), 200)))
	}
	return tw.Flush()
}

// specLines are the kind-specific fields of a task spec worth showing.
func specLines(s *model.Task) [][2]string {
	var l [][2]string
	add := func(k, v string) { l = append(l, [2]string{k, v}) }
	switch s.Kind {
	case model.KindShell:
		if s.Interpreter != "" {
			add("Interpreter", s.Interpreter)
		}
		add("Command", truncate(s.Command, 200))
		if s.Workdir != "" {
			add("Workdir", s.Workdir)
		}
		if len(s.Env) > 0 {
			keys := make([]string, 0, len(s.Env))
			for k := range s.Env {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			add("Env", strings.Join(keys, ", "))
		}
	case model.KindHTTP:
		add("Request", strings.TrimSpace(s.Method+" "+s.URL))
		if s.ExpectStatus != 0 {
			add("Expect status", fmt.Sprint(s.ExpectStatus))
		}
	case model.KindSleep:
		add("Sleep", s.Duration.D().String())
		if s.Fail > 0 {
			add("Fail probability", fmt.Sprint(float64(s.Fail)))
		}
	}
	if s.Timeout > 0 {
		add("Timeout", s.Timeout.D().String())
	}
	return l
}

// skipReasons say why a task was skipped, by the event of its record.
var skipReasons = map[string]string{
	"condition":    "condition: its when: was false",
	"trigger_rule": "trigger_rule: its dependencies ended in a way its rule does not run on",
	"not_needed":   "not_needed: the way the DAG ended does not call for it",
}
