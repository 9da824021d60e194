package podspec

import (
	"encoding/json"
	"fmt"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/distribution/reference"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Reserved names: Orion sets them on every pod, and a task's own would
// either be overwritten or make Orion lose track of its pods.
var (
	reservedEnv = map[string]bool{EnvDAG: true, EnvTask: true, EnvAttempt: true, EnvFence: true, EnvOutputs: true}
)

// reservedLabel reports whether a label or annotation key is Orion's.
func reservedLabel(k string) bool {
	return strings.HasPrefix(k, "orion.io/") || k == LabelManagedBy
}

// Validate checks a task's `pod` object and returns every problem found,
// each naming its field ("pod.resources.limits.memory: ..."). Kubernetes
// validates the pod again when a worker creates it; what is checked here is
// what a user gets wrong by hand (names, quantities, references, image),
// so that it is a 400 at submission rather than a failed attempt later.
func Validate(raw []byte) []string {
	var p []string
	add := func(format string, args ...any) { p = append(p, fmt.Sprintf(format, args...)) }
	if len(raw) > MaxBytes {
		add("pod is %d bytes of JSON; the limit is %d (keep large configuration in a ConfigMap the pod mounts)", len(raw), MaxBytes)
		return p
	}
	// Quantities first, from the raw object: decoding them into the
	// Kubernetes types fails on the first bad one without naming it.
	checkQuantities(raw, add)
	if len(p) > 0 {
		return p
	}
	s, err := Decode(raw)
	if err != nil {
		return []string{err.Error()}
	}

	switch {
	case strings.TrimSpace(s.Image) == "":
		add("pod.image is required")
	default:
		if _, err := reference.ParseNormalizedNamed(s.Image); err != nil {
			add("pod.image %q is not an image reference: %v (want such as busybox:1.36, ghcr.io/acme/app:1.4 or ...@sha256:<digest>)", s.Image, err)
		}
	}
	switch s.ImagePullPolicy {
	case "", corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
	default:
		add("pod.imagePullPolicy %q: want Always, IfNotPresent or Never", s.ImagePullPolicy)
	}
	for i, c := range s.Command {
		if strings.ContainsRune(c, 0) {
			add("pod.command[%d] contains a NUL byte", i)
		}
	}
	for i, a := range s.Args {
		if strings.ContainsRune(a, 0) {
			add("pod.args[%d] contains a NUL byte", i)
		}
	}
	if s.WorkingDir != "" && !path.IsAbs(s.WorkingDir) {
		add("pod.workingDir %q: want an absolute path", s.WorkingDir)
	}
	checkEnv(s, add)
	checkVolumes(s, add)
	checkPodFields(s, add)
	return p
}

// checkQuantities reads pod.resources.requests and .limits from the raw
// object and names every value that is not a quantity.
func checkQuantities(raw []byte, add func(string, ...any)) {
	var top map[string]json.RawMessage
	if json.Unmarshal(raw, &top) != nil || top["resources"] == nil {
		return // Decode reports it
	}
	var res map[string]json.RawMessage
	if json.Unmarshal(top["resources"], &res) != nil {
		return
	}
	for _, part := range []string{"requests", "limits"} {
		if res[part] == nil {
			continue
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(res[part], &m); err != nil {
			add("pod.resources.%s: want an object such as {cpu: 500m, memory: 1Gi}", part)
			continue
		}
		for _, name := range sortedKeys(m) {
			field := "pod.resources." + part + "." + name
			var v any
			if json.Unmarshal(m[name], &v) != nil {
				continue
			}
			var text string
			switch x := v.(type) {
			case string:
				text = x
			case float64:
				text = string(m[name])
			default:
				add("%s: want a quantity such as 500m, 2 or 1Gi", field)
				continue
			}
			q, err := resource.ParseQuantity(strings.TrimSpace(text))
			switch {
			case err != nil:
				add("%s: %q is not a quantity (want a number with an optional suffix: 500m, 1.5, 2Gi, 100M)", field, text)
			case q.Sign() < 0:
				add("%s: %q is negative", field, text)
			}
			if msg := resourceName(name); msg != "" {
				add("pod.resources.%s: %q %s", part, name, msg)
			}
		}
	}
}

// resourceName says what is wrong with a resource name, or "".
func resourceName(name string) string {
	switch {
	case name == string(corev1.ResourceCPU), name == string(corev1.ResourceMemory), name == string(corev1.ResourceEphemeralStorage):
		return ""
	case strings.HasPrefix(name, corev1.ResourceHugePagesPrefix):
		if _, err := resource.ParseQuantity(strings.TrimPrefix(name, corev1.ResourceHugePagesPrefix)); err != nil {
			return "is not a hugepages-<size> resource"
		}
		return ""
	case strings.Contains(name, "/"):
		if errs := validation.IsQualifiedName(name); len(errs) > 0 {
			return "is not a valid extended resource name: " + errs[0]
		}
		return ""
	}
	return "is not a resource: want cpu, memory, ephemeral-storage, hugepages-<size> or an extended resource such as nvidia.com/gpu"
}

func checkEnv(s *Spec, add func(string, ...any)) {
	for i, e := range s.Env {
		field := fmt.Sprintf("pod.env[%d]", i)
		switch {
		case e.Name == "":
			add("%s: name is required", field)
		case len(validation.IsEnvVarName(e.Name)) > 0:
			add("%s: %q is not a valid variable name: %s", field, e.Name, validation.IsEnvVarName(e.Name)[0])
		case reservedEnv[e.Name]:
			add("%s: %s is set by Orion", field, e.Name)
		}
		if e.ValueFrom == nil {
			continue
		}
		if e.Value != "" {
			add("%s (%s): give value or valueFrom, not both", field, e.Name)
		}
		vf := e.ValueFrom
		n := 0
		if r := vf.SecretKeyRef; r != nil {
			n++
			checkKeyRef(add, field+".valueFrom.secretKeyRef", r.Name, r.Key)
		}
		if r := vf.ConfigMapKeyRef; r != nil {
			n++
			checkKeyRef(add, field+".valueFrom.configMapKeyRef", r.Name, r.Key)
		}
		if r := vf.FieldRef; r != nil {
			n++
			if r.FieldPath == "" {
				add("%s.valueFrom.fieldRef.fieldPath is required", field)
			}
		}
		if vf.ResourceFieldRef != nil {
			n++
		}
		if vf.FileKeyRef != nil {
			n++
		}
		if n != 1 {
			add("%s.valueFrom: want exactly one of secretKeyRef, configMapKeyRef, fieldRef, resourceFieldRef", field)
		}
	}
	for i, e := range s.EnvFrom {
		field := fmt.Sprintf("pod.envFrom[%d]", i)
		n := 0
		if r := e.SecretRef; r != nil {
			n++
			checkObjectName(add, field+".secretRef.name", r.Name)
		}
		if r := e.ConfigMapRef; r != nil {
			n++
			checkObjectName(add, field+".configMapRef.name", r.Name)
		}
		if n != 1 {
			add("%s: want exactly one of secretRef and configMapRef", field)
		}
		if e.Prefix != "" && len(validation.IsEnvVarName(e.Prefix)) > 0 {
			add("%s.prefix %q is not a valid variable name prefix", field, e.Prefix)
		}
	}
}

func checkKeyRef(add func(string, ...any), field, name, key string) {
	checkObjectName(add, field+".name", name)
	switch {
	case key == "":
		add("%s.key is required", field)
	case len(validation.IsConfigMapKey(key)) > 0:
		add("%s.key %q is invalid: %s", field, key, validation.IsConfigMapKey(key)[0])
	}
}

func checkObjectName(add func(string, ...any), field, name string) {
	switch {
	case name == "":
		add("%s is required", field)
	case len(validation.IsDNS1123Subdomain(name)) > 0:
		add("%s %q is not a valid object name: %s", field, name, validation.IsDNS1123Subdomain(name)[0])
	}
}

func checkVolumes(s *Spec, add func(string, ...any)) {
	names := map[string]bool{}
	for i, v := range s.Volumes {
		field := fmt.Sprintf("pod.volumes[%d]", i)
		switch {
		case v.Name == "":
			add("%s.name is required", field)
		case len(validation.IsDNS1123Label(v.Name)) > 0:
			add("%s.name %q is invalid: %s", field, v.Name, validation.IsDNS1123Label(v.Name)[0])
		case names[v.Name]:
			add("%s: volume %q is declared twice", field, v.Name)
		}
		names[v.Name] = true
		// Exactly one source: the set fields of VolumeSource, as JSON.
		var src map[string]json.RawMessage
		b, _ := json.Marshal(v.VolumeSource)
		_ = json.Unmarshal(b, &src)
		if len(src) != 1 {
			add("%s (%s): want exactly one source (persistentVolumeClaim, configMap, secret, emptyDir, hostPath...), got %d", field, v.Name, len(src))
		}
	}
	paths := map[string]bool{}
	for i, m := range s.VolumeMounts {
		field := fmt.Sprintf("pod.volumeMounts[%d]", i)
		switch {
		case m.Name == "":
			add("%s.name is required", field)
		case !names[m.Name]:
			add("%s: volume %q is not in pod.volumes", field, m.Name)
		}
		switch {
		case !path.IsAbs(m.MountPath):
			add("%s.mountPath %q: want an absolute path", field, m.MountPath)
		case paths[path.Clean(m.MountPath)]:
			add("%s.mountPath %q is mounted twice", field, m.MountPath)
		}
		paths[path.Clean(m.MountPath)] = true
	}
}

func checkPodFields(s *Spec, add func(string, ...any)) {
	for _, k := range sortedKeys(s.NodeSelector) {
		checkLabel(add, "pod.nodeSelector", k, s.NodeSelector[k], false)
	}
	for _, k := range sortedKeys(s.Labels) {
		checkLabel(add, "pod.labels", k, s.Labels[k], true)
	}
	for _, k := range sortedKeys(s.Annotations) {
		switch {
		case len(validation.IsQualifiedName(strings.ToLower(k))) > 0:
			add("pod.annotations: key %q is invalid: %s", k, validation.IsQualifiedName(strings.ToLower(k))[0])
		case reservedLabel(k):
			add("pod.annotations: %q is Orion's own (orion.io/ and %s are reserved)", k, LabelManagedBy)
		}
	}
	for i, t := range s.Tolerations {
		field := fmt.Sprintf("pod.tolerations[%d]", i)
		switch t.Operator {
		case "", corev1.TolerationOpEqual:
			if t.Key == "" {
				add("%s: operator Equal needs a key", field)
			}
		case corev1.TolerationOpExists:
			if t.Value != "" {
				add("%s: operator Exists takes no value", field)
			}
		default:
			add("%s.operator %q: want Equal or Exists", field, t.Operator)
		}
		if t.Key != "" && len(validation.IsQualifiedName(t.Key)) > 0 {
			add("%s.key %q is invalid: %s", field, t.Key, validation.IsQualifiedName(t.Key)[0])
		}
		switch t.Effect {
		case "", corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
		default:
			add("%s.effect %q: want NoSchedule, PreferNoSchedule or NoExecute", field, t.Effect)
		}
	}
	if s.ServiceAccountName != "" {
		checkObjectName(add, "pod.serviceAccountName", s.ServiceAccountName)
	}
	if s.PriorityClassName != "" {
		checkObjectName(add, "pod.priorityClassName", s.PriorityClassName)
	}
	for i, r := range s.ImagePullSecrets {
		checkObjectName(add, "pod.imagePullSecrets["+strconv.Itoa(i)+"].name", r.Name)
	}
}

func checkLabel(add func(string, ...any), field, k, v string, own bool) {
	if errs := validation.IsQualifiedName(k); len(errs) > 0 {
		add("%s: key %q is invalid: %s", field, k, errs[0])
		return
	}
	if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
		add("%s: %s=%q: the value is invalid: %s", field, k, v, errs[0])
	}
	if own && reservedLabel(k) {
		add("%s: %q is Orion's own (orion.io/ and %s are reserved)", field, k, LabelManagedBy)
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
