package podspec

import (
	"crypto/sha256"
	"encoding/base32"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/orion-sched/orion/internal/model"
)

// Labels and annotations Orion puts on every pod it creates. The labels
// select them (a worker's sweep of finished pods, an operator's kubectl);
// the annotations say whose attempt a pod is in full, since label values
// are limited to 63 characters.
const (
	LabelManagedBy   = "app.kubernetes.io/managed-by"
	ManagedBy        = "orion"
	LabelIncarnation = "orion.io/incarnation"
	LabelDAG         = "orion.io/dag"
	LabelTask        = "orion.io/task"
	LabelAttempt     = "orion.io/attempt"
	LabelSubmission  = "orion.io/submission"
	AnnotationDAG    = "orion.io/dag"
	AnnotationTask   = "orion.io/task"
	AnnotationInc    = "orion.io/incarnation"
	AnnotationSub    = "orion.io/submission"
	// Selector selects the pods of Orion's pod tasks.
	Selector = LabelManagedBy + "=" + ManagedBy
	// Container is the name of a pod task's one container.
	Container = "main"
)

// Variables every pod task's container gets.
const (
	EnvDAG     = "ORION_DAG_ID"
	EnvTask    = "ORION_TASK_ID"
	EnvAttempt = "ORION_ATTEMPT"
	EnvFence   = "ORION_LEADER_FENCE"
	// EnvOutputs names the file where a pod task writes its outputs
	// (key=value lines or a JSON object): the container's termination
	// message, which Kubernetes keeps in the pod's status, bounded to
	// 4 KiB, after the container ends. The worker reads it from there.
	EnvOutputs = "ORION_OUTPUTS"
	// OutputsPath is the container's termination message path.
	OutputsPath = "/dev/termination-log"
)

// Name is the name of attempt a's pod: a function of the keyspace's
// incarnation, the DAG's submission and the attempt's identity only, so
// that whoever creates or adopts the attempt's pod (its worker, a worker
// that takes it over, the same worker after a restart) names the same pod,
// and the API server's uniqueness of names makes "create if absent" safe
// however often it is tried. A wiped etcd starts a new incarnation, and a
// DAG deleted and submitted again a new submission: their attempt 1 of a
// DAG with an old id is another pod.
//
// The name is at most 63 characters (a pod's hostname is its name, cut
// there), lower case: a readable part made of the DAG and task ids and the
// attempt number, then 16 characters (80 bits) of a hash of the whole
// identity, which alone tells attempts apart.
func Name(a model.Attempt) string {
	id := a.AttemptID
	h := sha256.Sum256([]byte(a.Incarnation + "\x00" + strconv.FormatInt(a.Submission, 10) + "\x00" +
		id.DAG + "\x00" + id.Task + "\x00" + strconv.Itoa(id.Attempt)))
	hash := strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(h[:10]))
	attempt := strconv.Itoa(id.Attempt)
	// 63 = dag + "-" + task + "-" + attempt + "-" + hash(16)
	room := 63 - len(hash) - len(attempt) - 3
	dag, task := dnsPart(id.DAG), dnsPart(id.Task)
	if room < 2 {
		dag, task = "", ""
	}
	for len(dag)+len(task) > room {
		if len(dag) >= len(task) {
			dag = strings.TrimRight(dag[:len(dag)-1], "-")
		} else {
			task = strings.TrimRight(task[:len(task)-1], "-")
		}
	}
	parts := make([]string, 0, 4)
	for _, s := range []string{dag, task, attempt, hash} {
		if s != "" {
			parts = append(parts, s)
		}
	}
	return strings.Join(parts, "-")
}

// dnsPart lowers an id to the characters a pod name may hold: letters and
// digits, anything else a '-', none at either end.
func dnsPart(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9':
			b.WriteByte(c)
		case 'A' <= c && c <= 'Z':
			b.WriteByte(c + 'a' - 'A')
		default:
			if b.Len() > 0 && !strings.HasSuffix(b.String(), "-") {
				b.WriteByte('-')
			}
		}
	}
	return strings.Trim(b.String(), "-")
}

