// Package helm tests charts/orion and deploy/: every rendered object decodes
// strictly into the Kubernetes API types, the key properties hold for a
// matrix of values files, the schema rejects bad values, the committed
// deploy/ artifacts match the chart, and (TestFidelity) the rendered
// commands form a working cluster when run as local processes.
//
// Run it with `make chart-test` from the repository root, which installs the
// pinned helm into .cache/ and passes it as HELM. ORION_BIN points the
// fidelity test at a built orion binary (default: built here with the exact
// command of deploy/Dockerfile).
package helm

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	kjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

const (
	releaseName = "orion"
	namespace   = "orion"
)

var (
	repoRoot  = mustAbs("../..")
	chartDir  = filepath.Join(repoRoot, "charts", "orion")
	valuesDir = mustAbs("values")
)

func mustAbs(p string) string {
	a, err := filepath.Abs(p)
	if err != nil {
		panic(err)
	}
	return a
}

// helmBin finds helm: $HELM (set by make chart-test), else the newest one
// make chart-test installed under .cache/helm, else helm on PATH.
func helmBin(t testing.TB) string {
	t.Helper()
	if h := os.Getenv("HELM"); h != "" {
		return h
	}
	if m, _ := filepath.Glob(filepath.Join(repoRoot, ".cache", "helm", "*", "helm")); len(m) > 0 {
		sort.Strings(m)
		return m[len(m)-1]
	}
	if h, err := exec.LookPath("helm"); err == nil {
		return h
	}
	t.Fatal("no helm: run `make chart-test` (it installs the pinned helm into .cache/helm) or set HELM")
	return ""
}

// helmTemplate runs `helm template` and returns its stdout, or stderr as
// the error.
func helmTemplate(t testing.TB, args ...string) (string, error) {
	t.Helper()
	full := append([]string{"template", releaseName, chartDir, "--namespace", namespace}, args...)
	cmd := exec.Command(helmBin(t), full...)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("helm %s: %v\n%s", strings.Join(full, " "), err, stderr.String())
	}
	return out.String(), nil
}

// Object is one rendered document: its kind, name, raw YAML and decoded
// form (a typed API object, or *unstructured.Unstructured for CRDs).
type Object struct {
	Kind, Name string
	Raw        []byte
	Obj        runtime.Object
}

// Rendered is the output of one helm template run.
type Rendered struct {
	Objects []Object
	Values  string // the values file, for messages
}

// Get returns the object of that kind and name, or nil.
func (r *Rendered) Get(kind, name string) runtime.Object {
	for _, o := range r.Objects {
		if o.Kind == kind && o.Name == name {
			return o.Obj
		}
	}
	return nil
}

// All returns every object of a kind.
func (r *Rendered) All(kind string) []runtime.Object {
	var out []runtime.Object
	for _, o := range r.Objects {
		if o.Kind == kind {
			out = append(out, o.Obj)
		}
	}
	return out
}

func (r *Rendered) StatefulSet(name string) *appsv1.StatefulSet {
	o, _ := r.Get("StatefulSet", name).(*appsv1.StatefulSet)
	return o
}

func (r *Rendered) Deployment(name string) *appsv1.Deployment {
	o, _ := r.Get("Deployment", name).(*appsv1.Deployment)
	return o
}

func (r *Rendered) Service(name string) *corev1.Service {
	o, _ := r.Get("Service", name).(*corev1.Service)
	return o
}

func (r *Rendered) ConfigMap(name string) *corev1.ConfigMap {
	o, _ := r.Get("ConfigMap", name).(*corev1.ConfigMap)
	return o
}

func (r *Rendered) Secret(name string) *corev1.Secret {
	o, _ := r.Get("Secret", name).(*corev1.Secret)
	return o
}

// The kinds the chart may render, decoded into typed objects.
var scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		corev1.AddToScheme, appsv1.AddToScheme, policyv1.AddToScheme, rbacv1.AddToScheme,
		autoscalingv2.AddToScheme, networkingv1.AddToScheme, batchv1.AddToScheme,
	} {
		if err := add(s); err != nil {
			panic(err)
		}
	}
	return s
}()

// strict decodes YAML into the registered types and reports unknown and
// duplicate fields as errors (the API server's strict field validation).
var strict = kjson.NewSerializerWithOptions(kjson.DefaultMetaFactory, scheme, scheme,
	kjson.SerializerOptions{Yaml: true, Strict: true})

