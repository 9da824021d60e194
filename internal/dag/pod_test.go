package dag

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/orion-sched/orion/internal/model"
)

const podYAML = `
name: train
tasks:
  - id: fetch
    command: echo fetched
  - id: train
    depends_on: [fetch]
    timeout: 10m
    env: {MODE: fast}
    pod:
      image: ghcr.io/acme/train:1.4
      command: [python, train.py]
      args: [--epochs, "3"]
      env:
        - name: API_TOKEN
          valueFrom: {secretKeyRef: {name: api, key: token}}
      envFrom: [{configMapRef: {name: settings}}]
      resources:
        requests: {cpu: 500m, memory: 1024Mi}
        limits: {memory: 2Gi, nvidia.com/gpu: 1}
      volumeMounts: [{name: data, mountPath: /data}]
      volumes: [{name: data, persistentVolumeClaim: {claimName: data}}]
      nodeSelector: {disk: ssd}
      tolerations: [{key: gpu, operator: Exists, effect: NoSchedule}]
      serviceAccountName: trainer
      imagePullSecrets: [{name: regcred}]
      labels: {team: ml}
      annotations: {owner: ana}
`

// The same DAG in JSON, its pod's fields in another order and the memory
// request spelled otherwise: one canonical form, so the two are the same
// submission (idempotent resubmission compares them byte for byte).
const podJSON = `{"name":"train","tasks":[
 {"id":"fetch","command":"echo fetched"},
 {"id":"train","depends_on":["fetch"],"timeout":"10m","env":{"MODE":"fast"},"pod":{
   "annotations":{"owner":"ana"},"labels":{"team":"ml"},
   "imagePullSecrets":[{"name":"regcred"}],"serviceAccountName":"trainer",
   "tolerations":[{"key":"gpu","operator":"Exists","effect":"NoSchedule"}],
   "nodeSelector":{"disk":"ssd"},
   "volumes":[{"name":"data","persistentVolumeClaim":{"claimName":"data"}}],
   "volumeMounts":[{"name":"data","mountPath":"/data"}],
   "resources":{"limits":{"nvidia.com/gpu":"1","memory":"2Gi"},"requests":{"memory":"1Gi","cpu":"0.5"}},
   "envFrom":[{"configMapRef":{"name":"settings"}}],
   "env":[{"name":"API_TOKEN","valueFrom":{"secretKeyRef":{"key":"token","name":"api"}}}],
   "args":["--epochs","3"],"command":["python","train.py"],"image":"ghcr.io/acme/train:1.4"}}]}`

func TestPodTaskParsesInBothFormats(t *testing.T) {
	y, err := Load([]byte(podYAML), "application/yaml", Limits{})
	if err != nil {
		t.Fatal(err)
	}
	j, err := Load([]byte(podJSON), "application/json", Limits{})
	if err != nil {
		t.Fatal(err)
	}
	train := y.Tasks[1]
	if train.Kind != model.KindPod {
		t.Fatalf("kind %q: a task with a pod object and no kind is a pod task", train.Kind)
	}
	if !bytes.Equal(y.Canonical(), j.Canonical()) {
		t.Fatalf("YAML and JSON of one DAG differ:\n%s\n%s", y.Canonical(), j.Canonical())
	}
	var pod map[string]any
	if err := json.Unmarshal(train.Pod, &pod); err != nil {
		t.Fatal(err)
	}
	res := pod["resources"].(map[string]any)
	if got := res["requests"].(map[string]any)["memory"]; got != "1Gi" {
		t.Errorf("memory request stored as %v, want the canonical 1Gi", got)
	}
	if got := res["requests"].(map[string]any)["cpu"]; got != "500m" {
		t.Errorf("cpu request stored as %v, want the canonical 500m", got)
	}
	if req := train.Requires(); req[model.PodsLabel] != "true" {
		t.Errorf("a pod task requires %v; want %s=true among them", req, model.PodsLabel)
	}
	if req := y.Tasks[0].Requires(); req != nil {
		t.Errorf("a shell task requires %v", req)
	}
}

