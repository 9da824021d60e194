package api

import (
	"net/http"
	"strings"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/orion-sched/orion/internal/engine"
	"github.com/orion-sched/orion/internal/store"
)

// etcd at its quota: 507 storage_full, a known outcome (not 503's "unknown;
// retry"), with a message that names the quota and what to do.
func TestStorageFullIs507(t *testing.T) {
	e := newEnv(t, nil)
	e.f.set(func(f *fakeBackend) {
		f.submitErr = &engine.StorageFullError{DAG: "d1",
			Cause: &store.NoSpaceError{Quota: 4 << 30, DBSize: 4 << 30, Cause: rpctypes.ErrNoSpace}}
	})
	r := e.do(t, "POST", "/api/v1/dags", okDAG)
	info := r.wantError(t, http.StatusInsufficientStorage, "storage_full")
	for _, want := range []string{"quota-backend-bytes 4294967296", "4096.0 MiB", "was not written", "defrag", "alarm disarm"} {
		if !strings.Contains(info.Message, want) {
			t.Errorf("message lacks %q: %s", want, info.Message)
		}
	}
	if r.header.Get("Retry-After") == "" {
		t.Error("no Retry-After")
	}
}
