package server

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/orion-sched/orion/internal/config"
	"github.com/orion-sched/orion/internal/http/auth"
)

// tokensReread is how often the tokens file is read for changes: a revoked
// token stops working within it. A Kubernetes Secret mounted as a volume
// changes by a symlink swap, which only reading the file again sees.
const tokensReread = 2 * time.Second

// loadKeys returns the cluster token's keyring with, when auth_tokens_file
// is set, the file's tokens.
func loadKeys(cfg config.Server, log *zap.Logger) (*auth.Keyring, error) {
	keys := auth.NewKeyring(cfg.AuthToken)
	if cfg.AuthTokensFile == "" {
		return keys, nil
	}
	if err := auth.Load(keys, cfg.AuthTokensFile); err != nil {
		return nil, err
	}
	log.Info("tokens file loaded", zap.String("file", cfg.AuthTokensFile), zap.Int("tokens", keys.Count()))
	return keys, nil
}

// watchTokens keeps keys up to date with the tokens file while ctx lives.
func (s *Server) watchTokens(ctx context.Context, keys *auth.Keyring, cfg config.Server, log *zap.Logger) {
	if cfg.AuthTokensFile == "" {
		return
	}
	go auth.Watch(ctx, keys, cfg.AuthTokensFile, tokensReread, log.Named("tokens"), func(err error) {
		outcome := "loaded"
		if err != nil {
			outcome = "refused"
		}
		s.Metrics.TokenReloads.WithLabelValues(outcome).Inc()
	})
}
