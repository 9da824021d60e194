package helm

import (
	"bufio"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

var dockerfile = filepath.Join(repoRoot, "deploy", "Dockerfile")

var (
	buildOnce sync.Once
	buildDir  string
	buildBin  string
	buildErr  error
)

func TestMain(m *testing.M) {
	if server := os.Getenv(fakeKubectlEnv); server != "" {
		os.Exit(fakeKubectlMain(server)) // this process is deploy/drill.sh's kubectl
	}
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// dockerfileBuildCommand returns the shell command of the Dockerfile's
// `RUN ... go build ...` line.
func dockerfileBuildCommand() (string, error) {
	f, err := os.Open(dockerfile)
	if err != nil {
		return "", err
	}
	defer f.Close()
	var found []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if cmd, ok := strings.CutPrefix(line, "RUN "); ok && strings.Contains(cmd, "go build") {
			if strings.HasSuffix(cmd, "\\") {
				return "", fmt.Errorf("%s: keep the go build RUN on one line (the test runs it as is)", dockerfile)
			}
			found = append(found, cmd)
		}
	}
	if len(found) != 1 {
		return "", fmt.Errorf("%s: want exactly one `RUN ... go build` line, found %d", dockerfile, len(found))
	}
	return found[0], sc.Err()
}

// buildLikeDockerfile runs the Dockerfile's build command from the
// repository root with OUT=dir, as the image build does in /src with
// OUT=/out.
func buildLikeDockerfile() (string, error) {
	buildOnce.Do(func() {
		cmdline, err := dockerfileBuildCommand()
		if err != nil {
			buildErr = err
			return
		}
		buildDir, err = os.MkdirTemp("", "orion-chart-test-")
		if err != nil {
			buildErr = err
			return
		}
		cmd := exec.Command("sh", "-c", cmdline)
		cmd.Dir = repoRoot
		cmd.Env = append(os.Environ(), "OUT="+buildDir)
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("the Dockerfile's build command failed: %s\n%v\n%s", cmdline, err, out)
			return
		}
		buildBin = filepath.Join(buildDir, "orion")
	})
	return buildBin, buildErr
}

// orionBinary is ORION_BIN, or the binary the Dockerfile's command builds.
func orionBinary(t testing.TB) string {
	t.Helper()
	if b := os.Getenv("ORION_BIN"); b != "" {
		abs, err := filepath.Abs(b)
		if err != nil {
			t.Fatal(err)
		}
		return abs
	}
	b, err := buildLikeDockerfile()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestDockerfileBuild: no container engine runs here, so the image's build
// stage is checked by running its exact `go build` command: the binary must
// be static (CGO_ENABLED=0, no ELF interpreter) and run. The runtime stages
// must be non-root.
func TestDockerfileBuild(t *testing.T) {
	bin, err := buildLikeDockerfile()
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s is dynamically linked (it has an ELF interpreter): it would not run on distroless static", bin)
		}
	}
	out, err := exec.Command("go", "version", "-m", bin).CombinedOutput()
	if err != nil {
		t.Fatalf("go version -m: %v\n%s", err, out)
	}
	for _, want := range []string{"CGO_ENABLED=0", "-trimpath=true", "GOOS=linux"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("build settings lack %s:\n%s", want, out)
		}
	}
	if out, err := exec.Command(bin, "--help").CombinedOutput(); err != nil {
		t.Errorf("%s --help: %v\n%s", bin, err, out)
	}
	df, err := os.ReadFile(dockerfile)
	if err != nil {
		t.Fatal(err)
	}
	text := string(df)
	for _, want := range []string{
		"FROM golang:${GO_VERSION} AS build",
		"ARG GO_VERSION=1.26",
		"FROM gcr.io/distroless/static-debian12:nonroot AS server",
		"USER 65532:65532",
		`ENTRYPOINT ["/orion"]`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("deploy/Dockerfile lacks %q", want)
		}
	}
	// The last stage is the default target: the static server image.
	stages := strings.Split(text, "\nFROM ")
	if last := stages[len(stages)-1]; !strings.HasPrefix(last, "gcr.io/distroless/static") || !strings.Contains(last, "USER 65532") {
		t.Errorf("the last (default) stage of deploy/Dockerfile must be distroless static as a non-root user")
	}
	if strings.Count(text, "USER 65532:65532") < 2 {
		t.Errorf("every runtime stage of deploy/Dockerfile must set USER 65532:65532")
	}
}
