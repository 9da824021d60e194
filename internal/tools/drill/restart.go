package drill

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// RestartMode says how the drill brings a killed replica back.
type RestartMode string

const (
	// RestartAuto re-executes the killed process's saved argv with its saved
	// working directory and environment, detached in a new session.
	RestartAuto RestartMode = "auto"
	// RestartScript runs `test/cluster.sh restart NAME`.
	RestartScript RestartMode = "script"
	// RestartNone leaves the replica down (something else restarts it).
	RestartNone RestartMode = "none"
)

// ParseRestartMode reads --restart.
func ParseRestartMode(s string) (RestartMode, error) {
	switch m := RestartMode(strings.ToLower(strings.TrimSpace(s))); m {
	case RestartAuto, RestartScript, RestartNone:
		return m, nil
	}
	return "", fmt.Errorf("--restart %q: want auto, script or none", s)
}

// RestartSpec is how to start a killed replica again.
type RestartSpec struct {
	Path    string   // the program to execute
	Argv    []string // its arguments, argv[0] included, as the original had them
	Dir     string
	Env     []string
	LogPath string // stdout and stderr are appended here
}

// BuildRestart turns a saved process into a RestartSpec. Output goes to the
// file the original's stdout went to when that was a regular file (so the
// replica's log continues where it was), else to workDir/NAME.log.
func BuildRestart(p *ProcInfo, name, workDir string) (RestartSpec, error) {
	if p == nil || len(p.Argv) == 0 {
		return RestartSpec{}, errors.New("no command line was saved")
	}
	if p.Cwd == "" || strings.HasSuffix(p.Cwd, deletedSuffix) {
		return RestartSpec{}, fmt.Errorf("the working directory %q of pid %d no longer exists", p.Cwd, p.PID)
	}
	path, err := resolveProgram(p.Exe, p.Argv[0], p.Cwd, envValue(p.Env, "PATH"))
	if err != nil {
		return RestartSpec{}, err
	}
	env := append([]string{}, p.Env...) // never nil: nil would mean "inherit the drill's"
	return RestartSpec{
		Path:    path,
		Argv:    append([]string(nil), p.Argv...),
		Dir:     p.Cwd,
		Env:     env,
		LogPath: chooseLog(p.Stdout, p.StdoutRegular, workDir, name),
	}, nil
}

// chooseLog picks where a restarted replica writes.
func chooseLog(stdout string, regular bool, workDir, name string) string {
	if regular && filepath.IsAbs(stdout) && !strings.HasSuffix(stdout, deletedSuffix) {
		return stdout
	}
	return filepath.Join(workDir, safeName(name)+".log")
}

// safeName keeps a replica name usable as a file name.
func safeName(name string) string {
	if name == "" {
		return "replica"
	}
	return strings.Map(func(r rune) rune {
		if r == '/' || r == 0 || r == os.PathSeparator {
			return '_'
		}
		return r
	}, name)
}

