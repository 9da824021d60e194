// Package cli holds every command of the orion binary, one file each, under
// a thin cobra root (NewRoot): the processes (server, worker, etcd), the
// client commands (submit, get, logs, cancel, retry, cluster), which talk to
// a server through internal/client, and the drill and the benchmark. The
// server, the worker and the etcd member read their settings through one
// loader (internal/config: defaults < config file < ORION_* env < flags).
//
// main is only:
//
//	os.Exit(cli.Execute(context.Background(), cli.NewRoot()))
//
// Commands return errors rather than printing them; Execute (or PrintError
// and ExitCode) turns an error into "error: ..." on stderr and an exit code.
package cli

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/orion-sched/orion/internal/client"
	"github.com/orion-sched/orion/internal/config"
	"github.com/orion-sched/orion/internal/http/tlsfiles"
)

// Environment variables read when the matching flag is not given (the
// worker reads the same two).
const (
	EnvServer   = config.EnvServer
	EnvToken    = config.EnvToken
	EnvCAFile   = config.EnvCAFile
	EnvCertFile = config.EnvCertFile
	EnvKeyFile  = config.EnvKeyFile
)

// DefaultServer is the API address used when neither --server nor
// ORION_SERVER is set.
const DefaultServer = config.DefaultServer

const (
	flagServer = "server"
	flagToken  = "token"
	flagOutput = "output"
	flagCA     = "ca-file"
	flagCert   = "cert-file"
	flagKey    = "key-file"

	outputTable = "table"
	outputJSON  = "json"
)

// pollInterval is how often `submit --wait` polls; tests shorten it.
var pollInterval = 500 * time.Millisecond

// clientHook, if set, adjusts every client the commands create (tests use it
// to shorten retry delays).
var clientHook func(*client.Client)

// AddGlobalFlags adds the persistent flags the client commands read:
// --server, --token and --output/-o.
func AddGlobalFlags(root *cobra.Command) {
	pf := root.PersistentFlags()
	pf.String(flagServer, DefaultServer, "API server URL; give several, comma-separated, to fail over in order (env "+EnvServer+")")
	pf.String(flagToken, "", "bearer token for the API (env "+EnvToken+")")
	pf.StringP(flagOutput, "o", outputTable, "output format: table or json")
	pf.String(flagCA, "", "CA bundle (PEM) that https:// servers are verified with; default the system's (env "+EnvCAFile+")")
	pf.String(flagCert, "", "client certificate (PEM) for a server that requires one, with --key-file (env "+EnvCertFile+")")
	pf.String(flagKey, "", "the client certificate's key (PEM) (env "+EnvKeyFile+")")
}

// AddClientCommands adds submit, get (dags, dag, task), logs, cancel, delete,
// retry, cluster and schedule to root. Call AddGlobalFlags on root as well.
func AddClientCommands(root *cobra.Command) {
	root.AddCommand(
		newSubmitCmd(),
		newGetCmd(),
		newLogsCmd(),
		newCancelCmd(),
		newDeleteCmd(),
		newRetryCmd(),
		newClusterCmd(),
		newScheduleCmd(),
	)
}

// globals are the resolved persistent flags.
type globals struct {
	servers []string
	token   string
	output  string
	tls     *tls.Config // nil: the transport's default
}

// flagOrEnv returns the flag's value if it was given, else the environment
// variable if set, else the flag's default. A missing flag (AddGlobalFlags
// not called) falls back the same way.
func flagOrEnv(cmd *cobra.Command, name, env, def string) string {
	f := cmd.Flag(name)
	if f != nil && f.Changed {
		return f.Value.String()
	}
	if v, ok := os.LookupEnv(env); ok && strings.TrimSpace(v) != "" {
		return v
	}
	if f != nil {
		return f.Value.String()
	}
	return def
}

// clientTLS is the TLS configuration --ca-file, --cert-file and --key-file
// (or their environment) give; nil when none is set.
func clientTLS(cmd *cobra.Command) (*tls.Config, error) {
	ca, cert, key := flagOrEnv(cmd, flagCA, EnvCAFile, ""), flagOrEnv(cmd, flagCert, EnvCertFile, ""), flagOrEnv(cmd, flagKey, EnvKeyFile, "")
	if ca == "" && cert == "" && key == "" {
		return nil, nil
	}
	return tlsfiles.ClientFiles(ca, cert, key)
}

func resolveGlobals(cmd *cobra.Command) (globals, error) {
	var g globals
	for _, s := range strings.Split(flagOrEnv(cmd, flagServer, EnvServer, DefaultServer), ",") {
		if s = client.NormalizeURL(s); s != "" {
			g.servers = append(g.servers, s)
		}
	}
	if len(g.servers) == 0 {
		return g, fmt.Errorf("--server: no URL given")
	}
	g.token = strings.TrimSpace(flagOrEnv(cmd, flagToken, EnvToken, ""))
	var err error
	if g.tls, err = clientTLS(cmd); err != nil {
		return g, err
	}
	g.output = outputTable
	if f := cmd.Flag(flagOutput); f != nil {
		g.output = strings.ToLower(strings.TrimSpace(f.Value.String()))
	}
	switch g.output {
	case outputTable, outputJSON:
	default:
		return g, fmt.Errorf("--output %q: want table or json", g.output)
	}
	return g, nil
}

// setup is the common start of every client command: runtime errors from
// here on are not usage mistakes, so cobra's usage dump is silenced.
func setup(cmd *cobra.Command) (*client.Client, globals, error) {
	cmd.SilenceUsage = true
	g, err := resolveGlobals(cmd)
	if err != nil {
		return nil, g, err
	}
	c := client.New(g.servers, g.token)
	c.UserAgent = "orion-cli"
	if g.tls != nil {
		c.SetTLS(g.tls)
	}
	if clientHook != nil {
		clientHook(c)
	}
	return c, g, nil
}

func printJSON(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// splitTaskRef reads DAG/TASK (one argument) or DAG TASK (two).
func splitTaskRef(args []string) (dagID, taskID string, err error) {
	switch len(args) {
	case 1:
		d, t, ok := strings.Cut(args[0], "/")
		if ok && d != "" && t != "" && !strings.Contains(t, "/") {
			return d, t, nil
		}
	case 2:
		if args[0] != "" && args[1] != "" {
			return args[0], args[1], nil
		}
	}
	return "", "", fmt.Errorf("want DAG/TASK or DAG TASK, got %q", strings.Join(args, " "))
}

func taskRefArgs(cmd *cobra.Command, args []string) error {
	_, _, err := splitTaskRef(args)
	return err
}