// Build returns the pod of attempt a, whose task's `pod` is s, in
// namespace ns. Its deadline (activeDeadlineSeconds) is the task's
// timeout, counted by the kubelet from the pod's start. Its environment is
// the task's env (plain values), then the pod's env (values and references
// to Secrets and ConfigMaps, which the kubelet resolves: their values
// never pass through Orion), then the ORION_* variables, which win.
func Build(a model.Attempt, s *Spec, ns string) *corev1.Pod {
	labels := map[string]string{}
	for k, v := range s.Labels {
		labels[k] = v
	}
	labels[LabelManagedBy] = ManagedBy
	labels[LabelAttempt] = strconv.Itoa(a.Attempt)
	labels[LabelSubmission] = strconv.FormatInt(a.Submission, 10)
	if labelValue(a.Incarnation) {
		labels[LabelIncarnation] = a.Incarnation
	}
	if labelValue(a.DAG) {
		labels[LabelDAG] = a.DAG
	}
	if labelValue(a.Task) {
		labels[LabelTask] = a.Task
	}
	annotations := map[string]string{}
	for k, v := range s.Annotations {
		annotations[k] = v
	}
	annotations[AnnotationDAG] = a.DAG
	annotations[AnnotationTask] = a.Task
	annotations[AnnotationInc] = a.Incarnation
	annotations[AnnotationSub] = strconv.FormatInt(a.Submission, 10)

	env := make([]corev1.EnvVar, 0, len(a.Spec.Env)+len(s.Env)+5)
	keys := make([]string, 0, len(a.Spec.Env))
	for k := range a.Spec.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		env = append(env, corev1.EnvVar{Name: k, Value: a.Spec.Env[k]})
	}
	env = append(env, s.Env...)
	env = append(env,
		corev1.EnvVar{Name: EnvDAG, Value: a.DAG},
		corev1.EnvVar{Name: EnvTask, Value: a.Task},
		corev1.EnvVar{Name: EnvAttempt, Value: strconv.Itoa(a.Attempt)},
		corev1.EnvVar{Name: EnvFence, Value: strconv.FormatInt(a.Fence, 10)},
		corev1.EnvVar{Name: EnvOutputs, Value: OutputsPath})

	c := corev1.Container{
		Name:                     Container,
		Image:                    s.Image,
		ImagePullPolicy:          s.ImagePullPolicy,
		Command:                  s.Command,
		Args:                     s.Args,
		WorkingDir:               s.WorkingDir,
		Env:                      env,
		EnvFrom:                  s.EnvFrom,
		VolumeMounts:             s.VolumeMounts,
		SecurityContext:          s.SecurityContext,
		TerminationMessagePath:   OutputsPath,
		TerminationMessagePolicy: corev1.TerminationMessageReadFile,
	}
	if s.Resources != nil {
		c.Resources = *s.Resources
	}
	deadline := int64((a.Spec.Timeout.D() + time.Second - 1) / time.Second)
	if deadline < 1 {
		deadline = 1
	}
	// A pod task gets an API token only when it names a ServiceAccount:
	// the namespace's default account is nothing a task asked for.
	automount := s.ServiceAccountName != ""
	noLinks := false
	return &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: Name(a), Namespace: ns, Labels: labels, Annotations: annotations},
		Spec: corev1.PodSpec{
			Containers:                   []corev1.Container{c},
			RestartPolicy:                corev1.RestartPolicyNever,
			ActiveDeadlineSeconds:        &deadline,
			Volumes:                      s.Volumes,
			NodeSelector:                 s.NodeSelector,
			Tolerations:                  s.Tolerations,
			Affinity:                     s.Affinity,
			ServiceAccountName:           s.ServiceAccountName,
			AutomountServiceAccountToken: &automount,
			ImagePullSecrets:             s.ImagePullSecrets,
			PriorityClassName:            s.PriorityClassName,
			// Service links add a variable per Service in the namespace:
			// noise in the task's environment, and slower starts.
			EnableServiceLinks: &noLinks,
		},
	}
}

func labelValue(s string) bool { return s != "" && len(validation.IsValidLabelValue(s)) == 0 }

// Owns reports whether pod is attempt a's: the name matches and so do the
// annotations Build wrote. A pod of that name that is not (a hash
// collision, or one made by hand) is never adopted.
func Owns(pod *corev1.Pod, a model.Attempt) bool {
	an := pod.Annotations
	return pod.Name == Name(a) && an[AnnotationDAG] == a.DAG && an[AnnotationTask] == a.Task &&
		an[AnnotationInc] == a.Incarnation && an[AnnotationSub] == strconv.FormatInt(a.Submission, 10) &&
		pod.Labels[LabelAttempt] == strconv.Itoa(a.Attempt)
}
