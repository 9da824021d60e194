// Package kubetest is a fake Kubernetes API for tests: the pods endpoints a
// worker calls (create, get, list, watch, log, delete) over real HTTP, with
// the pods' lives (scheduled, pulling, running, ended, evicted) driven by
// the test as a kubelet would drive them. test/kube runs pod tasks on a real
// cluster; this lets the worker's side be tested in `make test`.
package kubetest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orion-sched/orion/internal/kube"
)

// API is a fake API server of one namespace's pods.
type API struct {
	srv *httptest.Server
	ns  string

	mu      sync.Mutex
	changed *sync.Cond
	rv      int64
	pods    map[string]*corev1.Pod
	history []event // every change, in order
	logs    map[string][]string
	creates map[string]int
	deletes map[string]int
	// FailCreates answers the next N creates 500, after creating the pod
	// (a create whose answer was lost).
	failCreates int
	// OnCreate, when set, is called (without the lock) with each pod
	// created: a test's kubelet.
	OnCreate func(name string)
}

type event struct {
	rv  int64
	typ string
	pod corev1.Pod
}

// New starts a fake API for namespace ns.
func New(ns string) *API {
	a := &API{ns: ns, pods: map[string]*corev1.Pod{}, logs: map[string][]string{}, creates: map[string]int{}, deletes: map[string]int{}}
	a.changed = sync.NewCond(&a.mu)
	a.srv = httptest.NewServer(http.HandlerFunc(a.serve))
	return a
}

// Close stops the server.
func (a *API) Close() {
	a.mu.Lock()
	a.rv = -1 // wakes and ends every watch and log
	a.changed.Broadcast()
	a.mu.Unlock()
	a.srv.CloseClientConnections()
	a.srv.Close()
}

// Client returns a client of the fake API.
func (a *API) Client() *kube.Client { return kube.New(a.srv.URL, a.ns, nil, nil) }

// FailCreates makes the next n creates answer 500 after creating the pod.
func (a *API) FailCreates(n int) {
	a.mu.Lock()
	a.failCreates = n
	a.mu.Unlock()
}

// Creates and Deletes count the requests for a pod.
func (a *API) Creates(name string) int { a.mu.Lock(); defer a.mu.Unlock(); return a.creates[name] }
func (a *API) Deletes(name string) int { a.mu.Lock(); defer a.mu.Unlock(); return a.deletes[name] }

// Pod returns a copy of a pod, if it exists.
func (a *API) Pod(name string) (*corev1.Pod, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	p, ok := a.pods[name]
	if !ok {
		return nil, false
	}
	return p.DeepCopy(), true
}

// Names lists the pods that exist.
func (a *API) Names() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	for n := range a.pods {
		out = append(out, n)
	}
	return out
}

// Update changes a pod as the kubelet would, and tells the watchers.
func (a *API) Update(name string, fn func(p *corev1.Pod)) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	p, ok := a.pods[name]
	if !ok {
		return false
	}
	fn(p)
	a.bumpLocked("MODIFIED", p)
	return true
}

func (a *API) bumpLocked(typ string, p *corev1.Pod) {
	a.rv++
	p.ResourceVersion = strconv.FormatInt(a.rv, 10)
	a.history = append(a.history, event{rv: a.rv, typ: typ, pod: *p.DeepCopy()})
	a.changed.Broadcast()
}

// Run marks the pod's container running.
func (a *API) Run(name string) bool {
	return a.Update(name, func(p *corev1.Pod) {
		p.Status.Phase = corev1.PodRunning
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}}
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main",
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}}}
	})
}

// Finish ends the pod's container with exitCode (reason "" or OOMKilled,
// ...), and termination message msg.
func (a *API) Finish(name string, exitCode int32, reason, msg string) bool {
	return a.Update(name, func(p *corev1.Pod) {
		p.Status.Phase = corev1.PodSucceeded
		if exitCode != 0 {
			p.Status.Phase = corev1.PodFailed
			if reason == "" {
				reason = "Error"
			}
		}
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main",
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: exitCode, Reason: reason, Message: msg,
				FinishedAt: metav1.Now()}}}}
	})
}

// Wait leaves the container waiting, for reason (ImagePullBackOff, ...).
func (a *API) Wait(name, reason, msg string) bool {
	return a.Update(name, func(p *corev1.Pod) {
		p.Status.Phase = corev1.PodPending
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main",
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: msg}}}}
	})
}

// Unschedulable says the scheduler cannot place the pod.
func (a *API) Unschedulable(name, msg string) bool {
	return a.Update(name, func(p *corev1.Pod) {
		p.Status.Phase = corev1.PodPending
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
			Reason: corev1.PodReasonUnschedulable, Message: msg}}
	})
}

