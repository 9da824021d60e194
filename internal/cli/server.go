package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/viper"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/orion-sched/orion/internal/config"
	"github.com/orion-sched/orion/internal/server"
)

func newServerCmd() *cobra.Command {
	v := viper.New()
	var printConfig bool
	cmd := &cobra.Command{
		Use:   "server",
		Short: "Run a scheduler replica (embeds a single etcd member when no --etcd-endpoints)",
		Example: `  # One node, everything on 127.0.0.1 (API on :8080, etcd on :2379)
  orion server

  # A replica of a cluster on an existing etcd
  orion server --name n2 --listen 127.0.0.1:8082 --etcd-endpoints http://127.0.0.1:2379

  # Show the resolved configuration (defaults < config file < ORION_* env < flags)
  ORION_SLOTS=8 orion server --print-config`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			hideCredentials()
			file, _ := cmd.Flags().GetString("config")
			cfg, used, err := config.LoadServer(v, file)
			if printConfig {
				out, _ := json.MarshalIndent(cfg, "", "  ")
				fmt.Fprintln(cmd.OutOrStdout(), string(out))
				if used != "" {
					fmt.Fprintln(cmd.ErrOrStderr(), "config file:", used)
				}
				return err
			}
			if err != nil {
				return err
			}
			log, err := newLogger(cfg.LogLevel, cfg.LogFormat)
			if err != nil {
				return err
			}
			defer log.Sync()
			return runServer(cfg, used, log)
		},
	}
	config.BindServerFlags(cmd.Flags(), v)
	cmd.Flags().BoolVar(&printConfig, "print-config", false, "print the resolved configuration as JSON and exit")
	return cmd
}

func runServer(cfg config.Server, configFile string, log *zap.Logger) error {
	if configFile != "" {
		log.Info("config file", zap.String("path", configFile))
	}
	host, _, _ := net.SplitHostPort(cfg.Listen)
	if !config.IsLoopbackHost(host) && cfg.AuthToken == "" {
		log.Warn("INSECURE: the API listens beyond loopback without authentication (--insecure-no-auth); anyone who reaches it can run shell commands on this host",
			zap.String("listen", cfg.Listen))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	s, err := server.Start(ctx, cfg, log)
	if err != nil {
		return err
	}
	etcd := "external " + fmt.Sprint(cfg.EtcdEndpoints)
	if s.Member != nil {
		etcd = "embedded, client URL " + s.Member.ClientURL()
	}
	log.Info("orion server started", zap.String("name", cfg.Name), zap.String("api", "http://"+s.HTTPAddr),
		zap.String("etcd", etcd), zap.Int("slots", cfg.Slots))
	if cfg.LogFormat != "json" {
		// For a person at a terminal; with JSON logs every line on stderr
		// stays a JSON object for the log pipeline (the same facts are in
		// the "orion server started" line).
		fmt.Fprintf(os.Stderr, "\n  Orion API     http://%s/api/v1/dags\n  Metrics       http://%s/metrics\n  etcd          %s\n\n", s.HTTPAddr, s.HTTPAddr, etcd)
	}
	select {
	case <-ctx.Done():
		log.Info("shutting down: finishing the commit in flight and resigning leadership")
	case err := <-s.Wait():
		if err != nil {
			log.Error("scheduler stopped", zap.Error(err))
		}
	}
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownGrace)
	defer cancel()
	return s.Shutdown(sctx)
}

func newLogger(level, format string) (*zap.Logger, error) {
	var lvl zapcore.Level
	if err := lvl.Set(level); err != nil {
		return nil, fmt.Errorf("log_level %q: %w", level, err)
	}
	var cfg zap.Config
	if format == "json" {
		cfg = zap.NewProductionConfig()
	} else {
		cfg = zap.NewDevelopmentConfig()
		cfg.EncoderConfig.EncodeLevel = zapcore.CapitalColorLevelEncoder
		cfg.EncoderConfig.EncodeTime = zapcore.TimeEncoderOfLayout(time.TimeOnly)
		cfg.DisableStacktrace = true
	}
	cfg.Level = zap.NewAtomicLevelAt(lvl)
	return cfg.Build()
}
