package helm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
)

// A fake kubectl for deploy/drill.sh: the test binary itself, run with
// ORION_FAKE_KUBECTL set, sends its arguments to the test (which answers from
// the local cluster of TestFidelity) and prints the answer. It knows the
// kubectl commands drill.sh uses, nothing more:
//
//	get statefulsets|pods -l SELECTOR -o json · get pod|secret NAME -o json
//	port-forward pod/NAME LOCAL:REMOTE · delete pod NAME --grace-period=0 --force
//	debug pod/NAME ... -- kill -QUIT 1
const fakeKubectlEnv = "ORION_FAKE_KUBECTL"

type kubectlAnswer struct {
	Stdout, Stderr string
	Code           int
	Forward        string // port-forward: proxy Listen to this address
	Listen         string
}

// fakeKubectlMain is the fake kubectl process.
func fakeKubectlMain(server string) int {
	body, _ := json.Marshal(os.Args[1:])
	resp, err := http.Post(server, "application/json", bytes.NewReader(body))
	if err != nil {
		fmt.Fprintln(os.Stderr, "fake kubectl:", err)
		return 1
	}
	defer resp.Body.Close()
	var a kubectlAnswer
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
		fmt.Fprintln(os.Stderr, "fake kubectl:", err)
		return 1
	}
	os.Stdout.WriteString(a.Stdout)
	os.Stderr.WriteString(a.Stderr)
	if a.Forward == "" {
		return a.Code
	}
	l, err := net.Listen("tcp", a.Listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fake kubectl port-forward:", err)
		return 1
	}
	fmt.Printf("Forwarding from %s -> %s\n", a.Listen, a.Forward)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				u, err := net.Dial("tcp", a.Forward)
				if err != nil {
					return
				}
				defer u.Close()
				go func() { _, _ = io.Copy(u, c) }()
				_, _ = io.Copy(c, u)
			}()
		}
	}()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	return 0
}