// Fail ends the pod with a pod-level reason (Evicted, DeadlineExceeded).
func (a *API) Fail(name, reason, msg string) bool {
	return a.Update(name, func(p *corev1.Pod) {
		p.Status.Phase, p.Status.Reason, p.Status.Message = corev1.PodFailed, reason, msg
		for i := range p.Status.ContainerStatuses {
			if p.Status.ContainerStatuses[i].State.Running != nil {
				p.Status.ContainerStatuses[i].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "Error"}}
			}
		}
	})
}

// Log appends a line to the pod's container log.
func (a *API) Log(name, line string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.logs[name] = append(a.logs[name], time.Now().UTC().Format(time.RFC3339Nano)+" "+line+"\n")
	a.changed.Broadcast()
}

// Remove deletes a pod as someone other than the worker would (kubectl).
func (a *API) Remove(name string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if p, ok := a.pods[name]; ok {
		delete(a.pods, name)
		a.bumpLocked("DELETED", p)
	}
}

func (a *API) status(w http.ResponseWriter, code int, reason metav1.StatusReason, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status: "Failure", Code: int32(code), Reason: reason, Message: msg})
}

func (a *API) serve(w http.ResponseWriter, r *http.Request) {
	prefix := "/api/v1/namespaces/" + a.ns + "/pods"
	if !strings.HasPrefix(r.URL.Path, prefix) {
		a.status(w, 404, metav1.StatusReasonNotFound, "no such path "+r.URL.Path)
		return
	}
	rest := strings.Trim(strings.TrimPrefix(r.URL.Path, prefix), "/")
	name, sub, _ := strings.Cut(rest, "/")
	q := r.URL.Query()
	switch {
	case name == "" && r.Method == http.MethodPost:
		a.create(w, r)
	case name == "" && r.Method == http.MethodGet && q.Get("watch") == "true":
		a.watch(w, r)
	case name == "" && r.Method == http.MethodGet:
		a.list(w, q.Get("labelSelector"))
	case sub == "log" && r.Method == http.MethodGet:
		a.log(w, r, name)
	case sub == "" && r.Method == http.MethodGet:
		a.mu.Lock()
		p, ok := a.pods[name]
		var cp *corev1.Pod
		if ok {
			cp = p.DeepCopy()
		}
		a.mu.Unlock()
		if !ok {
			a.status(w, 404, metav1.StatusReasonNotFound, fmt.Sprintf("pods %q not found", name))
			return
		}
		_ = json.NewEncoder(w).Encode(cp)
	case sub == "" && r.Method == http.MethodDelete:
		a.mu.Lock()
		a.deletes[name]++
		p, ok := a.pods[name]
		if ok {
			delete(a.pods, name)
			a.bumpLocked("DELETED", p)
		}
		a.mu.Unlock()
		if !ok {
			a.status(w, 404, metav1.StatusReasonNotFound, fmt.Sprintf("pods %q not found", name))
			return
		}
		_ = json.NewEncoder(w).Encode(p)
	default:
		a.status(w, 405, metav1.StatusReasonMethodNotAllowed, r.Method+" "+r.URL.Path)
	}
}

func (a *API) create(w http.ResponseWriter, r *http.Request) {
	var p corev1.Pod
	if err := json.NewDecoder(r.Body).Decode(&p); err != nil {
		a.status(w, 400, metav1.StatusReasonBadRequest, err.Error())
		return
	}
	if p.Spec.Containers == nil || p.Name == "" {
		a.status(w, 422, metav1.StatusReasonInvalid, fmt.Sprintf("Pod %q is invalid: spec.containers: Required value", p.Name))
		return
	}
	a.mu.Lock()
	a.creates[p.Name]++
	if _, taken := a.pods[p.Name]; taken {
		a.mu.Unlock()
		a.status(w, 409, metav1.StatusReasonAlreadyExists, fmt.Sprintf("pods %q already exists", p.Name))
		return
	}
	p.Namespace = a.ns
	p.CreationTimestamp = metav1.Now()
	p.Status.Phase = corev1.PodPending
	cp := p.DeepCopy()
	a.pods[p.Name] = cp
	a.bumpLocked("ADDED", cp)
	out := cp.DeepCopy()
	fail := a.failCreates > 0
	if fail {
		a.failCreates--
	}
	onCreate := a.OnCreate
	a.mu.Unlock()
	if onCreate != nil {
		onCreate(p.Name)
	}
	if fail {
		a.status(w, 500, metav1.StatusReasonInternalError, "etcdserver: request timed out")
		return
	}
	w.WriteHeader(201)
	_ = json.NewEncoder(w).Encode(out)
}

