package cli

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A 507 storage_full says what it is and prints the etcdctl recipe, and so
// does `orion cluster` when etcd lists a NOSPACE alarm.
func TestStorageFullPrintsTheRecipe(t *testing.T) {
	cleanEnv(t)
	refusal := `{"error":{"code":"storage_full","message":"storage full: etcd is out of space","details":[]}}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.Method == http.MethodPost {
			w.WriteHeader(http.StatusInsufficientStorage)
			_, _ = io.WriteString(w, refusal)
			return
		}
		_, _ = io.WriteString(w, `{"node":"n1","leader":"n1","applied_revision":1,"replicas":[],"workers":[],
			"etcd":{"endpoints":["http://127.0.0.1:2379"],"alarms":[{"member_id":"8e9e05c52164694d","alarm":"NOSPACE","message":"full"}]}}`)
	}))
	t.Cleanup(srv.Close)
	file := filepath.Join(t.TempDir(), "d.yaml")
	if err := os.WriteFile(file, []byte("name: d\ntasks: [{id: a, kind: noop}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := run(t, "", "submit", "-f", file, "--server", srv.URL)
	must(t, r, 2)
	contains(t, "stderr", r.err, "storage full: etcd is out of space", "etcdctl defrag --cluster", "etcdctl alarm disarm")

	r = run(t, "", "cluster", "--server", srv.URL)
	must(t, r, 0)
	contains(t, "stdout", r.out, "etcd alarm: NOSPACE on member 8e9e05c52164694d: full", "etcdctl compact")

	// Orion's own admission limit raised no alarm: no recipe to follow.
	refusal = `{"error":{"code":"storage_full","message":"storage full: ... new work is admitted up to 6.0 MiB (storage_admission_ratio 0.75) ...","details":[]}}`
	r = run(t, "", "submit", "-f", file, "--server", srv.URL)
	must(t, r, 2)
	contains(t, "stderr", r.err, "storage_admission_ratio 0.75")
	if strings.Contains(r.err, "etcdctl") {
		t.Errorf("an admission refusal printed the NOSPACE recipe:\n%s", r.err)
	}
}
