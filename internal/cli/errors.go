package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/spf13/cobra"

	"github.com/orion-sched/orion/internal/client"
	"github.com/orion-sched/orion/internal/dag"
	"github.com/orion-sched/orion/internal/http/apitypes"
	"github.com/orion-sched/orion/internal/store"
)

// storageFullHint follows a 507 storage_full and the NOSPACE alarm in
// `orion cluster`: Orion's own etcd members recover by themselves, any
// other etcd needs these steps.
var storageFullHint = "hint: etcd reached its backend quota (NOSPACE). The embedded member and `orion etcd` members reclaim\n" +
	"the space by themselves once retention has deleted enough; for any other etcd run:\n" +
	indent(store.ExternalNoSpaceRecipe, "  ") + "\n"

// orionsOwnLimit reports a 507 that Orion's admission limit or its guard
// short of etcd's quota answered (scheduler.AdmissionError, a guarded
// store.NoSpaceError): no alarm is raised, and the message says what to do.
func orionsOwnLimit(msg string) bool {
	return strings.Contains(msg, "storage_admission_ratio") || strings.Contains(msg, "short of etcd's NOSPACE alarm")
}

func indent(s, by string) string { return by + strings.ReplaceAll(s, "\n", "\n"+by) }

// Exit codes.
const (
	ExitOK           = 0
	ExitDAGFailed    = 1 // submit --wait: the DAG finished failed or cancelled
	ExitUsageOrError = 2 // bad usage, unreadable input, API or connection error
)

// DAGUnsuccessfulError is returned by `submit --wait` when the DAG finished
// in a status other than succeeded. ExitCode maps it to 1.
type DAGUnsuccessfulError struct {
	ID     string
	Status string
}

func (e *DAGUnsuccessfulError) Error() string {
	return fmt.Sprintf("dag %s finished %s", e.ID, e.Status)
}

// ExitCode maps a command's error to the process exit code: 0 for nil, 1
// for a DAG that finished unsuccessfully, 2 for everything else.
func ExitCode(err error) int {
	if err == nil {
		return ExitOK
	}
	var du *DAGUnsuccessfulError
	if errors.As(err, &du) {
		return ExitDAGFailed
	}
	return ExitUsageOrError
}

// PrintError writes "error: <message>" and any detail lines to w, plus a
// hint for the usual mistakes (no server, missing token).
func PrintError(w io.Writer, err error) {
	if err == nil {
		return
	}
	fmt.Fprintf(w, "error: %v\n", err)
	var details []string
	msg := ""
	var ae *client.APIError
	var ve *dag.ValidationError
	switch {
	case errors.As(err, &ae):
		details, msg = ae.Details, ae.Message
		switch ae.Status {
		case http.StatusUnauthorized:
			fmt.Fprintf(w, "hint: pass --token or set %s\n", EnvToken)
		}
		if ae.Code == apitypes.CodeStorageFull && !orionsOwnLimit(ae.Message) {
			fmt.Fprint(w, storageFullHint)
		}
	case errors.As(err, &ve):
		details, msg = ve.Details, ve.Message
	}
	if !(len(details) == 1 && details[0] == msg) {
		for _, d := range details {
			fmt.Fprintf(w, "  %s\n", d)
		}
	}
	var ce *client.ConnError
	if errors.As(err, &ce) {
		fmt.Fprintf(w, "hint: is the server running? Point --server or %s at it\n", EnvServer)
	}
}

// Execute runs root and reports a failure on its stderr; it returns the exit
// code for os.Exit. It sets root.SilenceErrors so cobra does not print the
// error a second time.
func Execute(ctx context.Context, root *cobra.Command) int {
	root.SilenceErrors = true
	err := root.ExecuteContext(ctx)
	PrintError(root.ErrOrStderr(), err)
	return ExitCode(err)
}
