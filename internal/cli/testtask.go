package cli

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/resource"
)

// newTestTaskCmd is a task for tests, hidden from the help: the test
// cluster of test/kube has no registry, so its pod tasks run the orion
// binary of its own image. It prints its start and end times (for the
// overhead figures: the container's own start and exit, on the node's
// clock), holds memory (the OOM drill), sleeps, writes outputs to
// ORION_OUTPUTS and exits with a given code.
func newTestTaskCmd() *cobra.Command {
	var alloc, outputs string
	var sleep time.Duration
	var exit int
	cmd := &cobra.Command{
		Use:    "testtask",
		Short:  "A task for tests: print times, hold memory, sleep, write outputs, exit",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Printf("testtask start %d %s/%s#%s\n", time.Now().UnixNano(), os.Getenv("ORION_DAG_ID"), os.Getenv("ORION_TASK_ID"), os.Getenv("ORION_ATTEMPT"))
			var held [][]byte
			if alloc != "" {
				q, err := resource.ParseQuantity(alloc)
				if err != nil {
					return fmt.Errorf("--alloc: %w", err)
				}
				// Touch every page, a MiB at a time, so that it is resident.
				for n := q.Value(); n > 0; n -= 1 << 20 {
					b := make([]byte, 1<<20)
					for i := 0; i < len(b); i += 4096 {
						b[i] = 1
					}
					held = append(held, b)
				}
				fmt.Printf("testtask holds %s\n", alloc)
			}
			time.Sleep(sleep)
			if outputs != "" {
				if path := os.Getenv("ORION_OUTPUTS"); path != "" {
					if err := os.WriteFile(path, []byte(strings.ReplaceAll(outputs, ",", "\n")+"\n"), 0o644); err != nil {
						return err
					}
				}
			}
			fmt.Printf("testtask end %d (%d chunks held)\n", time.Now().UnixNano(), len(held))
			os.Exit(exit)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&alloc, "alloc", "", "memory to hold, as a Kubernetes quantity (200Mi)")
	f.DurationVar(&sleep, "sleep", 0, "how long to run")
	f.IntVar(&exit, "exit", 0, "exit code")
	f.StringVar(&outputs, "outputs", "", "k=v,k2=v2 written to $ORION_OUTPUTS")
	return cmd
}
