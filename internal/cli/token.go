package cli

import (
	"bufio"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"

	"github.com/orion-sched/orion/internal/http/auth"
	"github.com/orion-sched/orion/internal/model"
)

func newTokenCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "token",
		Short: "Make tokens for auth_tokens_file",
		Long: `Tokens give people, programs and workers a role of their own: viewer,
operator, admin or worker (docs/security.md). The server's auth_tokens_file
lists them by their SHA-256, never the tokens themselves, and is read again
when it changes: add, rotate or revoke a token by editing it.`,
	}
	cmd.AddCommand(newTokenNewCmd(), newTokenHashCmd())
	return cmd
}

func newTokenNewCmd() *cobra.Command {
	var name, role, labels string
	var workerIDs []string
	cmd := &cobra.Command{
		Use:   "new --name NAME --role ROLE",
		Short: "Make a random token and its auth_tokens_file entry",
		Long: `Prints a new random token on the first line, for its holder (Orion keeps
only its digest: this is the only time it is shown), then the entry to add
under tokens: in auth_tokens_file.`,
		Example: `  orion token new --name ci --role operator
  orion token new --name gpu-workers --role worker --worker-ids 'gpu-*' --labels pool=gpu`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var b [32]byte
			if _, err := rand.Read(b[:]); err != nil {
				return err
			}
			token := fmt.Sprintf("%x", b)
			entry := auth.Token{Name: name, Role: role, SHA256: auth.Digest(token), WorkerIDs: workerIDs}
			if labels != "" {
				l, err := model.ParseLabels(labels)
				if err != nil {
					return fmt.Errorf("--labels: %w", err)
				}
				entry.Labels = l
			}
			doc, err := yaml.Marshal([]auth.Token{entry})
			if err != nil {
				return err
			}
			// The file's own checks, so that a bad entry is said now.
			file, err := yaml.Marshal(map[string][]auth.Token{"tokens": {entry}})
			if err != nil {
				return err
			}
			if _, err := auth.Parse(file); err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			_, err = fmt.Fprintf(out, "%s\n# add under tokens: in auth_tokens_file\n%s", token, doc)
			return err
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "the token's name, in logs and errors (required)")
	cmd.Flags().StringVar(&role, "role", "", "viewer, operator, admin or worker (required)")
	cmd.Flags().StringSliceVar(&workerIDs, "worker-ids", nil, "worker tokens: the worker ids (or patterns, such as gpu-*) its workers may take")
	cmd.Flags().StringVar(&labels, "labels", "", "worker tokens: the labels its workers may claim (key=value,...)")
	_ = cmd.MarkFlagRequired("name")
	_ = cmd.MarkFlagRequired("role")
	return cmd
}

func newTokenHashCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "hash",
		Short: "Print the SHA-256 of a token read from stdin",
		Long: `Reads one token from stdin (its first line) and prints the digest that
auth_tokens_file holds for it: for a token you made yourself.`,
		Example: `  printf %s "$TOKEN" | orion token hash`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			line, err := bufio.NewReader(io.LimitReader(cmd.InOrStdin(), 4096)).ReadString('\n')
			if err != nil && !errors.Is(err, io.EOF) {
				return err
			}
			tok := strings.TrimSpace(line)
			if tok == "" {
				return errors.New("no token on stdin")
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), auth.Digest(tok))
			return err
		},
	}
}