func (a *API) list(w http.ResponseWriter, selector string) {
	want := map[string]string{}
	for _, kv := range strings.Split(selector, ",") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			want[k] = v
		}
	}
	a.mu.Lock()
	list := corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: strconv.FormatInt(a.rv, 10)}}
	for _, p := range a.pods {
		match := true
		for k, v := range want {
			if p.Labels[k] != v {
				match = false
			}
		}
		if match {
			list.Items = append(list.Items, *p.DeepCopy())
		}
	}
	a.mu.Unlock()
	_ = json.NewEncoder(w).Encode(&list)
}

// watch streams the changes of one pod (fieldSelector metadata.name=) after
// resourceVersion, until the client goes or timeoutSeconds pass.
func (a *API) watch(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	name := strings.TrimPrefix(q.Get("fieldSelector"), "metadata.name=")
	from, _ := strconv.ParseInt(q.Get("resourceVersion"), 10, 64)
	timeout, _ := strconv.Atoi(q.Get("timeoutSeconds"))
	flusher := w.(http.Flusher)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(200)
	flusher.Flush()
	ctx := r.Context()
	end := time.Now().Add(time.Duration(max(timeout, 1)) * time.Second)
	stop := make(chan struct{})
	defer close(stop)
	go func() { // wake the loop when the client goes or the time is up
		t := time.NewTimer(time.Until(end))
		defer t.Stop()
		select {
		case <-ctx.Done():
		case <-t.C:
		case <-stop:
			return
		}
		a.mu.Lock()
		a.changed.Broadcast()
		a.mu.Unlock()
	}()
	enc := json.NewEncoder(w)
	a.mu.Lock()
	next := 0
	if from == 0 {
		// No version: the pod as it is, then what follows.
		if p, ok := a.pods[name]; ok {
			cp := p.DeepCopy()
			a.mu.Unlock()
			_ = enc.Encode(map[string]any{"type": "ADDED", "object": cp})
			flusher.Flush()
			a.mu.Lock()
		}
		next = len(a.history)
	}
	for {
		for next < len(a.history) && a.history[next].rv <= from && from > 0 {
			next++
		}
		var batch []event
		for ; next < len(a.history); next++ {
			if e := a.history[next]; e.pod.Name == name {
				batch = append(batch, e)
			}
		}
		if len(batch) > 0 {
			a.mu.Unlock()
			for _, e := range batch {
				p := e.pod
				if enc.Encode(map[string]any{"type": e.typ, "object": &p}) != nil {
					return
				}
			}
			flusher.Flush()
			a.mu.Lock()
			continue
		}
		if a.rv < 0 || ctx.Err() != nil || time.Now().After(end) {
			a.mu.Unlock()
			return
		}
		a.changed.Wait()
	}
}

// log serves a container's log, following it while the container runs.
func (a *API) log(w http.ResponseWriter, r *http.Request, name string) {
	q := r.URL.Query()
	follow := q.Get("follow") == "true"
	var since time.Time
	if s := q.Get("sinceTime"); s != "" {
		since, _ = time.Parse(time.RFC3339Nano, s)
	}
	a.mu.Lock()
	p, ok := a.pods[name]
	if !ok {
		a.mu.Unlock()
		a.status(w, 404, metav1.StatusReasonNotFound, fmt.Sprintf("pods %q not found", name))
		return
	}
	if len(p.Status.ContainerStatuses) == 0 || p.Status.ContainerStatuses[0].State.Waiting != nil {
		a.mu.Unlock()
		a.status(w, 400, metav1.StatusReasonBadRequest, fmt.Sprintf("container \"main\" in pod %q is waiting to start", name))
		return
	}
	a.mu.Unlock()
	flusher := w.(http.Flusher)
	w.WriteHeader(200)
	flusher.Flush()
	ctx := r.Context()
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		select {
		case <-ctx.Done():
			a.mu.Lock()
			a.changed.Broadcast()
			a.mu.Unlock()
		case <-stop:
		}
	}()
	sent := 0
	a.mu.Lock()
	defer a.mu.Unlock()
	for {
		lines := a.logs[name]
		for ; sent < len(lines); sent++ {
			l := lines[sent]
			if !since.IsZero() {
				if ts, err := time.Parse(time.RFC3339Nano, strings.SplitN(l, " ", 2)[0]); err == nil && ts.Before(since) {
					continue
				}
			}
			a.mu.Unlock()
			_, err := w.Write([]byte(l))
			flusher.Flush()
			a.mu.Lock()
			if err != nil {
				return
			}
		}
		p, ok := a.pods[name]
		running := ok && len(p.Status.ContainerStatuses) > 0 && p.Status.ContainerStatuses[0].State.Running != nil
		if !follow || !running || a.rv < 0 || ctx.Err() != nil {
			return
		}
		a.changed.Wait()
	}
}
