package cli

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/orion-sched/orion/internal/client"
)

func newCancelCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "cancel DAG",
		Short: "Cancel a running DAG",
		Long: `Cancel a DAG: tasks that have not finished end as cancelled and running
attempts are stopped. A cancelled DAG can be run again with 'orion retry'.

A DAG with handlers or notifications is cancelled in two steps: its tasks
are cancelled, then its on_exit handler and the notifications sent on
cancelled run, and then the DAG is cancelled. Cancel it again meanwhile to
stop those too.`,
		Example: `  orion cancel 20260102-150405-a1b2c3`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runAction(cmd, args[0], (*client.Client).Cancel)
		},
	}
}

// runAction runs cancel, retry or delete and prints the DAG's new status.
func runAction(cmd *cobra.Command, id string, call func(*client.Client, context.Context, string) (client.ActionResponse, error)) error {
	c, g, err := setup(cmd)
	if err != nil {
		return err
	}
	resp, err := call(c, cmd.Context(), id)
	if err != nil {
		return err
	}
	if resp.ID == "" {
		resp.ID = id
	}
	if g.output == outputJSON {
		return printJSON(cmd.OutOrStdout(), resp)
	}
	if resp.CancelRequested {
		_, err = fmt.Fprintf(cmd.OutOrStdout(), "dag %s: %s, cancel requested: its tasks are being cancelled; its handlers "+
			"and notifications run, then it is cancelled (cancel again to stop them)\n", resp.ID, resp.Status)
		return err
	}
	_, err = fmt.Fprintf(cmd.OutOrStdout(), "dag %s: %s\n", resp.ID, resp.Status)
	return err
}
