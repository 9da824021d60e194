// Package podspec is what a pod task is, in Kubernetes terms: the `pod`
// object of a task (Spec), its validation at submission, its one canonical
// JSON form, the name of an attempt's pod and the Pod object a worker
// creates for it. It does no I/O: the DAG parser and validator use it as
// well as the worker.
//
// A task's `pod` is spelled as a Kubernetes Pod spells the same fields, so
// that what users write is what they would write in a manifest: the
// container's (image, command, args, env, envFrom, resources,
// volumeMounts, workingDir, imagePullPolicy, securityContext) and the
// pod's (volumes, nodeSelector, tolerations, affinity, serviceAccountName,
// imagePullSecrets, priorityClassName, labels, annotations) in one object.
// Each attempt is one pod with one container, "main", that is never
// restarted: retries are Orion's.
package podspec

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	kjson "sigs.k8s.io/json"
)

// Spec is a pod task's `pod` object.
type Spec struct {
	// The container.
	Image           string                       `json:"image"`
	ImagePullPolicy corev1.PullPolicy            `json:"imagePullPolicy,omitempty"`
	Command         []string                     `json:"command,omitempty"`
	Args            []string                     `json:"args,omitempty"`
	WorkingDir      string                       `json:"workingDir,omitempty"`
	Env             []corev1.EnvVar              `json:"env,omitempty"`
	EnvFrom         []corev1.EnvFromSource       `json:"envFrom,omitempty"`
	Resources       *corev1.ResourceRequirements `json:"resources,omitempty"`
	VolumeMounts    []corev1.VolumeMount         `json:"volumeMounts,omitempty"`
	SecurityContext *corev1.SecurityContext      `json:"securityContext,omitempty"`

	// The pod.
	Volumes            []corev1.Volume               `json:"volumes,omitempty"`
	NodeSelector       map[string]string             `json:"nodeSelector,omitempty"`
	Tolerations        []corev1.Toleration           `json:"tolerations,omitempty"`
	Affinity           *corev1.Affinity              `json:"affinity,omitempty"`
	ServiceAccountName string                        `json:"serviceAccountName,omitempty"`
	ImagePullSecrets   []corev1.LocalObjectReference `json:"imagePullSecrets,omitempty"`
	PriorityClassName  string                        `json:"priorityClassName,omitempty"`
	Labels             map[string]string             `json:"labels,omitempty"`
	Annotations        map[string]string             `json:"annotations,omitempty"`
}

// MaxBytes bounds a task's `pod` object as stored (canonical JSON): a pod
// spec that needs more is better kept in a ConfigMap it mounts.
const MaxBytes = 64 << 10

// Decode reads a `pod` object strictly: an unknown field (a typo, or a
// Pod field pod tasks do not take) is an error, as the DAG's own fields.
func Decode(raw []byte) (*Spec, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, errors.New("pod: want an object with at least an image")
	}
	// Kubernetes' own decoder: field names match case-sensitively, as the
	// API server matches them (encoding/json would take "nodeselector"
	// for nodeSelector), and unknown and repeated fields are reported.
	var s Spec
	strict, err := kjson.UnmarshalStrict(raw, &s, kjson.DisallowDuplicateFields, kjson.DisallowUnknownFields)
	if err != nil {
		return nil, decodeError(err)
	}
	if len(strict) > 0 {
		msgs := make([]string, 0, len(strict))
		for _, e := range strict {
			msgs = append(msgs, strings.TrimPrefix(e.Error(), "json: "))
		}
		return nil, fmt.Errorf("pod: %s (pod tasks take a Kubernetes container's and pod's fields, spelled as there: image, command, args, env, envFrom, resources, volumeMounts, volumes, nodeSelector, tolerations, affinity, serviceAccountName, imagePullSecrets, labels, annotations...)", strings.Join(msgs, "; "))
	}
	return &s, nil
}

// decodeError says what encoding/json found, in the DAG file's terms:
// "pod.env[0].value: ..." rather than Go's struct names.
func decodeError(err error) error {
	var typ *json.UnmarshalTypeError
	if errors.As(err, &typ) {
		field := typ.Field
		if field == "" {
			return fmt.Errorf("pod: want an object, got %s", typ.Value)
		}
		return fmt.Errorf("pod.%s: cannot be a %s (want %s)", field, typ.Value, goTypeName(typ.Type.String()))
	}
	return fmt.Errorf("pod: %s", strings.TrimPrefix(err.Error(), "json: "))
}

// goTypeName turns a Go type into a word a user reads.
func goTypeName(t string) string {
	switch {
	case strings.HasPrefix(t, "[]"):
		return "a list"
	case strings.HasPrefix(t, "map["):
		return "an object"
	case t == "string" || strings.HasSuffix(t, "PullPolicy") || strings.HasSuffix(t, "Operator") || strings.HasSuffix(t, "Effect"):
		return "a string"
	case strings.HasPrefix(t, "int") || strings.HasPrefix(t, "uint") || strings.HasPrefix(t, "float"):
		return "a number"
	case t == "bool":
		return "true or false"
	}
	return "an object"
}

// Canonical returns the one JSON form of a valid `pod` object: fields in
// Spec's order, maps sorted, quantities in their canonical spelling. Two
// submissions of the same DAG then compare equal however their pods were
// written (YAML or JSON, any order), which idempotent submission needs.
func Canonical(raw []byte) (json.RawMessage, error) {
	s, err := Decode(raw)
	if err != nil {
		return nil, err
	}
	return json.Marshal(s)
}