// serveFakeKubectl starts the test's side and returns a directory holding
// a `kubectl` that reaches it.
func (lc *localCluster) serveFakeKubectl() string {
	t := lc.t
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var args []string
		if err := json.NewDecoder(r.Body).Decode(&args); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		a := lc.kubectl(args)
		if a.Code != 0 {
			t.Logf("fake kubectl %v: exit %d: %s", args, a.Code, strings.TrimSpace(a.Stderr))
		}
		_ = json.NewEncoder(w).Encode(a)
	}))
	t.Cleanup(srv.Close)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(lc.root, "fakebin")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	script := fmt.Sprintf("#!/bin/sh\n%s=%s exec %q \"$@\"\n", fakeKubectlEnv, srv.URL, self)
	if err := os.WriteFile(filepath.Join(dir, "kubectl"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func fail(format string, args ...any) kubectlAnswer {
	return kubectlAnswer{Stderr: fmt.Sprintf(format, args...) + "\n", Code: 1}
}

func asJSON(v any) kubectlAnswer {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fail("%v", err)
	}
	return kubectlAnswer{Stdout: string(b) + "\n"}
}

// kubectl answers one fake kubectl command.
func (lc *localCluster) kubectl(args []string) kubectlAnswer {
	var rest []string
	sel, out := "", ""
	for i := 0; i < len(args); i++ {
		switch a := args[i]; {
		case a == "--namespace" || a == "-n":
			if i+1 < len(args) && args[i+1] != namespace {
				return fail("fake kubectl: only namespace %s exists", namespace)
			}
			i++
		case a == "-l":
			i++
			sel = args[i]
		case a == "-o":
			i++
			out = args[i]
		case a == "--":
			rest = append(rest, args[i:]...)
			i = len(args)
		default:
			rest = append(rest, a)
		}
	}
	if len(rest) == 0 {
		return fail("fake kubectl: no command")
	}
	switch rest[0] {
	case "get":
		if out != "json" || len(rest) < 2 {
			return fail("fake kubectl: only `get ... -o json`")
		}
		return lc.kubectlGet(rest[1], rest[2:], sel)
	case "port-forward":
		if len(rest) != 3 {
			return fail("fake kubectl: port-forward pod/NAME LOCAL:REMOTE")
		}
		p := lc.pod(strings.TrimPrefix(rest[1], "pod/"))
		local, remote, _ := strings.Cut(rest[2], ":")
		port, err := strconv.Atoi(remote)
		if p == nil || err != nil {
			return fail("Error from server (NotFound): pods %q not found", rest[1])
		}
		lp, ok := p.ports[int32(port)]
		if !ok {
			return fail("fake kubectl: pod %s has no port %d", p.name, port)
		}
		return kubectlAnswer{Forward: fmt.Sprintf("127.0.0.1:%d", lp), Listen: "127.0.0.1:" + local}
	case "delete":
		if len(rest) < 3 || rest[1] != "pod" {
			return fail("fake kubectl: only delete pod NAME")
		}
		p := lc.pod(rest[2])
		if p == nil {
			return fail("Error from server (NotFound): pods %q not found", rest[2])
		}
		// Force deletion: the object goes now; the kubelet sends SIGTERM,
		// then SIGKILL 2 s later; the StatefulSet recreates the pod (here
		// once the old process is gone: both would bind the same local port).
		p.mu.Lock()
		p.deleted = true
		p.mu.Unlock()
		p.signal(syscall.SIGTERM)
		go func() {
			if p.waitExit(2*time.Second) != nil {
				p.signal(syscall.SIGKILL)
				_ = p.waitExit(5 * time.Second)
			}
			time.Sleep(300 * time.Millisecond)
			p.mu.Lock()
			p.deleted, p.uid, p.restarts = false, "", 0
			p.mu.Unlock()
			if err := p.startProcess(); err != nil {
				lc.t.Errorf("recreating %s: %v", p.name, err)
			}
		}()
		return kubectlAnswer{Stdout: fmt.Sprintf("pod %q force deleted\n", p.name)}
	case "debug":
		// debug pod/NAME --image ... --target C ... -- kill -QUIT 1
		if len(rest) < 2 || !strings.Contains(strings.Join(rest, " "), "-- kill -QUIT 1") {
			return fail("fake kubectl: only debug pod/NAME ... -- kill -QUIT 1")
		}
		p := lc.pod(strings.TrimPrefix(rest[1], "pod/"))
		if p == nil {
			return fail("Error from server (NotFound): pods %q not found", rest[1])
		}
		p.signal(syscall.SIGQUIT)
		go func() {
			_ = p.waitExit(10 * time.Second)
			time.Sleep(300 * time.Millisecond) // the kubelet restarts the container
			p.mu.Lock()
			p.restarts++
			p.mu.Unlock()
			if err := p.startProcess(); err != nil {
				lc.t.Errorf("restarting %s: %v", p.name, err)
			}
		}()
		return kubectlAnswer{}
	}
	return fail("fake kubectl: %q not supported", rest[0])
}

// pod returns a workload pod that exists (not deleted).
func (lc *localCluster) pod(name string) *simPod {
	p := lc.byName[name]
	if p == nil || strings.HasPrefix(p.workload, "Pod/") {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.deleted {
		return nil
	}
	return p
}

func (lc *localCluster) kubectlGet(kind string, names []string, sel string) kubectlAnswer {
	selector, err := labels.Parse(sel)
	if err != nil {
		return fail("bad selector %q: %v", sel, err)
	}
	list := func(items []any) kubectlAnswer {
		return asJSON(map[string]any{"apiVersion": "v1", "kind": "List", "items": items})
	}
	switch kind {
	case "statefulsets", "statefulset", "sts":
		var items []any
		for _, o := range lc.r.All("StatefulSet") {
			s := o.(*appsv1.StatefulSet)
			if selector.Matches(labels.Set(s.Labels)) {
				items = append(items, s)
			}
		}
		return list(items)
	case "secret", "secrets":
		if len(names) != 1 || lc.r.Secret(names[0]) == nil {
			return fail("Error from server (NotFound): secrets %q not found", strings.Join(names, " "))
		}
		return asJSON(lc.r.Secret(names[0]))
	case "pods", "pod":
		if len(names) == 1 {
			p := lc.pod(names[0])
			if p == nil {
				return fail("Error from server (NotFound): pods %q not found", names[0])
			}
			return asJSON(p.apiObject())
		}
		var items []any
		for _, p := range lc.pods {
			if lc.pod(p.name) != nil && selector.Matches(labels.Set(p.labels)) {
				items = append(items, p.apiObject())
			}
		}
		return list(items)
	}
	return fail("fake kubectl: get %s not supported", kind)
}

// apiObject: the pod as the API server would show it; Ready is the
// readiness probe, asked now.
func (p *simPod) apiObject() *corev1.Pod {
	p.mu.Lock()
	uid, restarts := p.uid, p.restarts
	p.mu.Unlock()
	ready := corev1.ConditionFalse
	if p.running() {
		c := &p.spec.Containers[0]
		if u := p.probeURL(c.ReadinessProbe); u != "" {
			cl := &http.Client{Timeout: 2 * time.Second}
			if resp, err := cl.Get(u); err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					ready = corev1.ConditionTrue
				}
			}
		} else {
			ready = corev1.ConditionTrue
		}
	}
	return &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: p.name, Namespace: namespace, UID: types.UID(uid), Labels: p.labels},
		Spec:       *p.spec,
		Status: corev1.PodStatus{
			PodIP:             p.ip,
			Conditions:        []corev1.PodCondition{{Type: corev1.PodReady, Status: ready}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: p.spec.Containers[0].Name, RestartCount: int32(restarts), Ready: ready == corev1.ConditionTrue}},
		},
	}
}

// runDrillScript runs deploy/drill.sh (one drill, 8 tasks) against the
// local cluster through the fake kubectl; it must pass.
func (lc *localCluster) runDrillScript(mode string) {
	t := lc.t
	if _, err := exec.LookPath("jq"); err != nil {
		t.Logf("no jq: deploy/drill.sh not run")
		return
	}
	dir := lc.serveFakeKubectl()
	cmd := exec.Command("bash", filepath.Join(repoRoot, "deploy", "drill.sh"), "--namespace", namespace, "--release", releaseName,
		"--count", "1", "--tasks", "8", "--mode", mode, "--local-port", strconv.Itoa(freePort(t)))
	cmd.Env = append(os.Environ(), "PATH="+dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil || !strings.Contains(out.String(), "verdict: PASS") {
			t.Fatalf("deploy/drill.sh --mode %s: %v\n%s", mode, err, out.String())
		}
	case <-time.After(3 * time.Minute):
		_ = cmd.Process.Kill()
		t.Fatalf("deploy/drill.sh --mode %s: no result after 3m\n%s", mode, out.String())
	}
	t.Logf("deploy/drill.sh --mode %s:\n%s", mode, strings.TrimSpace(out.String()))
}
