package cli

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/orion-sched/orion/internal/client"
	"github.com/orion-sched/orion/internal/dag"
	"github.com/orion-sched/orion/internal/schedule"
)

func newScheduleCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "schedule",
		Aliases: []string{"schedules"},
		Short:   "Create, list and control schedules: DAGs that run on a cron expression",
		Long: `A schedule is a DAG file with a schedule: block. The leader fires each tick
as a DAG run named <schedule>-<tick time in UTC>, for instance
nightly-etl-20261125T020000Z, exactly once across leader failures.

  id: nightly-etl
  schedule:
    cron: "0 2 * * *"          # 5 fields, optional leading seconds, @hourly, @every 10m
    timezone: Europe/Berlin     # IANA name (default UTC)
    catchup: latest             # skip | latest | all (default, with catchup_limit)
    overlap: skip               # allow (default) | skip | queue
    max_active_runs: 1
  tasks: [...]`,
	}
	cmd.AddCommand(newScheduleCreateCmd(), newScheduleListCmd(), newScheduleGetCmd(),
		newScheduleActionCmd("pause", "Stop a schedule firing (ticks until resume are its catch-up policy's)", (*client.Client).PauseSchedule),
		newScheduleActionCmd("resume", "Let a paused schedule fire again", (*client.Client).ResumeSchedule),
		newScheduleActionCmd("delete", "Delete a schedule (its runs stay)", (*client.Client).DeleteSchedule),
		newScheduleTriggerCmd(), newScheduleRunsCmd())
	return cmd
}

// readFile reads -f FILE (or stdin for -) and names it for messages.
func readFile(stdin io.Reader, file string) (raw []byte, name string, err error) {
	name = file
	if file == "-" {
		name = "stdin"
		raw, err = io.ReadAll(stdin)
	} else {
		raw, err = os.ReadFile(file)
	}
	if err != nil {
		return nil, name, fmt.Errorf("reading %s: %w", name, err)
	}
	return raw, name, nil
}

// putSchedule validates a scheduled DAG file locally, sends it and prints
// what happened.
func putSchedule(cmd *cobra.Command, raw []byte, name, contentType string) error {
	c, g, err := setup(cmd)
	if err != nil {
		return err
	}
	sc, err := schedule.Parse(raw, contentType)
	if err == nil {
		err = sc.Validate(dag.Limits{MaxTasks: math.MaxInt})
	}
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	resp, err := c.PutSchedule(cmd.Context(), raw, contentType)
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	if g.output == outputJSON {
		return printJSON(out, resp)
	}
	what := "unchanged"
	switch {
	case resp.Created:
		what = "created"
	case resp.Changed:
		what = "updated"
	}
	fmt.Fprintf(out, "schedule %s %s\n", resp.ID, what)
	if len(resp.Next) > 0 {
		fmt.Fprintf(out, "next: %s\n", formatTicks(resp.Next, 3))
	}
	return nil
}

func formatTicks(ts []time.Time, n int) string {
	var s []string
	for i, t := range ts {
		if i == n {
			break
		}
		s = append(s, t.Local().Format("2006-01-02 15:04:05 MST"))
	}
	if len(s) == 0 {
		return "-"
	}
	return strings.Join(s, ", ")
}

func newScheduleCreateCmd() *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:     "create -f FILE",
		Aliases: []string{"apply"},
		Short:   "Create or update a schedule from a DAG file with a schedule: block",
		Long: `Create a schedule, or update the one with the file's id: its cron, policies and
DAG are replaced, and the ticks it already fired stay fired. 'orion submit -f'
does the same for a file with a schedule: block.`,
		Example: `  orion schedule create -f nightly.yaml`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			raw, name, err := readFile(cmd.InOrStdin(), file)
			if err != nil {
				return err
			}
			return putSchedule(cmd, raw, name, contentTypeOf(file, raw))
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "DAG file with a schedule: block (YAML or JSON); - reads stdin")
	_ = cmd.MarkFlagRequired("file")
	return cmd
}

func newScheduleListCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List schedules with their next fire time",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, g, err := setup(cmd)
			if err != nil {
				return err
			}
			list, err := c.ListSchedules(cmd.Context())
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if g.output == outputJSON {
				return printJSON(out, list)
			}
			if len(list.Schedules) == 0 {
				fmt.Fprintln(cmd.ErrOrStderr(), "No schedules.")
				return nil
			}
			tw := newTable(out)
			row(tw, "ID", "CRON", "TIMEZONE", "STATE", "CATCHUP", "OVERLAP", "ACTIVE", "LAST RUN", "NEXT")
			for i := range list.Schedules {
				s := &list.Schedules[i]
				row(tw, s.ID, s.Cron, s.Timezone, scheduleState(s), s.Catchup, s.Overlap,
					fmt.Sprint(s.ActiveRuns), orDash(s.LastRun), formatTicks(s.Next, 1))
			}
			return tw.Flush()
		},
	}
}

func scheduleState(s *client.Schedule) string {
	switch {
	case s.Paused:
		return "paused"
	case len(s.Next) == 0:
		return "ended"
	}
	return "active"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func newScheduleGetCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "get SCHEDULE",
		Short: "Show a schedule: its spec, where it stands and its next ticks",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, g, err := setup(cmd)
			if err != nil {
				return err
			}
			s, err := c.GetSchedule(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if g.output == outputJSON {
				return printJSON(out, s)
			}
			tw := newTable(out)
			row(tw, "id:", s.ID)
			row(tw, "name:", s.Name)
			row(tw, "cron:", s.Cron+" ("+s.Timezone+")")
			row(tw, "state:", scheduleState(s))
			if s.Start != nil || s.End != nil {
				row(tw, "window:", formatTime(s.Start)+" .. "+formatTime(s.End))
			}
			catchup := s.Catchup
			if s.CatchupLimit > 0 {
				catchup += fmt.Sprintf(" (at most %d late ticks)", s.CatchupLimit)
			}
			row(tw, "catchup:", catchup+", grace "+s.Grace)
			limit := "no limit"
			if s.MaxActiveRuns > 0 {
				limit = fmt.Sprintf("max_active_runs %d", s.MaxActiveRuns)
			}
			row(tw, "overlap:", s.Overlap+", "+limit)
			row(tw, "tasks:", fmt.Sprint(s.Tasks))
			row(tw, "active runs:", fmt.Sprint(s.ActiveRuns))
			row(tw, "last tick:", formatTime(s.LastTick)+" "+orDash(s.LastRun))
			row(tw, "next:", formatTicks(s.Next, 5))
			return tw.Flush()
		},
	}
}

func newScheduleActionCmd(verb, short string, call func(*client.Client, context.Context, string) (client.ActionResponse, error)) *cobra.Command {
	return &cobra.Command{
		Use:   verb + " SCHEDULE",
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, g, err := setup(cmd)
			if err != nil {
				return err
			}
			resp, err := call(c, cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if g.output == outputJSON {
				return printJSON(cmd.OutOrStdout(), resp)
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "schedule %s: %s\n", args[0], resp.Status)
			return err
		},
	}
}

func newScheduleTriggerCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "trigger SCHEDULE",
		Short: "Start a run of a schedule now, outside its ticks",
		Long: `Start a run now, whether the schedule is paused or not. The run is named
<schedule>-<now in UTC>-m; a second trigger within the same second names the
same run.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, g, err := setup(cmd)
			if err != nil {
				return err
			}
			resp, err := c.TriggerSchedule(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if g.output == outputJSON {
				return printJSON(cmd.OutOrStdout(), resp)
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), resp.Run)
			return err
		},
	}
}

func newScheduleRunsCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "runs SCHEDULE",
		Short: "List the runs of a schedule, newest tick first",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, g, err := setup(cmd)
			if err != nil {
				return err
			}
			runs, err := c.ScheduleRuns(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if g.output == outputJSON {
				return printJSON(out, runs)
			}
			if len(runs.Runs) == 0 {
				fmt.Fprintln(cmd.ErrOrStderr(), "No runs.")
				return nil
			}
			tw := newTable(out)
			row(tw, "RUN", "TICK", "KIND", "STATUS", "SUBMITTED", "DURATION")
			for _, r := range runs.Runs {
				kind := "tick"
				if r.Manual {
					kind = "trigger"
				}
				sum := client.DAGSummary{Status: r.Status, SubmittedAt: r.SubmittedAt, FinishedAt: r.FinishedAt}
				row(tw, r.ID, r.Tick.Local().Format("2006-01-02 15:04:05"), kind, r.Status, formatAge(r.SubmittedAt), dagDuration(&sum))
			}
			return tw.Flush()
		},
	}
}