func TestPodTaskErrorsNameTheField(t *testing.T) {
	var selector []string // the most labels a task may require
	for i := range model.MaxLabels {
		selector = append(selector, fmt.Sprintf(`"k%d":"v"`, i))
	}
	base := func(pod string) string {
		return `{"name":"p","tasks":[{"id":"a","kind":"pod","pod":` + pod + `}]}`
	}
	cases := []struct {
		name, body string
		want       []string
	}{
		{"bad quantity", base(`{"image":"busybox","resources":{"limits":{"memory":"2Gx","cpu":"1"}}}`),
			[]string{`task "a": pod.resources.limits.memory: "2Gx" is not a quantity`}},
		{"negative quantity", base(`{"image":"busybox","resources":{"requests":{"cpu":"-1"}}}`),
			[]string{`pod.resources.requests.cpu: "-1" is negative`}},
		{"bad resource name", base(`{"image":"busybox","resources":{"limits":{"gpu":"1"}}}`),
			[]string{`pod.resources.limits: "gpu" is not a resource`}},
		{"bad image", base(`{"image":"Busybox:latest"}`), []string{`pod.image "Busybox:latest" is not an image reference`}},
		{"no image", base(`{"command":["true"]}`), []string{"pod.image is required"}},
		{"unknown field", base(`{"image":"busybox","nodeselector":{}}`), []string{`pod: unknown field "nodeselector"`}},
		{"wrong type", base(`{"image":"busybox","command":"echo hi"}`), []string{"pod.command: cannot be a string (want a list)"}},
		{"mount without volume", base(`{"image":"busybox","volumeMounts":[{"name":"data","mountPath":"/d"}]}`),
			[]string{`pod.volumeMounts[0]: volume "data" is not in pod.volumes`}},
		{"volume without source", base(`{"image":"busybox","volumes":[{"name":"data"}]}`),
			[]string{`pod.volumes[0] (data): want exactly one source`}},
		{"reserved label", base(`{"image":"busybox","labels":{"orion.io/dag":"x"}}`), []string{`pod.labels: "orion.io/dag" is Orion's own`}},
		{"reserved env", base(`{"image":"busybox","env":[{"name":"ORION_ATTEMPT","value":"9"}]}`), []string{"pod.env[0]: ORION_ATTEMPT is set by Orion"}},
		{"secret ref without key", base(`{"image":"busybox","env":[{"name":"T","valueFrom":{"secretKeyRef":{"name":"api"}}}]}`),
			[]string{"pod.env[0].valueFrom.secretKeyRef.key is required"}},
		{"bad toleration", base(`{"image":"busybox","tolerations":[{"key":"a","operator":"In"}]}`), []string{`pod.tolerations[0].operator "In"`}},
		{"bad pull policy", base(`{"image":"busybox","imagePullPolicy":"Sometimes"}`), []string{`pod.imagePullPolicy "Sometimes"`}},
		{"bad service account", base(`{"image":"busybox","serviceAccountName":"Trainer_1"}`), []string{`pod.serviceAccountName "Trainer_1" is not a valid object name`}},
		{"no pod", `{"name":"p","tasks":[{"id":"a","kind":"pod"}]}`, []string{"pod task needs a pod object"}},
		{"shell command on a pod task", `{"name":"p","tasks":[{"id":"a","kind":"pod","command":"echo","pod":{"image":"busybox"}}]}`,
			[]string{"a pod task's command is pod.command"}},
		{"pod on a shell task", `{"name":"p","tasks":[{"id":"a","kind":"shell","command":"true","pod":{"image":"busybox"}}]}`,
			[]string{"pod is for pod tasks (kind: pod), not shell"}},
		{"pod not an object", base(`["busybox"]`), []string{"pod: want an object"}},
		{"selector too large with the pods label", `{"name":"p","tasks":[{"id":"a","kind":"pod","pod":{"image":"busybox"},"selector":{` +
			strings.Join(selector, ",") + `}}]}`, []string{"selector has 32 labels; at most 31"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Load([]byte(c.body), "application/json", Limits{})
			if err == nil {
				t.Fatal("accepted")
			}
			ve := asVE(t, err)
			if ve.Code != CodeInvalid {
				t.Errorf("code %q, want %q", ve.Code, CodeInvalid)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("message %q lacks %q", err, w)
				}
			}
		})
	}
}

// The pod object counts towards the decoded-size budget: YAML aliases
// that repeat a large one are refused as any other large DAG.
func TestPodTaskCountsInTheBudget(t *testing.T) {
	big := strings.Repeat("x", 60<<10)
	var b strings.Builder
	b.WriteString("name: big\ntasks:\n")
	for i := 0; i < 40; i++ {
		b.WriteString("  - id: t" + string(rune('a'+i%26)) + string(rune('a'+i/26)) + "\n    pod: {image: busybox, args: [" + big + "]}\n")
	}
	// 2.4 MB of pod objects, against the budget of a 1 MiB body.
	_, err := Load([]byte(b.String()), "application/yaml", Limits{MaxDecodedBytes: 2 << 20})
	if err == nil {
		t.Fatal("accepted")
	}
	if ve := asVE(t, err); ve.Code != CodeTooLarge {
		t.Fatalf("code %q, want %q: %v", ve.Code, CodeTooLarge, err)
	}
}

// A pod object bigger than its own bound is refused with the bound named.
func TestPodObjectBound(t *testing.T) {
	body := `{"name":"p","tasks":[{"id":"a","pod":{"image":"busybox","args":["` + strings.Repeat("y", 70<<10) + `"]}}]}`
	_, err := Load([]byte(body), "application/json", Limits{})
	if err == nil || !strings.Contains(err.Error(), "the limit is 65536") {
		t.Fatalf("a 70 KiB pod object: %v", err)
	}
}