// crdKinds are decoded into unstructured objects; their required fields are
// checked by the tests.
var crdKinds = map[string]string{
	"ServiceMonitor": "monitoring.coreos.com/v1",
	"PrometheusRule": "monitoring.coreos.com/v1",
}

// decodeAll splits a multi-document YAML stream and decodes every document
// strictly.
func decodeAll(stream string) ([]Object, error) {
	rd := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(stream)))
	var out []Object
	var errs []error
	for {
		doc, err := rd.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		o, err := decodeOne(doc)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, o)
	}
	return out, errors.Join(errs...)
}

func decodeOne(doc []byte) (Object, error) {
	var meta struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name string `json:"name"`
		} `json:"metadata"`
	}
	if err := utilyaml.Unmarshal(doc, &meta); err != nil {
		return Object{}, fmt.Errorf("not YAML: %v\n%s", err, doc)
	}
	o := Object{Kind: meta.Kind, Name: meta.Metadata.Name, Raw: doc}
	where := fmt.Sprintf("%s %s/%s", meta.APIVersion, meta.Kind, meta.Metadata.Name)
	if want, ok := crdKinds[meta.Kind]; ok {
		if meta.APIVersion != want {
			return o, fmt.Errorf("%s: apiVersion %q, want %q", where, meta.APIVersion, want)
		}
		u := &unstructured.Unstructured{}
		if err := utilyaml.Unmarshal(doc, &u.Object); err != nil {
			return o, fmt.Errorf("%s: %v", where, err)
		}
		o.Obj = u
		return o, nil
	}
	obj, _, err := strict.Decode(doc, nil, nil)
	if err != nil {
		return o, fmt.Errorf("%s does not decode strictly: %v", where, err)
	}
	o.Obj = obj
	return o, nil
}

func stripComments(doc []byte) []byte {
	var b bytes.Buffer
	for _, line := range strings.Split(string(doc), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue
		}
		b.WriteString(line + "\n")
	}
	return b.Bytes()
}

// render runs helm template with the given values file (relative to
// test/helm/values; "" for none) and extra arguments, and decodes the result.
func render(t testing.TB, valuesFile string, extra ...string) *Rendered {
	t.Helper()
	var args []string
	if valuesFile != "" {
		args = append(args, "-f", filepath.Join(valuesDir, valuesFile))
	}
	out, err := helmTemplate(t, append(args, extra...)...)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := decodeAll(out)
	if err != nil {
		t.Fatalf("%s: %v", valuesFile, err)
	}
	if len(objs) == 0 {
		t.Fatalf("%s: nothing rendered", valuesFile)
	}
	return &Rendered{Objects: objs, Values: valuesFile}
}

// podTemplates lists every pod spec the chart renders, by workload.
func (r *Rendered) podTemplates() map[string]*corev1.PodTemplateSpec {
	out := map[string]*corev1.PodTemplateSpec{}
	for _, o := range r.Objects {
		switch w := o.Obj.(type) {
		case *appsv1.StatefulSet:
			out["StatefulSet/"+w.Name] = &w.Spec.Template
		case *appsv1.Deployment:
			out["Deployment/"+w.Name] = &w.Spec.Template
		case *batchv1.Job:
			out["Job/"+w.Name] = &w.Spec.Template
		case *corev1.Pod:
			out["Pod/"+w.Name] = &corev1.PodTemplateSpec{ObjectMeta: w.ObjectMeta, Spec: w.Spec}
		}
	}
	return out
}

func container(spec *corev1.PodSpec, name string) *corev1.Container {
	for i := range spec.Containers {
		if spec.Containers[i].Name == name {
			return &spec.Containers[i]
		}
	}
	return nil
}

func envVar(c *corev1.Container, name string) *corev1.EnvVar {
	for i := range c.Env {
		if c.Env[i].Name == name {
			return &c.Env[i]
		}
	}
	return nil
}

// flagValue returns the value of --name=VALUE (or "--name VALUE") in args.
func flagValue(args []string, name string) (string, bool) {
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v, true
		}
		if a == "--"+name {
			if i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
				return args[i+1], true
			}
			return "", true
		}
	}
	return "", false
}
