package cluster

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// Bin is the orion binary every process of a cluster runs. Main sets it.
var Bin string

// Main is a test package's TestMain: it takes the binary from ORION_BIN
// (make builds it once for all the packages that need it) or builds one
// into a temporary directory, runs the tests and exits with their status.
func Main(m *testing.M) {
	Bin = os.Getenv("ORION_BIN")
	cleanup := func() {}
	if Bin == "" {
		dir, err := os.MkdirTemp("", "orion-test-bin")
		if err != nil {
			panic(err)
		}
		cleanup = func() { os.RemoveAll(dir) }
		Bin = filepath.Join(dir, "orion")
		cmd := exec.Command("go", "build", "-o", Bin, "./cmd/orion")
		cmd.Dir = RepoRoot()
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			cleanup()
			panic("building orion: " + err.Error())
		}
	}
	code := m.Run()
	cleanup()
	os.Exit(code)
}

// RepoRoot is the repository's top directory.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", "..", ".."))
}

// FilterEnv drops the variables starting with drop: the processes a test
// starts must not pick up the ORION_* settings of whoever runs it.
func FilterEnv(env []string, drop string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		if !strings.HasPrefix(kv, drop) {
			out = append(out, kv)
		}
	}
	return out
}

// Lines counts the lines of the file at path (0 when it does not exist).
func Lines(t testing.TB, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "\n")
}