// resolveProgram finds the binary to execute: the original's executable
// (/proc/PID/exe) when it still exists, else argv[0] as the original's
// shell would have found it (relative to its working directory when it has
// a slash, else on its PATH).
func resolveProgram(exe, argv0, cwd, pathEnv string) (string, error) {
	if exe != "" && !strings.HasSuffix(exe, deletedSuffix) && isExecutable(exe) {
		return exe, nil
	}
	if argv0 == "" {
		return "", errors.New("empty argv[0]")
	}
	if strings.Contains(argv0, "/") {
		p := argv0
		if !filepath.IsAbs(p) {
			p = filepath.Join(cwd, p)
		}
		if isExecutable(p) {
			return p, nil
		}
		return "", fmt.Errorf("%s is not an executable file", p)
	}
	for _, dir := range filepath.SplitList(pathEnv) {
		if dir == "" {
			dir = "."
		}
		if !filepath.IsAbs(dir) {
			dir = filepath.Join(cwd, dir)
		}
		if p := filepath.Join(dir, argv0); isExecutable(p) {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found on the saved PATH %q", argv0, pathEnv)
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

func envValue(env []string, key string) string {
	for i := len(env) - 1; i >= 0; i-- { // the last one wins, as in getenv
		if k, v, ok := strings.Cut(env[i], "="); ok && k == key {
			return v
		}
	}
	return ""
}

// started is a replica the drill started; done yields its exit.
type started struct {
	pid  int
	done <-chan error
}

// startDetached starts spec in its own session with stdin from /dev/null and
// stdout and stderr appended to spec.LogPath. The child is reaped while the
// drill runs and outlives it.
func startDetached(spec RestartSpec, header string) (*started, error) {
	if err := os.MkdirAll(filepath.Dir(spec.LogPath), 0o755); err != nil {
		return nil, err
	}
	log, err := os.OpenFile(spec.LogPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening the log %s: %w", spec.LogPath, err)
	}
	defer log.Close() // the child has its own copy once started
	if header != "" {
		fmt.Fprintf(log, "\n=== %s %s\n", time.Now().Format("2006-01-02 15:04:05"), header)
	}
	cmd := &exec.Cmd{
		Path:        spec.Path,
		Args:        spec.Argv,
		Dir:         spec.Dir,
		Env:         spec.Env,
		Stdout:      log,
		Stderr:      log,
		SysProcAttr: &syscall.SysProcAttr{Setsid: true},
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", spec.Path, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	return &started{pid: cmd.Process.Pid, done: done}, nil
}

// clusterDirOf recognises test/cluster.sh's layout, where a process runs in
// DIR/data/NAME, and returns DIR.
func clusterDirOf(cwd, name string) (string, bool) {
	if name == "" || filepath.Base(cwd) != name {
		return "", false
	}
	data := filepath.Dir(cwd)
	if filepath.Base(data) != "data" {
		return "", false
	}
	dir := filepath.Dir(data)
	if fi, err := os.Stat(filepath.Join(dir, "pids")); err != nil || !fi.IsDir() {
		return "", false
	}
	return dir, true
}

// updatePidFile rewrites DIR/pids/NAME.pid with newPID when it holds oldPID,
// so test/cluster.sh keeps managing (and `down` stops) a replica the drill
// restarted by itself. It reports whether it did.
func updatePidFile(dir, name string, oldPID, newPID int) (bool, error) {
	f := filepath.Join(dir, "pids", name+".pid")
	b, err := os.ReadFile(f)
	if err != nil {
		return false, nil
	}
	if strings.TrimSpace(string(b)) != strconv.Itoa(oldPID) {
		return false, nil
	}
	tmp := f + ".drill"
	if err := os.WriteFile(tmp, []byte(strconv.Itoa(newPID)+"\n"), 0o644); err != nil {
		return false, err
	}
	return true, os.Rename(tmp, f)
}

// findScript locates test/cluster.sh: the explicit path, else relative to
// this process's working directory, to the drill binary, to the killed
// replica's binary, or next to test/cluster.sh's DIR.
func findScript(explicit string, killed *ProcInfo, clusterDir string) (string, error) {
	if explicit != "" {
		if fi, err := os.Stat(explicit); err != nil || !fi.Mode().IsRegular() {
			return "", fmt.Errorf("--cluster-script %s: not a file", explicit)
		}
		return filepath.Abs(explicit)
	}
	var cands []string
	cands = append(cands, filepath.Join("test", "cluster.sh"))
	if self, err := os.Executable(); err == nil {
		cands = append(cands, filepath.Join(filepath.Dir(self), "..", "test", "cluster.sh"))
	}
	if killed != nil && killed.Exe != "" {
		exe := strings.TrimSuffix(killed.Exe, deletedSuffix)
		cands = append(cands, filepath.Join(filepath.Dir(exe), "..", "test", "cluster.sh"))
	}
	if clusterDir != "" {
		cands = append(cands, filepath.Join(clusterDir, "..", "test", "cluster.sh"))
	}
	for _, c := range cands {
		if fi, err := os.Stat(c); err == nil && fi.Mode().IsRegular() {
			return filepath.Abs(c)
		}
	}
	return "", fmt.Errorf("cannot find test/cluster.sh (looked at %s); pass --cluster-script", strings.Join(cands, ", "))
}

// scriptEnv is the environment for `cluster.sh restart NAME`. When the
// replica ran in the script's layout, the settings `up` was given are
// recovered where they are not set: ORION_CLUSTER_DIR (the layout's DIR)
// and ORION_CLUSTER_BASE_PORT (the script puts server nK's API on
// BASE+80+K), so the script checks readiness on the right port.
func scriptEnv(env []string, name, clusterDir, apiURL string) []string {
	has := func(k string) bool { return envValue(env, k) != "" }
	out := append([]string(nil), env...)
	if clusterDir == "" {
		return out
	}
	if !has("ORION_CLUSTER_DIR") {
		out = append(out, "ORION_CLUSTER_DIR="+clusterDir)
	}
	if !has("ORION_CLUSTER_BASE_PORT") {
		k, err := strconv.Atoi(strings.TrimPrefix(name, "n"))
		u, uerr := url.Parse(apiURL)
		if strings.HasPrefix(name, "n") && err == nil && k >= 1 && uerr == nil {
			if port, err := strconv.Atoi(u.Port()); err == nil && port-80-k >= 1024 {
				out = append(out, "ORION_CLUSTER_BASE_PORT="+strconv.Itoa(port-80-k))
			}
		}
	}
	return out
}

// runScript runs `script restart NAME` with env, output appended to
// logPath.
func runScript(ctx context.Context, script, name string, env []string, logPath string) error {
	log, err := os.OpenFile(logPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer log.Close()
	fmt.Fprintf(log, "\n=== %s %s restart %s\n", time.Now().Format("2006-01-02 15:04:05"), script, name)
	cmd := exec.CommandContext(ctx, script, "restart", name)
	if !isExecutable(script) {
		cmd = exec.CommandContext(ctx, "bash", script, "restart", name)
	}
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Env = env
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s restart %s: %w (output in %s)", script, name, err, logPath)
	}
	return nil
}
