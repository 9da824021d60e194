// Package servertest starts a whole `orion server` in a test's process:
// embedded etcd on free loopback ports, the API on a free port, the real
// wiring of internal/server. Tests that want what users run, in process,
// start it here.
package servertest

import (
	"context"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/orion-sched/orion/internal/config"
	"github.com/orion-sched/orion/internal/server"
	"github.com/orion-sched/orion/internal/testutil/testkit"
)

// Start starts a single node named n1 from the built-in defaults changed by
// mods, waits until it leads, and shuts it down when the test ends. It
// returns the server and its API's base URL.
func Start(t testing.TB, mods ...func(*config.Server)) (*server.Server, string) {
	t.Helper()
	cfg := config.Defaults()
	cfg.Name, cfg.Listen, cfg.DataDir = "n1", "127.0.0.1:0", t.TempDir()
	cfg.EmbeddedClientURL, cfg.EmbeddedPeerURL = testkit.FreeURL(t), testkit.FreeURL(t)
	for _, mod := range mods {
		mod(&cfg)
	}
	s, err := server.Start(context.Background(), cfg, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
	})
	testkit.WaitFor(t, 15*time.Second, "leadership", func() bool { return s.Engine().Status().Leader })
	return s, "http://" + s.HTTPAddr
}
