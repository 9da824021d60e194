package kube_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orion-sched/orion/internal/kube"
	"github.com/orion-sched/orion/internal/kube/kubetest"
)

func pod(name string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app.kubernetes.io/managed-by": "orion"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "busybox"}}}}
}

// The errors a worker decides by: a name taken, a pod gone, a refusal that
// would repeat, and what is worth trying again.
func TestClientErrors(t *testing.T) {
	api := kubetest.New("jobs")
	defer api.Close()
	c := api.Client()
	ctx := context.Background()
	if _, err := c.CreatePod(ctx, pod("a")); err != nil {
		t.Fatal(err)
	}
	_, err := c.CreatePod(ctx, pod("a"))
	if !kube.IsAlreadyExists(err) || kube.Temporary(err) {
		t.Fatalf("a second create: %v (already exists %v, temporary %v)", err, kube.IsAlreadyExists(err), kube.Temporary(err))
	}
	if _, err := c.GetPod(ctx, "nope"); !kube.IsNotFound(err) || kube.Temporary(err) {
		t.Fatalf("get of a missing pod: %v", err)
	}
	if err := c.DeletePod(ctx, "nope", nil); err != nil {
		t.Fatalf("deleting a pod that is gone is no error: %v", err)
	}
	_, err = c.CreatePod(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "b"}})
	var se *kube.StatusError
	if !errors.As(err, &se) || se.Code != 422 || kube.Temporary(err) || !strings.Contains(err.Error(), "is invalid") {
		t.Fatalf("an invalid pod: %v", err)
	}
	if _, err := c.Logs(ctx, "a", kube.LogOptions{Container: "main"}); err == nil || kube.Temporary(err) {
		t.Fatalf("the log of a container not started: %v", err)
	}
	api.FailCreates(1)
	if _, err := c.CreatePod(ctx, pod("c")); !kube.Temporary(err) {
		t.Fatalf("a 500: %v, want temporary", err)
	}
	list, err := c.ListPods(ctx, "app.kubernetes.io/managed-by=orion")
	if err != nil || len(list.Items) != 2 {
		t.Fatalf("list: %v %v", list, err)
	}
}

// A watch the server ends with an ERROR event (an expired resource
// version) returns an error that says so; a watch it ends cleanly, EOF.
func TestWatchEnds(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("fieldSelector") != "metadata.name=a" || r.Header.Get("Authorization") != "Bearer tok" {
			http.Error(w, "bad request", 400)
			return
		}
		io.WriteString(w, `{"type":"MODIFIED","object":{"metadata":{"name":"a","resourceVersion":"7"}}}`+"\n")
		io.WriteString(w, `{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"8"}}}`+"\n")
		if r.URL.Query().Get("resourceVersion") == "1" {
			io.WriteString(w, `{"type":"ERROR","object":{"kind":"Status","code":410,"reason":"Expired","message":"too old resource version: 1 (7)"}}`+"\n")
		}
	}))
	defer srv.Close()
	c := kube.New(srv.URL, "jobs", func() (string, error) { return "tok", nil }, nil)
	for rv, want := range map[string]func(error) bool{
		"1": kube.IsGone,
		"5": func(err error) bool { return errors.Is(err, io.EOF) },
	} {
		w, err := c.WatchPod(context.Background(), "a", rv, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		ev, err := w.Next()
		if err != nil || ev.Type != "MODIFIED" || ev.Pod.ResourceVersion != "7" {
			t.Fatalf("from %s: first event %+v %v", rv, ev, err)
		}
		if _, err := w.Next(); !want(err) {
			t.Fatalf("from %s: the watch ended with %v", rv, err)
		}
		w.Close()
	}
}
