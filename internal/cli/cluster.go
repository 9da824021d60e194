package cli

import (
	"github.com/orion-sched/orion/internal/model"

	"fmt"
	"strings"

	"github.com/spf13/cobra"
)

func newClusterCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "cluster",
		Short: "Show scheduler replicas, workers and etcd",
		Long: `Show the cluster as the server sees it: which node leads, how far each
replica has applied the log, the workers with their slots, and the etcd
endpoints.`,
		Example: `  orion cluster
  orion cluster --server http://node1:8080,http://node2:8080 -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, g, err := setup(cmd)
			if err != nil {
				return err
			}
			cl, err := c.Cluster(cmd.Context())
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if g.output == outputJSON {
				return printJSON(out, cl)
			}
			hw := newTable(out)
			row(hw, "Node:", cl.Node)
			leader := cl.Leader
			if leader == "" {
				leader = "(none: no replica leads right now)"
			} else if cl.LeaderURL != "" {
				leader += "  " + cl.LeaderURL
			}
			row(hw, "Leader:", leader)
			row(hw, "Applied revision:", fmt.Sprint(cl.AppliedRevision))
			if err := hw.Flush(); err != nil {
				return err
			}

			fmt.Fprintln(out, "\nReplicas:")
			tw := newTable(out)
			row(tw, "NAME", "ROLE", "APPLIED REV", "LAG", "API", "LEADER SINCE")
			for _, r := range cl.Replicas {
				since := "-"
				if r.LeaderSince != nil {
					since = formatAge(*r.LeaderSince)
				}
				row(tw, r.Name, r.Role, fmt.Sprint(r.AppliedRevision), fmt.Sprint(r.Lag), cell(r.APIURL), since)
			}
			if err := tw.Flush(); err != nil {
				return err
			}

			fmt.Fprintln(out, "\nWorkers:")
			if len(cl.Workers) == 0 {
				fmt.Fprintln(out, "  (none)")
			} else {
				tw = newTable(out)
				row(tw, "ID", "SLOTS", "BUSY", "CONNECTED", "REPLICA", "HOST", "LABELS")
				for _, w := range cl.Workers {
					row(tw, w.ID, fmt.Sprint(w.Slots), fmt.Sprint(w.Busy), fmt.Sprint(w.Connected), cell(w.Replica), cell(w.Host), cell(model.FormatLabels(w.Labels)))
				}
				if err := tw.Flush(); err != nil {
					return err
				}
			}

			endpoints := "-"
			if len(cl.Etcd.Endpoints) > 0 {
				endpoints = strings.Join(cl.Etcd.Endpoints, ", ")
			}
			fmt.Fprintf(out, "\netcd endpoints: %s\n", endpoints)
			if st := cl.Etcd.Storage; st != nil {
				fmt.Fprintf(out, "etcd storage: %s: %s in use, database %s, quota %s, new work admitted up to %s in use\n",
					st.State, mibs(st.InUseBytes), mibs(st.DBSizeBytes), mibs(st.QuotaBytes), mibs(st.AdmissionLimitBytes))
				if st.Message != "" {
					fmt.Fprintf(out, "  %s\n", st.Message)
				}
			}
			nospace := false
			for _, a := range cl.Etcd.Alarms {
				fmt.Fprintf(out, "etcd alarm: %s on member %s: %s\n", a.Alarm, a.MemberID, a.Message)
				nospace = nospace || a.Alarm == "NOSPACE"
			}
			if nospace {
				defer fmt.Fprint(out, storageFullHint) // after the members
			}
			if len(cl.Etcd.Members) > 0 {
				tw = newTable(out)
				row(tw, "MEMBER", "ID", "CLIENT URLS", "RAFT LEADER")
				for _, m := range cl.Etcd.Members {
					row(tw, m.Name, m.ID, strings.Join(m.ClientURLs, ","), fmt.Sprint(m.IsLeader))
				}
				return tw.Flush()
			}
			return nil
		},
	}
}

// mibs prints a byte count in MiB.
func mibs(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
