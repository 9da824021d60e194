package podspec

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/orion-sched/orion/internal/model"
)

func TestNameIsAValidShortDNSLabel(t *testing.T) {
	ids := []model.AttemptID{
		{DAG: "d1", Task: "a", Attempt: 1},
		{DAG: "nightly-etl-2026-11-27", Task: "load_warehouse.Tables", Attempt: 3},
		{DAG: strings.Repeat("D", 128), Task: strings.Repeat("t.", 64), Attempt: 123456789},
		{DAG: "___", Task: "...", Attempt: 2},
	}
	at := func(inc string, sub int64, id model.AttemptID) model.Attempt {
		return model.Attempt{AttemptID: id, Incarnation: inc, Submission: sub}
	}
	seen := map[string]bool{}
	for _, id := range ids {
		n := Name(at("INC1", 7, id))
		if errs := validation.IsDNS1123Label(n); len(errs) > 0 {
			t.Errorf("%v: name %q: %v", id, n, errs)
		}
		if seen[n] {
			t.Errorf("%v: name %q given twice", id, n)
		}
		seen[n] = true
		if Name(at("INC1", 7, id)) != n {
			t.Errorf("%v: the name is not a function of the attempt", id)
		}
		if Name(at("INC2", 7, id)) == n {
			t.Errorf("%v: the same name in another incarnation: a wiped etcd would adopt an old pod", id)
		}
		if Name(at("INC1", 9, id)) == n {
			t.Errorf("%v: the same name in another submission: a DAG deleted and submitted again would adopt an old pod", id)
		}
		next := id
		next.Attempt++
		if Name(at("INC1", 7, next)) == n {
			t.Errorf("%v: attempts %d and %d share a pod name", id, id.Attempt, next.Attempt)
		}
	}
	if n := Name(at("INC1", 7, ids[1])); !strings.HasPrefix(n, "nightly-etl-2026-11-27-load-warehouse-tables-3-") {
		t.Errorf("name %q: want the DAG, task and attempt readable at its start", n)
	}
}

func TestBuild(t *testing.T) {
	raw := []byte(`{"image":"busybox:1.36","command":["sh","-c"],"args":["echo $MODE"],
		"env":[{"name":"TOKEN","valueFrom":{"secretKeyRef":{"name":"api","key":"token"}}}],
		"resources":{"limits":{"memory":"64Mi"}},"labels":{"team":"ml"},"nodeSelector":{"disk":"ssd"}}`)
	if p := Validate(raw); len(p) > 0 {
		t.Fatal(p)
	}
	s, err := Decode(raw)
	if err != nil {
		t.Fatal(err)
	}
	a := model.Attempt{AttemptID: model.AttemptID{DAG: "d1", Task: "a", Attempt: 2}, Fence: 7, Incarnation: "INC", Submission: 41,
		Spec: model.Task{ID: "a", Kind: model.KindPod, Timeout: model.Duration(90*time.Second + time.Millisecond), Env: map[string]string{"MODE": "fast", "ORION_ATTEMPT": "99"}}}
	p := Build(a, s, "jobs")
	if p.Name != Name(a) || p.Namespace != "jobs" {
		t.Errorf("pod %s/%s", p.Namespace, p.Name)
	}
	other, resubmitted := a, a
	other.Incarnation, resubmitted.Submission = "OTHER", a.Submission+1
	if !Owns(p, a) || Owns(p, other) || Owns(p, resubmitted) {
		t.Error("Owns does not recognise the pod Build made, or recognises it in another incarnation or submission")
	}
	resubmitted.Spec = model.Task{}
	if q := Build(resubmitted, s, "jobs"); q.Name == p.Name || Owns(q, a) {
		t.Errorf("the same attempt of a DAG submitted again: pod %s, the first's %s", q.Name, p.Name)
	}
	if p.Labels[LabelManagedBy] != ManagedBy || p.Labels["team"] != "ml" || p.Labels[LabelAttempt] != "2" || p.Labels[LabelDAG] != "d1" ||
		p.Labels[LabelSubmission] != "41" || p.Annotations[AnnotationSub] != "41" {
		t.Errorf("labels %v", p.Labels)
	}
	if d := *p.Spec.ActiveDeadlineSeconds; d != 91 {
		t.Errorf("activeDeadlineSeconds %d: want the timeout rounded up to whole seconds (91)", d)
	}
	if p.Spec.RestartPolicy != corev1.RestartPolicyNever || len(p.Spec.Containers) != 1 || p.Spec.Containers[0].Name != Container {
		t.Errorf("spec %+v", p.Spec)
	}
	if *p.Spec.AutomountServiceAccountToken {
		t.Error("a pod task without a serviceAccountName gets an API token")
	}
	c := p.Spec.Containers[0]
	if c.Resources.Limits.Memory().String() != "64Mi" {
		t.Errorf("limits %v", c.Resources.Limits)
	}
	// The task's env, the pod's, then Orion's, which win over a task's own
	// (the kubelet keeps the last of a repeated name).
	var names []string
	last := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		names = append(names, e.Name)
		last[e.Name] = e
	}
	if got := strings.Join(names, " "); got != "MODE ORION_ATTEMPT TOKEN ORION_DAG_ID ORION_TASK_ID ORION_ATTEMPT ORION_LEADER_FENCE ORION_OUTPUTS" {
		t.Errorf("env order %s", got)
	}
	if last["ORION_ATTEMPT"].Value != "2" || last["TOKEN"].ValueFrom.SecretKeyRef.Name != "api" || last[EnvOutputs].Value != OutputsPath {
		t.Errorf("env %v", c.Env)
	}
	if c.TerminationMessagePath != OutputsPath {
		t.Errorf("termination message path %q", c.TerminationMessagePath)
	}
}
