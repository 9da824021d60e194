package helm

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"
)

// expect is what one values file of the matrix must render.
type expect struct {
	etcd          int      // members of the chart's etcd; 0: an existing etcd
	etcdEndpoints []string // the existing etcd's endpoints
	etcdTLS       bool
	etcdAuth      string // Secret with the etcd user and password
	scheduler     int
	advertiseDNS  bool
	hardAnti      bool
	workers       int // worker replicas; 0: no workers; -1: HPA
	workerSlots   int
	workerLabels  string // --labels of the workers ("": no flag)
	slots         int    // config.slots
	authSecret    string
	authKey       string
	chartSecret   bool     // the chart renders the token Secret
	monitoring    bool     // ServiceMonitor and PrometheusRule
	active        bool     // the -active Service and its RBAC
	podTasks      string   // namespace of pod tasks ("": disabled)
	drainTimeout  string   // the workers' --drain-timeout
	secrets       []string // workers.secrets: mounted for env_from
	tls           bool     // tls.enabled, with the chart's certificate
	tokensSecret  string   // auth.tokensSecret: the replicas' auth_tokens_file
	workerToken   string   // workers.tokenSecret: the workers' own token
}

// matrix: every file in test/helm/values and what it must give.
var matrix = map[string]expect{
	"defaults.yaml": {etcd: 3, scheduler: 3, workers: 2, workerSlots: 16,
		authSecret: "orion-auth", authKey: "token", chartSecret: true},
	"pod-tasks.yaml": {etcd: 3, scheduler: 3, workers: 2, workerSlots: 16, podTasks: "jobs", drainTimeout: "55s",
		authSecret: "orion-auth", authKey: "token", chartSecret: true},
	"external-etcd-tls.yaml": {etcd: 0, etcdTLS: true, etcdAuth: "orion-etcd-auth", scheduler: 3, workers: 2, workerSlots: 16,
		etcdEndpoints: []string{"https://etcd-a.db.example.internal:2379", "https://etcd-b.db.example.internal:2379", "https://etcd-c.db.example.internal:2379"},
		authSecret:    "orion-api-token", authKey: "api-token"},
	"replicas-5.yaml": {etcd: 5, scheduler: 5, advertiseDNS: true, hardAnti: true, workers: 4, workerSlots: 8, workerLabels: "pool=gpu,zone=a",
		authSecret: "orion-auth", authKey: "token", chartSecret: true, secrets: []string{"db", "warehouse.api"},
		tokensSecret: "orion-tokens", workerToken: "orion-worker-token"},
	"tls.yaml": {etcd: 3, scheduler: 3, advertiseDNS: true, workers: 2, workerSlots: 16, tls: true,
		authSecret: "orion-auth", authKey: "token", chartSecret: true},
	"servicemonitor.yaml": {etcd: 3, scheduler: 3, workers: -1, workerSlots: 16, monitoring: true, active: true,
		authSecret: "orion-auth", authKey: "token", chartSecret: true},
	"workers-off.yaml": {etcd: 3, scheduler: 3, workers: 0, slots: 4,
		authSecret: "orion-auth", authKey: "token", chartSecret: true},
}

const (
	etcdSTS      = "orion-etcd"
	etcdHeadless = "orion-etcd-headless"
	schedSTS     = "orion-scheduler"
	schedHeadles = "orion-scheduler-headless"
	apiService   = "orion"
	activeSvc    = "orion-active"
	workerDeploy = "orion-worker"
	configName   = "orion-config"
	domain       = "cluster.local"
)

func TestMatrixFilesAreCovered(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(valuesDir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		names = append(names, filepath.Base(f))
	}
	var want []string
	for k := range matrix {
		want = append(want, k)
	}
	sort.Strings(want)
	if !reflect.DeepEqual(names, want) {
		t.Fatalf("test/helm/values has %v, the matrix in chart_test.go expects %v", names, want)
	}
}

func TestMatrix(t *testing.T) {
	for file, e := range matrix {
		t.Run(strings.TrimSuffix(file, ".yaml"), func(t *testing.T) {
			t.Parallel()
			r := render(t, file)
			checkCommon(t, r, e)
			checkEtcd(t, r, e)
			checkScheduler(t, r, e)
			checkConfig(t, r, e)
			checkWorkers(t, r, e)
			checkMonitoring(t, r, e)
			checkHelmTest(t, r, e)
		})
	}
}

var standardLabels = []string{"app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/version",
	"app.kubernetes.io/managed-by", "helm.sh/chart"}

// checkCommon: labels, names, security, resources and that every reference
// (Secret, ConfigMap, volume, selector, named port) resolves.
func checkCommon(t *testing.T, r *Rendered, e expect) {
	external := map[string]bool{e.authSecret: !e.chartSecret, e.etcdAuth: e.etcdAuth != ""}
	for _, s := range e.secrets {
		external[s] = true // the user's, for env_from
	}
	if tok := tokensOf(e); !tok.generated {
		external[tok.file], external[tok.worker] = tok.file != "", tok.worker != ""
	}
	if e.etcdTLS {
		external["orion-etcd-client-tls"] = true
	}
	for _, o := range r.Objects {
		m, err := metaOf(o.Obj)
		if err != nil {
			t.Fatal(err)
		}
		where := o.Kind + "/" + o.Name
		podTasksRBAC := (o.Kind == "Role" || o.Kind == "RoleBinding") && o.Name == workerDeploy+"-pod-tasks"
		if podTasksRBAC && e.podTasks != "" {
			if m.GetNamespace() != e.podTasks {
				t.Errorf("%s: namespace %q, want the pod tasks' %q", where, m.GetNamespace(), e.podTasks)
			}
		} else if m.GetNamespace() != namespace {
			t.Errorf("%s: namespace %q, want %q", where, m.GetNamespace(), namespace)
		}
		for _, l := range standardLabels {
			if m.GetLabels()[l] == "" {
				t.Errorf("%s: no label %s", where, l)
			}
		}
		if errs := validation.IsDNS1123Subdomain(o.Name); len(errs) > 0 || len(o.Name) > 63 {
			t.Errorf("%s: bad name: %v", where, errs)
		}
	}
	// Every Secret and ConfigMap a pod uses is rendered, or given in values.
	exists := func(kind, name string) bool {
		return r.Get(kind, name) != nil || (kind == "Secret" && external[name])
	}
	for wl, tpl := range r.podTemplates() {
		spec := &tpl.Spec
		sc := spec.SecurityContext
		if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser == 0 {
			t.Errorf("%s: pod securityContext must set runAsNonRoot and a non-zero runAsUser: %+v", wl, sc)
		}
		if sc != nil && (sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault) {
			t.Errorf("%s: seccompProfile RuntimeDefault missing", wl)
		}
		if spec.AutomountServiceAccountToken == nil {
			t.Errorf("%s: automountServiceAccountToken not set explicitly", wl)
		}
		if spec.ServiceAccountName != "" && r.Get("ServiceAccount", spec.ServiceAccountName) == nil {
			t.Errorf("%s: ServiceAccount %s not rendered", wl, spec.ServiceAccountName)
		}
		volumes := map[string]bool{}
		for _, v := range spec.Volumes {
			volumes[v.Name] = true
			if v.ConfigMap != nil && !exists("ConfigMap", v.ConfigMap.Name) {
				t.Errorf("%s: volume %s uses ConfigMap %s, which is not rendered", wl, v.Name, v.ConfigMap.Name)
			}
			if v.Secret != nil && !exists("Secret", v.Secret.SecretName) {
				t.Errorf("%s: volume %s uses Secret %s, which is neither rendered nor given in values", wl, v.Name, v.Secret.SecretName)
			}
		}
		if sts, ok := strings.CutPrefix(wl, "StatefulSet/"); ok {
			for _, c := range r.StatefulSet(sts).Spec.VolumeClaimTemplates {
				volumes[c.Name] = true
			}
		}
		for _, c := range spec.Containers {
			cw := wl + " container " + c.Name
			if len(c.Command) != 0 {
				t.Errorf("%s: command %v: the chart relies on the image's ENTRYPOINT (orion)", cw, c.Command)
			}
			if !regexp.MustCompile(`^[^\s:@]+(:[\w][\w.-]*|@sha256:[a-f0-9]{64})$`).MatchString(c.Image) {
				t.Errorf("%s: image %q has no tag or digest", cw, c.Image)
			}
			if !slices.Contains([]corev1.PullPolicy{corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever}, c.ImagePullPolicy) {
				t.Errorf("%s: imagePullPolicy %q", cw, c.ImagePullPolicy)
			}
			csc := c.SecurityContext
			if csc == nil || csc.AllowPrivilegeEscalation == nil || *csc.AllowPrivilegeEscalation ||
				csc.ReadOnlyRootFilesystem == nil || !*csc.ReadOnlyRootFilesystem ||
				csc.Capabilities == nil || !slices.Contains(csc.Capabilities.Drop, "ALL") {
				t.Errorf("%s: securityContext must forbid privilege escalation, drop ALL and use a read-only root: %+v", cw, csc)
			}
			if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
				t.Errorf("%s: needs cpu and memory requests and a memory limit: %+v", cw, c.Resources)
			}
			mounted := map[string]bool{}
			for _, m := range c.VolumeMounts {
				if !volumes[m.Name] {
					t.Errorf("%s: mounts %s, which is not a volume", cw, m.Name)
				}
				mounted[m.MountPath] = true
			}
			// A read-only root needs a writable /tmp (Go, tasks).
			if !mounted["/tmp"] && !strings.HasPrefix(wl, "Pod/") {
				t.Errorf("%s: no writable /tmp", cw)
			}
			for _, env := range c.Env {
				if env.ValueFrom == nil {
					continue
				}
				if s := env.ValueFrom.SecretKeyRef; s != nil && !exists("Secret", s.Name) {
					t.Errorf("%s: env %s uses Secret %s, which is neither rendered nor given in values", cw, env.Name, s.Name)
				}
				if s := env.ValueFrom.ConfigMapKeyRef; s != nil && !exists("ConfigMap", s.Name) {
					t.Errorf("%s: env %s uses ConfigMap %s, which is not rendered", cw, env.Name, s.Name)
				}
			}
			for _, p := range []*corev1.Probe{c.ReadinessProbe, c.LivenessProbe, c.StartupProbe} {
				if p != nil && p.HTTPGet != nil && !hasPort(&c, p.HTTPGet.Port) {
					t.Errorf("%s: probe port %s is not a container port", cw, p.HTTPGet.Port.String())
				}
			}
		}
	}
	// Services, PDBs, NetworkPolicies select pods that exist; named ports resolve.
	for _, o := range r.All("Service") {
		svc := o.(*corev1.Service)
		sel := labels.SelectorFromSet(svc.Spec.Selector)
		if svc.Name == activeSvc {
			// The leader's label is set at runtime: match without it.
			base := map[string]string{}
			for k, v := range svc.Spec.Selector {
				if k != "orion.io/role" {
					base[k] = v
				}
			}
			if svc.Spec.Selector["orion.io/role"] != "leader" {
				t.Errorf("Service %s: selector %v lacks orion.io/role=leader", svc.Name, svc.Spec.Selector)
			}
			sel = labels.SelectorFromSet(base)
		}
		tpls := selected(r, sel)
		if len(tpls) == 0 {
			t.Errorf("Service %s: selector %v matches no pod template", svc.Name, svc.Spec.Selector)
		}
		for _, p := range svc.Spec.Ports {
			for _, tpl := range tpls {
				if !templateHasPort(tpl, p.TargetPort) {
					t.Errorf("Service %s: targetPort %s is not a port of the pods it selects", svc.Name, p.TargetPort.String())
				}
			}
		}
	}
	for _, o := range r.All("PodDisruptionBudget") {
		pdb := o.(*policyv1.PodDisruptionBudget)
		sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if err != nil || len(selected(r, sel)) == 0 {
			t.Errorf("PodDisruptionBudget %s: selector matches no pod template (%v)", pdb.Name, err)
		}
	}
	for _, o := range r.All("NetworkPolicy") {
		np := o.(*networkingv1.NetworkPolicy)
		sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
		tpls := selected(r, sel)
		if err != nil || len(tpls) == 0 {
			t.Errorf("NetworkPolicy %s: podSelector matches no pod template (%v)", np.Name, err)
		}
		for _, in := range np.Spec.Ingress {
			for _, p := range in.Ports {
				for _, tpl := range tpls {
					if p.Port != nil && !templateHasPort(tpl, *p.Port) {
						t.Errorf("NetworkPolicy %s: port %s is not a port of its pods", np.Name, p.Port.String())
					}
				}
			}
		}
	}
	for _, o := range r.All("HorizontalPodAutoscaler") {
		h := o.(*autoscalingv2.HorizontalPodAutoscaler)
		if h.Spec.ScaleTargetRef.Kind != "Deployment" || r.Deployment(h.Spec.ScaleTargetRef.Name) == nil {
			t.Errorf("HorizontalPodAutoscaler %s: target %+v not rendered", h.Name, h.Spec.ScaleTargetRef)
		}
	}
	// Only the chart's own kinds.
	allowed := map[string]bool{"ConfigMap": true, "Secret": true, "Service": true, "ServiceAccount": true,
		"StatefulSet": true, "Deployment": true, "PodDisruptionBudget": true, "NetworkPolicy": true, "Role": true,
		"RoleBinding": true, "HorizontalPodAutoscaler": true, "ServiceMonitor": true, "PrometheusRule": true, "Pod": true}
	for _, o := range r.Objects {
		if !allowed[o.Kind] {
			t.Errorf("unexpected kind %s/%s", o.Kind, o.Name)
		}
	}
}

func metaOf(o runtime.Object) (metav1.Object, error) {
	if u, ok := o.(*unstructured.Unstructured); ok {
		return u, nil
	}
	m, ok := o.(metav1.Object)
	if !ok {
		return nil, fmt.Errorf("%T has no metadata", o)
	}
	return m, nil
}

func hasPort(c *corev1.Container, p intstr.IntOrString) bool {
	for _, cp := range c.Ports {
		if (p.Type == intstr.String && cp.Name == p.StrVal) || (p.Type == intstr.Int && cp.ContainerPort == p.IntVal) {
			return true
		}
	}
	return false
}

func templateHasPort(tpl *corev1.PodTemplateSpec, p intstr.IntOrString) bool {
	for i := range tpl.Spec.Containers {
		if hasPort(&tpl.Spec.Containers[i], p) {
			return true
		}
	}
	return false
}

// selected lists the workload pod templates (not hooks) a selector matches.
func selected(r *Rendered, sel labels.Selector) []*corev1.PodTemplateSpec {
	var out []*corev1.PodTemplateSpec
	for wl, tpl := range r.podTemplates() {
		if strings.HasPrefix(wl, "Pod/") {
			continue
		}
		if sel.Matches(labels.Set(tpl.Labels)) {
			out = append(out, tpl)
		}
	}
	return out
}

func checkEtcd(t *testing.T, r *Rendered, e expect) {
	sts := r.StatefulSet(etcdSTS)
	if e.etcd == 0 {
		if sts != nil || r.Service(etcdHeadless) != nil {
			t.Fatalf("etcd.enabled=false still renders the etcd StatefulSet or Service")
		}
		return
	}
	if sts == nil {
		t.Fatalf("no StatefulSet %s", etcdSTS)
	}
	if sts.Spec.Replicas == nil || int(*sts.Spec.Replicas) != e.etcd {
		t.Errorf("etcd replicas %v, want %d", sts.Spec.Replicas, e.etcd)
	}
	if sts.Spec.PodManagementPolicy != appsv1.ParallelPodManagement {
		t.Errorf("etcd podManagementPolicy %q, want Parallel", sts.Spec.PodManagementPolicy)
	}
	hs := r.Service(sts.Spec.ServiceName)
	if hs == nil {
		t.Fatalf("etcd serviceName %q is not a rendered Service", sts.Spec.ServiceName)
	}
	if hs.Spec.ClusterIP != corev1.ClusterIPNone || !hs.Spec.PublishNotReadyAddresses {
		t.Errorf("Service %s: want headless (clusterIP None) with publishNotReadyAddresses, got %q / %v",
			hs.Name, hs.Spec.ClusterIP, hs.Spec.PublishNotReadyAddresses)
	}
	if !labels.SelectorFromSet(hs.Spec.Selector).Matches(labels.Set(sts.Spec.Template.Labels)) {
		t.Errorf("Service %s does not select the etcd pods", hs.Name)
	}
	if len(sts.Spec.VolumeClaimTemplates) != 1 {
		t.Fatalf("etcd: want one volumeClaimTemplate, got %d", len(sts.Spec.VolumeClaimTemplates))
	}
	pvc := sts.Spec.VolumeClaimTemplates[0]
	if q := pvc.Spec.Resources.Requests[corev1.ResourceStorage]; q.IsZero() {
		t.Errorf("etcd PVC %s requests no storage", pvc.Name)
	}
	c := container(&sts.Spec.Template.Spec, "etcd")
	if c == nil {
		t.Fatal("etcd StatefulSet has no container etcd")
	}
	if len(c.Args) == 0 || c.Args[0] != "etcd" {
		t.Fatalf("etcd args %v: want `orion etcd ...`", c.Args)
	}
	dataDir, _ := flagValue(c.Args, "data-dir")
	if !mountedFrom(c, dataDir, pvc.Name) {
		t.Errorf("etcd --data-dir %q is not on the PVC %s", dataDir, pvc.Name)
	}
	if v, _ := flagValue(c.Args, "name"); v != "$(POD_NAME)" {
		t.Errorf("etcd --name %q, want $(POD_NAME)", v)
	}
	checkFieldRef(t, c, "POD_NAME", "metadata.name")
	checkFieldRef(t, c, "ORION_ETCD_NODE_NAME", "spec.nodeName")
	checkAvoids(t, "etcd", sts.Spec.Template.Spec.Affinity, "scheduler")
	ic, _ := flagValue(c.Args, "initial-cluster")
	var want []string
	for i := range e.etcd {
		n := fmt.Sprintf("%s-%d", etcdSTS, i)
		want = append(want, fmt.Sprintf("%s=http://%s.%s.%s.svc.%s:2380", n, n, etcdHeadless, namespace, domain))
	}
	if ic != strings.Join(want, ",") {
		t.Errorf("etcd --initial-cluster\n got %s\nwant %s", ic, strings.Join(want, ","))
	}
	if v, _ := flagValue(c.Args, "advertise-peer-url"); v != fmt.Sprintf("http://$(POD_NAME).%s.%s.svc.%s:2380", etcdHeadless, namespace, domain) {
		t.Errorf("etcd --advertise-peer-url %q", v)
	}
	for _, f := range []string{"listen-client-url", "listen-peer-url", "advertise-client-url", "auto-compaction-mode", "auto-compaction-retention", "initial-cluster-token"} {
		if v, ok := flagValue(c.Args, f); !ok || v == "" {
			t.Errorf("etcd: no --%s", f)
		}
	}
	if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil || c.LivenessProbe == nil || c.LivenessProbe.HTTPGet == nil {
		t.Errorf("etcd: want http readiness and liveness probes")
	} else if c.LivenessProbe.HTTPGet.Path == "/health" {
		t.Errorf("etcd liveness on /health restarts members when the quorum is lost; use /livez")
	}
	pdb := findPDB(r, sts.Spec.Template.Labels)
	if pdb == nil {
		t.Errorf("no PodDisruptionBudget for etcd")
	} else if mu := pdb.Spec.MaxUnavailable; mu == nil || e.etcd-mu.IntValue() < e.etcd/2+1 {
		t.Errorf("etcd PDB maxUnavailable %v would allow losing the quorum of %d", mu, e.etcd)
	}
	if len(r.All("NetworkPolicy")) == 0 {
		t.Errorf("no NetworkPolicy for etcd (it has no auth)")
	}
}

func mountedFrom(c *corev1.Container, path, volume string) bool {
	for _, m := range c.VolumeMounts {
		if m.Name == volume && (path == m.MountPath || strings.HasPrefix(path, m.MountPath+"/")) {
			return true
		}
	}
	return false
}

// checkAvoids checks that pods of component prefer nodes without a pod of
// other (scheduler.avoidEtcdNodes): a node lost then rarely takes the
// scheduler's leader and etcd's raft leader together.
func checkAvoids(t *testing.T, component string, aff *corev1.Affinity, other string) {
	t.Helper()
	if aff == nil || aff.PodAntiAffinity == nil {
		t.Errorf("%s: no pod anti-affinity", component)
		return
	}
	for _, w := range aff.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution {
		ls := w.PodAffinityTerm.LabelSelector
		if ls != nil && ls.MatchLabels["app.kubernetes.io/component"] == other && w.PodAffinityTerm.TopologyKey == "kubernetes.io/hostname" && w.Weight < 100 {
			return
		}
	}
	t.Errorf("%s: want a preferred anti-affinity (weight under 100) on kubernetes.io/hostname against %s pods, got %+v", component, other, aff.PodAntiAffinity)
}

func checkFieldRef(t *testing.T, c *corev1.Container, name, field string) {
	t.Helper()
	ev := envVar(c, name)
	if ev == nil || ev.ValueFrom == nil || ev.ValueFrom.FieldRef == nil || ev.ValueFrom.FieldRef.FieldPath != field {
		t.Errorf("container %s: env %s must come from fieldRef %s", c.Name, name, field)
	}
}

func checkSecretRef(t *testing.T, c *corev1.Container, env, secret, key string) {
	t.Helper()
	ev := envVar(c, env)
	if ev == nil || ev.ValueFrom == nil || ev.ValueFrom.SecretKeyRef == nil ||
		ev.ValueFrom.SecretKeyRef.Name != secret || ev.ValueFrom.SecretKeyRef.Key != key {
		t.Errorf("container %s: env %s must come from Secret %s key %s, got %+v", c.Name, env, secret, key, ev)
	}
}

func findPDB(r *Rendered, podLabels map[string]string) *policyv1.PodDisruptionBudget {
	for _, o := range r.All("PodDisruptionBudget") {
		pdb := o.(*policyv1.PodDisruptionBudget)
		if sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector); err == nil && sel.Matches(labels.Set(podLabels)) {
			return pdb
		}
	}
	return nil
}

func checkScheduler(t *testing.T, r *Rendered, e expect) {
	sts := r.StatefulSet(schedSTS)
	if sts == nil {
		t.Fatalf("no StatefulSet %s", schedSTS)
	}
	if sts.Spec.Replicas == nil || int(*sts.Spec.Replicas) != e.scheduler {
		t.Errorf("scheduler replicas %v, want %d", sts.Spec.Replicas, e.scheduler)
	}
	spec := &sts.Spec.Template.Spec
	c := container(spec, "scheduler")
	if c == nil {
		t.Fatal("no scheduler container")
	}
	if len(c.Args) == 0 || c.Args[0] != "server" {
		t.Fatalf("scheduler args %v: want `orion server ...`", c.Args)
	}
	// Probes: readiness is /readyz (a caught-up standby is ready), liveness
	// is /healthz (not tied to leadership).
	if p := c.ReadinessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/readyz" {
		t.Errorf("scheduler readinessProbe %+v, want httpGet /readyz", p)
	}
	if p := c.LivenessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthz" {
		t.Errorf("scheduler livenessProbe %+v, want httpGet /healthz", p)
	}
	// preStop sleep, then SIGTERM (resign), within the grace period.
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Sleep == nil || c.Lifecycle.PreStop.Sleep.Seconds <= 0 {
		t.Errorf("scheduler: want a preStop sleep")
	} else {
		grace := time.Duration(*spec.TerminationGracePeriodSeconds) * time.Second
		need := time.Duration(c.Lifecycle.PreStop.Sleep.Seconds)*time.Second + 10*time.Second // shutdown_grace
		if grace <= need {
			t.Errorf("terminationGracePeriodSeconds %v <= preStop sleep + shutdown_grace %v", grace, need)
		}
	}
	// Identity and address of the replica.
	if v, _ := flagValue(c.Args, "name"); v != "$(POD_NAME)" {
		t.Errorf("scheduler --name %q, want $(POD_NAME)", v)
	}
	checkFieldRef(t, c, "POD_NAME", "metadata.name")
	adv, _ := flagValue(c.Args, "advertise-url")
	scheme := "http"
	if e.tls {
		scheme = "https"
	}
	wantAdv := "http://$(POD_IP):8080"
	if e.advertiseDNS {
		wantAdv = fmt.Sprintf("%s://$(POD_NAME).%s.$(POD_NAMESPACE).svc.%s:8080", scheme, schedHeadles, domain)
		checkFieldRef(t, c, "POD_NAMESPACE", "metadata.namespace")
	} else {
		checkFieldRef(t, c, "POD_IP", "status.podIP")
	}
	if adv != wantAdv {
		t.Errorf("scheduler --advertise-url %q, want %q", adv, wantAdv)
	}
	if !hasPort(c, intstr.FromInt32(8080)) || !hasPort(c, intstr.FromString("http")) {
		t.Errorf("scheduler: want containerPort 8080 named http, got %+v", c.Ports)
	}
	// The config file comes from the ConfigMap.
	cfg, _ := flagValue(c.Args, "config")
	var cfgVolume string
	for _, m := range c.VolumeMounts {
		if strings.HasPrefix(cfg, m.MountPath+"/") {
			cfgVolume = m.Name
		}
	}
	var fromCM string
	for _, v := range spec.Volumes {
		if v.Name == cfgVolume && v.ConfigMap != nil {
			fromCM = v.ConfigMap.Name
		}
	}
	if fromCM != configName || filepath.Base(cfg) != "orion.yaml" {
		t.Errorf("scheduler --config %q is not orion.yaml of ConfigMap %s (volume %q from %q)", cfg, configName, cfgVolume, fromCM)
	}
	checkSecretRef(t, c, "ORION_AUTH_TOKEN", e.authSecret, e.authKey)
	if e.etcdAuth != "" {
		checkSecretRef(t, c, "ORION_ETCD_USERNAME", e.etcdAuth, "username")
		checkSecretRef(t, c, "ORION_ETCD_PASSWORD", e.etcdAuth, "password")
	} else if envVar(c, "ORION_ETCD_PASSWORD") != nil {
		t.Errorf("ORION_ETCD_PASSWORD set without etcd auth")
	}
	// Spread over nodes.
	aff := spec.Affinity
	if aff == nil || aff.PodAntiAffinity == nil {
		t.Errorf("scheduler: no pod anti-affinity")
	} else if e.hardAnti {
		if len(aff.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) == 0 {
			t.Errorf("scheduler: antiAffinity hard renders no required term")
		}
	} else if pa := aff.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution; len(pa) == 0 ||
		pa[0].PodAffinityTerm.TopologyKey != "kubernetes.io/hostname" ||
		!labels.SelectorFromSet(pa[0].PodAffinityTerm.LabelSelector.MatchLabels).Matches(labels.Set(sts.Spec.Template.Labels)) {
		t.Errorf("scheduler: want a soft anti-affinity on kubernetes.io/hostname selecting its own pods, got %+v", aff.PodAntiAffinity)
	}
	if e.etcd > 0 {
		checkAvoids(t, "scheduler", aff, "etcd")
	}
	checkFieldRef(t, c, "ORION_NODE_NAME", "spec.nodeName")
	if pdb := findPDB(r, sts.Spec.Template.Labels); pdb == nil || pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 {
		t.Errorf("scheduler: want a PodDisruptionBudget with maxUnavailable 1, got %+v", pdb)
	}
	// Services: the API reaches every replica; the headless one publishes
	// not-ready replicas.
	api := r.Service(apiService)
	if api == nil || api.Spec.Type != corev1.ServiceTypeClusterIP || len(api.Spec.Ports) != 1 || api.Spec.Ports[0].Port != 8080 ||
		!labels.SelectorFromSet(api.Spec.Selector).Matches(labels.Set(sts.Spec.Template.Labels)) {
		t.Errorf("API Service %s must be a ClusterIP on 8080 selecting the scheduler pods: %+v", apiService, api)
	}
	if hs := r.Service(sts.Spec.ServiceName); hs == nil || hs.Spec.ClusterIP != corev1.ClusterIPNone || !hs.Spec.PublishNotReadyAddresses {
		t.Errorf("scheduler serviceName %s: want a headless Service publishing not-ready addresses", sts.Spec.ServiceName)
	}
	// The -active Service and what it needs.
	as := r.Service(activeSvc)
	role, _ := r.Get("Role", schedSTS).(*rbacv1.Role)
	binding, _ := r.Get("RoleBinding", schedSTS).(*rbacv1.RoleBinding)
	automount := spec.AutomountServiceAccountToken != nil && *spec.AutomountServiceAccountToken
	if !e.active {
		if as != nil || role != nil || binding != nil || automount || envVar(c, "ORION_KUBE_LEADER_LABEL") != nil {
			t.Errorf("activeService disabled but the -active Service, RBAC, a token mount or the env are rendered")
		}
		return
	}
	if as == nil || role == nil || binding == nil || !automount {
		t.Fatalf("activeService.enabled: want the -active Service, a Role, a RoleBinding and a token mount")
	}
	if ev := envVar(c, "ORION_KUBE_LEADER_LABEL"); ev == nil || ev.Value != "orion.io/role" {
		t.Errorf("ORION_KUBE_LEADER_LABEL: %+v", ev)
	}
	checkFieldRef(t, c, "POD_NAMESPACE", "metadata.namespace")
	var names []string
	for i := range e.scheduler {
		names = append(names, fmt.Sprintf("%s-%d", schedSTS, i))
	}
	if len(role.Rules) != 1 || !reflect.DeepEqual(role.Rules[0].Resources, []string{"pods"}) ||
		!reflect.DeepEqual(role.Rules[0].Verbs, []string{"get", "patch"}) || !reflect.DeepEqual(role.Rules[0].ResourceNames, names) {
		t.Errorf("Role: want get/patch on pods %v only, got %+v", names, role.Rules)
	}
	if binding.RoleRef.Name != role.Name || len(binding.Subjects) != 1 || binding.Subjects[0].Name != spec.ServiceAccountName ||
		binding.Subjects[0].Namespace != namespace {
		t.Errorf("RoleBinding %+v does not bind Role %s to ServiceAccount %s", binding, role.Name, spec.ServiceAccountName)
	}
}

// orionYAMLKeys reads config/orion.yaml: the keys the ConfigMap must have,
// and the YAML type of each default.
func orionYAMLKeys(t *testing.T) map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "config", "orion.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := yaml.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func typeName(v any) string {
	switch v.(type) {
	case string:
		return "string"
	case float64, int, int64:
		return "number"
	case bool:
		return "bool"
	case []any:
		return "list"
	case nil:
		return "null"
	}
	return fmt.Sprintf("%T", v)
}

// renderedConfig returns the ConfigMap's orion.yaml, parsed.
func renderedConfig(t *testing.T, r *Rendered) map[string]any {
	t.Helper()
	cm := r.ConfigMap(configName)
	if cm == nil {
		t.Fatalf("no ConfigMap %s", configName)
	}
	text, ok := cm.Data["orion.yaml"]
	if !ok {
		t.Fatalf("ConfigMap %s has no orion.yaml: %v", configName, cm.Data)
	}
	var got map[string]any
	if err := yaml.UnmarshalStrict([]byte(text), &got); err != nil {
		t.Fatalf("ConfigMap %s orion.yaml is not YAML: %v\n%s", configName, err, text)
	}
	return got
}

func checkConfig(t *testing.T, r *Rendered, e expect) {
	got := renderedConfig(t, r)
	want := orionYAMLKeys(t)
	var missing, extra []string
	for k, v := range want {
		g, ok := got[k]
		if !ok {
			missing = append(missing, k)
			continue
		}
		// An empty list and a list of endpoints are both lists.
		if typeName(g) != typeName(v) {
			t.Errorf("orion.yaml key %s: %s %v, config/orion.yaml has a %s", k, typeName(g), g, typeName(v))
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			extra = append(extra, k)
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	if len(missing)+len(extra) > 0 {
		t.Errorf("ConfigMap orion.yaml keys differ from config/orion.yaml: missing %v, extra %v", missing, extra)
	}
	// The tokens file, from the Secret mounted where the config says.
	tok := tokensOf(e)
	wantFile := ""
	if tok.file != "" {
		wantFile = "/etc/orion-auth/tokens.yaml"
	}
	if got["auth_tokens_file"] != wantFile {
		t.Errorf("orion.yaml auth_tokens_file %v, want %q", got["auth_tokens_file"], wantFile)
	}
	if sts := r.StatefulSet(schedSTS); sts != nil && tok.file != "" {
		c := container(&sts.Spec.Template.Spec, "scheduler")
		mounted := false
		for _, m := range c.VolumeMounts {
			mounted = mounted || (m.Name == "auth-tokens" && m.ReadOnly && strings.HasPrefix(wantFile, m.MountPath+"/"))
		}
		if !mounted {
			t.Errorf("auth_tokens_file %s is not mounted read-only in the scheduler", wantFile)
		}
		for _, v := range sts.Spec.Template.Spec.Volumes {
			if v.Name == "auth-tokens" && (v.Secret == nil || v.Secret.SecretName != tok.file) {
				t.Errorf("auth-tokens volume %+v, want Secret %s", v.VolumeSource, tok.file)
			}
		}
	}
	// Secrets never land in the ConfigMap; a non-loopback listen with the
	// token from the environment.
	if got["auth_token"] != "" || got["etcd_password"] != "" || got["insecure_no_auth"] != false {
		t.Errorf("orion.yaml: auth_token, etcd_password must be empty and insecure_no_auth false: %v %v %v",
			got["auth_token"], got["etcd_password"], got["insecure_no_auth"])
	}
	if got["listen"] != "0.0.0.0:8080" {
		t.Errorf("orion.yaml listen %v, want 0.0.0.0:8080", got["listen"])
	}
	if int(got["slots"].(float64)) != e.slots {
		t.Errorf("orion.yaml slots %v, want %d", got["slots"], e.slots)
	}
	var eps []string
	for _, v := range got["etcd_endpoints"].([]any) {
		eps = append(eps, v.(string))
	}
	wantEps := e.etcdEndpoints
	if e.etcd > 0 {
		wantEps = nil
		for i := range e.etcd {
			wantEps = append(wantEps, fmt.Sprintf("http://%s-%d.%s.%s.svc.%s:2379", etcdSTS, i, etcdHeadless, namespace, domain))
		}
	}
	if !reflect.DeepEqual(eps, wantEps) {
		t.Errorf("orion.yaml etcd_endpoints %v, want %v", eps, wantEps)
	}
	// Files the config names are mounted in the scheduler.
	c := container(&r.StatefulSet(schedSTS).Spec.Template.Spec, "scheduler")
	if dd := got["data_dir"].(string); !mountedAnywhere(c, dd) {
		t.Errorf("data_dir %s is not a mounted (writable) volume", dd)
	}
	for _, k := range []string{"etcd_ca", "etcd_cert", "etcd_key"} {
		p, _ := got[k].(string)
		if e.etcdTLS != (p != "") {
			t.Errorf("orion.yaml %s = %q with etcd TLS %v", k, p, e.etcdTLS)
		}
		if p != "" && !mountedFrom(c, p, "etcd-tls") {
			t.Errorf("orion.yaml %s = %s is not in the etcd-tls volume", k, p)
		}
	}
	if e.etcdTLS {
		for _, ep := range eps {
			if !strings.HasPrefix(ep, "https://") {
				t.Errorf("TLS etcd endpoint %s is not https", ep)
			}
		}
	}
}

func mountedAnywhere(c *corev1.Container, path string) bool {
	for _, m := range c.VolumeMounts {
		if !m.ReadOnly && (path == m.MountPath || strings.HasPrefix(path, m.MountPath+"/")) {
			return true
		}
	}
	return false
}

func checkWorkers(t *testing.T, r *Rendered, e expect) {
	d := r.Deployment(workerDeploy)
	if e.workers == 0 {
		if d != nil {
			t.Fatalf("workers.enabled=false still renders Deployment %s", workerDeploy)
		}
		return
	}
	if d == nil {
		t.Fatalf("no Deployment %s", workerDeploy)
	}
	hpa, _ := r.Get("HorizontalPodAutoscaler", workerDeploy).(*autoscalingv2.HorizontalPodAutoscaler)
	if e.workers == -1 {
		if hpa == nil || d.Spec.Replicas != nil {
			t.Errorf("worker autoscaling: want an HPA and no replicas in the Deployment (replicas %v)", d.Spec.Replicas)
		}
	} else if hpa != nil || d.Spec.Replicas == nil || int(*d.Spec.Replicas) != e.workers {
		t.Errorf("workers: replicas %v, want %d and no HPA", d.Spec.Replicas, e.workers)
	}
	spec := &d.Spec.Template.Spec
	c := container(spec, "worker")
	if c == nil || len(c.Args) == 0 || c.Args[0] != "worker" {
		t.Fatalf("worker container: want `orion worker ...`, got %+v", c)
	}
	checkPodTasks(t, r, e, spec, c)
	drain := e.drainTimeout
	if drain == "" {
		drain = "25s" // terminationGracePeriodSeconds (30) less 5
	}
	if v, _ := flagValue(c.Args, "drain-timeout"); v != drain {
		t.Errorf("worker --drain-timeout %q, want %q: the pod's grace less 5 s", v, drain)
	}
	if !strings.HasSuffix(c.Image, "-worker") {
		t.Errorf("worker image %s: want the Dockerfile's worker target (tag suffix -worker, it has /bin/sh)", c.Image)
	}
	server, _ := flagValue(c.Args, "server")
	scheme := "http"
	if e.tls {
		scheme = "https"
	}
	wantServer := fmt.Sprintf("%s://%s.%s.svc.%s:8080", scheme, apiService, namespace, domain)
	if server != wantServer {
		t.Errorf("worker --server %q, want the API Service %q", server, wantServer)
	}
	if v, _ := flagValue(c.Args, "slots"); v != fmt.Sprint(e.workerSlots) {
		t.Errorf("worker --slots %q, want %d", v, e.workerSlots)
	}
	if v, _ := flagValue(c.Args, "labels"); v != e.workerLabels {
		t.Errorf("worker --labels %q, want %q", v, e.workerLabels)
	}
	if v, _ := flagValue(c.Args, "name"); v != "$(POD_NAME)" {
		t.Errorf("worker --name %q, want $(POD_NAME)", v)
	}
	checkFieldRef(t, c, "POD_NAME", "metadata.name")
	if tok := tokensOf(e); tok.worker != "" {
		checkSecretRef(t, c, "ORION_AUTH_TOKEN", tok.worker, "token")
		if tok.generated {
			checkGeneratedWorkerToken(t, r, e, c)
		}
	} else {
		checkSecretRef(t, c, "ORION_AUTH_TOKEN", e.authSecret, e.authKey)
	}
	if c.WorkingDir == "" || !mountedAnywhere(c, c.WorkingDir) {
		t.Errorf("worker workingDir %q is not a writable volume", c.WorkingDir)
	}
	if ld, _ := flagValue(c.Args, "log-dir"); !mountedAnywhere(c, ld) {
		t.Errorf("worker --log-dir %q is not a writable volume", ld)
	}
	checkWorkerSecrets(t, e, spec, c)
	if ca, _ := flagValue(c.Args, "ca-file"); e.tls != (ca != "") || (e.tls && !mountedReadOnly(c, ca)) {
		t.Errorf("worker --ca-file %q with tls %v: want the CA, mounted", ca, e.tls)
	}
}

func mountedReadOnly(c *corev1.Container, path string) bool {
	for _, m := range c.VolumeMounts {
		if m.ReadOnly && strings.HasPrefix(path, m.MountPath+"/") {
			return true
		}
	}
	return false
}

// checkWorkerSecrets: each of workers.secrets is mounted read-only at
// <--secrets-dir>/<name>, from the Secret of that name; none: no flag.
func checkWorkerSecrets(t *testing.T, e expect, spec *corev1.PodSpec, c *corev1.Container) {
	dir, ok := flagValue(c.Args, "secrets-dir")
	if len(e.secrets) == 0 {
		if ok {
			t.Errorf("worker --secrets-dir %q with no workers.secrets", dir)
		}
		return
	}
	if dir == "" {
		t.Fatalf("workers.secrets %v: no --secrets-dir", e.secrets)
	}
	for _, name := range e.secrets {
		var found bool
		for _, m := range c.VolumeMounts {
			if m.MountPath != dir+"/"+name {
				continue
			}
			found = true
			if !m.ReadOnly {
				t.Errorf("secret %s mounted writable", name)
			}
			for _, v := range spec.Volumes {
				if v.Name == m.Name && (v.Secret == nil || v.Secret.SecretName != name) {
					t.Errorf("mount %s: volume %+v, want Secret %s", m.MountPath, v.VolumeSource, name)
				}
			}
		}
		if !found {
			t.Errorf("secret %s: not mounted at %s/%s", name, dir, name)
		}
	}
}

func checkMonitoring(t *testing.T, r *Rendered, e expect) {
	sms, rules := r.All("ServiceMonitor"), r.All("PrometheusRule")
	if !e.monitoring {
		if len(sms)+len(rules) > 0 {
			t.Errorf("ServiceMonitor/PrometheusRule rendered while disabled")
		}
		return
	}
	if len(sms) != 1 || len(rules) != 1 {
		t.Fatalf("want one ServiceMonitor and one PrometheusRule, got %d and %d", len(sms), len(rules))
	}
	sm := sms[0].(*unstructured.Unstructured).Object
	sel, found, _ := unstructured.NestedStringMap(sm, "spec", "selector", "matchLabels")
	if !found || len(sel) == 0 {
		t.Fatalf("ServiceMonitor: no spec.selector.matchLabels")
	}
	var svc *corev1.Service
	for _, o := range r.All("Service") {
		s := o.(*corev1.Service)
		if labels.SelectorFromSet(sel).Matches(labels.Set(s.Labels)) {
			if svc != nil {
				t.Errorf("ServiceMonitor selects several Services (%s, %s): every replica would be scraped twice", svc.Name, s.Name)
			}
			svc = s
		}
	}
	if svc == nil {
		t.Fatalf("ServiceMonitor selector %v matches no Service", sel)
	}
	if svc.Name != schedHeadles {
		t.Errorf("ServiceMonitor scrapes through %s; want %s (every replica, ready or not)", svc.Name, schedHeadles)
	}
	eps, found, _ := unstructured.NestedSlice(sm, "spec", "endpoints")
	if !found || len(eps) == 0 {
		t.Fatalf("ServiceMonitor: no spec.endpoints")
	}
	ep := eps[0].(map[string]any)
	port, _ := ep["port"].(string)
	if !slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == port }) {
		t.Errorf("ServiceMonitor endpoint port %q is not a port of Service %s", port, svc.Name)
	}
	if ep["path"] != "/metrics" {
		t.Errorf("ServiceMonitor path %v", ep["path"])
	}
	cred, _, _ := unstructured.NestedStringMap(ep, "authorization", "credentials")
	if typ, _, _ := unstructured.NestedString(ep, "authorization", "type"); typ != "Bearer" || cred["name"] != e.authSecret || cred["key"] != e.authKey {
		t.Errorf("ServiceMonitor: /metrics needs the API token: authorization %v", ep["authorization"])
	}
	pr := rules[0].(*unstructured.Unstructured).Object
	groups, found, _ := unstructured.NestedSlice(pr, "spec", "groups")
	if !found || len(groups) == 0 {
		t.Fatalf("PrometheusRule: no spec.groups")
	}
	exprs := map[string]string{}
	for _, g := range groups {
		gm := g.(map[string]any)
		if gm["name"] == nil || gm["name"] == "" {
			t.Errorf("PrometheusRule group without name")
		}
		rs, _, _ := unstructured.NestedSlice(gm, "rules")
		for _, rr := range rs {
			rm := rr.(map[string]any)
			alert, _ := rm["alert"].(string)
			expr, _ := rm["expr"].(string)
			sev, _, _ := unstructured.NestedString(rm, "labels", "severity")
			if alert == "" || expr == "" || sev == "" {
				t.Errorf("PrometheusRule: a rule needs alert, expr and labels.severity: %v", rm)
			}
			exprs[alert] = expr
		}
	}
	for alert, pattern := range map[string]string{
		"OrionLeaderAbsent":  `^sum\(orion_is_leader\{[^}]*\}\) == 0$`,
		"OrionSlowTakeover":  `orion_last_takeover_seconds\{[^}]*\}\) > 1\b`,
		"OrionDroppedEvents": `rate\(orion_dropped_events_total\{[^}]*\}\[`,
		"OrionReplicaLag":    `orion_replica_lag_revisions\{[^}]*\}\) > \d+`,
	} {
		if !regexp.MustCompile(pattern).MatchString(exprs[alert]) {
			t.Errorf("PrometheusRule %s: expr %q does not match %s", alert, exprs[alert], pattern)
		}
		if !strings.Contains(exprs[alert], fmt.Sprintf(`job="%s"`, schedHeadles)) {
			t.Errorf("PrometheusRule %s: expr %q is not scoped to job %s", alert, exprs[alert], schedHeadles)
		}
	}
}

func checkHelmTest(t *testing.T, r *Rendered, e expect) {
	p, _ := r.Get("Pod", "orion-test-submit").(*corev1.Pod)
	if p == nil {
		t.Fatal("no helm test pod orion-test-submit")
	}
	if p.Annotations["helm.sh/hook"] != "test" {
		t.Errorf("orion-test-submit is not a helm test hook: %v", p.Annotations)
	}
	c := &p.Spec.Containers[0]
	if !slices.Contains(c.Args, "submit") || !slices.Contains(c.Args, "--wait") {
		t.Errorf("helm test args %v: want orion submit --wait", c.Args)
	}
	checkSecretRef(t, c, "ORION_AUTH_TOKEN", e.authSecret, e.authKey)
}

func TestChartSecret(t *testing.T) {
	r := render(t, "defaults.yaml")
	s := r.Secret("orion-auth")
	if s == nil {
		t.Fatal("no Secret orion-auth")
	}
	if tok := string(s.Data["token"]); len(tok) < 32 {
		t.Errorf("generated token %q is too short", tok)
	}
	// A token given in values is used as is.
	r = render(t, "", "--set", "auth.token=0123456789abcdef-given")
	if tok := string(r.Secret("orion-auth").Data["token"]); tok != "0123456789abcdef-given" {
		t.Errorf("token %q, want the one given", tok)
	}
	// An existing Secret: the chart renders none for the token (the
	// workers' own token and its tokens file are still the chart's).
	r = render(t, "", "--set", "auth.existingSecret=mine")
	if r.Secret("orion-auth") != nil || r.Secret("orion-worker-token") == nil {
		t.Errorf("auth.existingSecret set: want no orion-auth Secret, and the workers' token")
	}
	// Every credential given: the chart renders no Secret at all.
	r = render(t, "", "--set", "auth.existingSecret=mine", "--set", "auth.tokensSecret=my-tokens", "--set", "workers.tokenSecret=my-worker-token")
	if n := len(r.All("Secret")); n != 0 {
		t.Errorf("every credential given, but the chart renders %d Secrets", n)
	}
}

// checkPodTasks: with pod tasks, the workers' own ServiceAccount holds
// exactly the rights pod tasks take, in their namespace (a Role, not a
// ClusterRole), and the workers mount its token; without, no token at all.
func checkPodTasks(t *testing.T, r *Rendered, e expect, spec *corev1.PodSpec, c *corev1.Container) {
	role, _ := r.Get("Role", workerDeploy+"-pod-tasks").(*rbacv1.Role)
	binding, _ := r.Get("RoleBinding", workerDeploy+"-pod-tasks").(*rbacv1.RoleBinding)
	automount := spec.AutomountServiceAccountToken != nil && *spec.AutomountServiceAccountToken
	_, pods := flagValue(c.Args, "pods")
	if e.podTasks == "" {
		if automount {
			t.Errorf("workers run arbitrary tasks: without pod tasks they must not mount a service account token")
		}
		if role != nil || binding != nil || pods {
			t.Errorf("pod tasks disabled: want no Role, RoleBinding or --pods")
		}
		return
	}
	if !automount || spec.ServiceAccountName != workerDeploy || !pods {
		t.Fatalf("pod tasks: want the workers on ServiceAccount %s with its token and --pods; got %q, automount %v, --pods %v",
			workerDeploy, spec.ServiceAccountName, automount, pods)
	}
	if ns, _ := flagValue(c.Args, "pod-namespace"); ns != e.podTasks {
		t.Errorf("--pod-namespace %q, want %q", ns, e.podTasks)
	}
	if len(r.All("ClusterRole"))+len(r.All("ClusterRoleBinding")) > 0 {
		t.Errorf("pod tasks need no cluster-wide rights")
	}
	want := []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"create", "get", "list", "watch", "delete"}},
		{APIGroups: []string{""}, Resources: []string{"pods/log"}, Verbs: []string{"get"}},
	}
	if role == nil || !reflect.DeepEqual(role.Rules, want) {
		t.Fatalf("pod tasks Role: want %+v, got %+v", want, role)
	}
	if binding == nil || binding.RoleRef.Name != role.Name || len(binding.Subjects) != 1 ||
		binding.Subjects[0].Name != workerDeploy || binding.Subjects[0].Namespace != namespace {
		t.Errorf("pod tasks RoleBinding %+v does not bind Role %s to ServiceAccount %s/%s", binding, role.Name, namespace, workerDeploy)
	}
}

// chartTokens are the tokens file the replicas read and the Secret of the
// workers' token: the user's, or the chart's own when it makes them
// (workers on, neither given).
type chartTokens struct {
	file, worker string
	generated    bool
}

func tokensOf(e expect) chartTokens {
	switch {
	case e.workers == 0:
		return chartTokens{file: e.tokensSecret}
	case e.tokensSecret == "" && e.workerToken == "":
		return chartTokens{file: "orion-tokens", worker: "orion-worker-token", generated: true}
	}
	return chartTokens{file: e.tokensSecret, worker: e.workerToken}
}

// checkGeneratedWorkerToken: the chart's tokens file gives the workers'
// token (by its digest) the worker role, the Deployment's pod names and
// exactly the labels the workers claim, the pods label with pod tasks.
func checkGeneratedWorkerToken(t *testing.T, r *Rendered, e expect, c *corev1.Container) {
	t.Helper()
	secret := func(name string) *corev1.Secret {
		s, _ := r.Get("Secret", name).(*corev1.Secret)
		if s == nil {
			t.Fatalf("no Secret %s", name)
		}
		return s
	}
	token := string(secret("orion-worker-token").Data["token"])
	if len(token) < 32 {
		t.Fatalf("the workers' token is %d characters", len(token))
	}
	var file struct {
		Tokens []struct {
			Name      string            `json:"name"`
			Role      string            `json:"role"`
			SHA256    string            `json:"sha256"`
			WorkerIDs []string          `json:"worker_ids"`
			Labels    map[string]string `json:"labels"`
		} `json:"tokens"`
	}
	if err := yaml.UnmarshalStrict([]byte(secret("orion-tokens").StringData["tokens.yaml"]), &file); err != nil || len(file.Tokens) != 1 {
		t.Fatalf("the chart's tokens file: %v %+v", err, file)
	}
	got := file.Tokens[0]
	sum := sha256.Sum256([]byte(token))
	want := map[string]string{}
	for _, kv := range strings.Split(e.workerLabels, ",") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			want[k] = v
		}
	}
	if e.podTasks != "" {
		want["orion.io/pods"] = "true"
	}
	if got.Role != "worker" || got.SHA256 != hex.EncodeToString(sum[:]) || fmt.Sprint(got.WorkerIDs) != "["+workerDeploy+"-*]" ||
		fmt.Sprint(got.Labels) != fmt.Sprint(want) {
		t.Errorf("the chart's worker token entry %+v: want role worker, the digest of its token, worker_ids [%s-*], labels %v",
			got, workerDeploy, want)
	}
}

// TestTLSCertificate: with tls.enabled, the chart's certificate is signed by
// the CA it ships beside it and names what replicas, workers and clients
// dial: the API and -active Services, every replica's headless name,
// localhost and 127.0.0.1 (a port-forward); the replicas serve it over
// HTTPS probes with the files the config names.
func TestTLSCertificate(t *testing.T) {
	r := render(t, "tls.yaml")
	s, _ := r.Get("Secret", "orion-tls").(*corev1.Secret)
	if s == nil || s.Type != corev1.SecretTypeTLS {
		t.Fatalf("Secret orion-tls: %+v", s)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(s.Data["ca.crt"]) {
		t.Fatal("ca.crt holds no certificate")
	}
	block, _ := pem.Decode(s.Data["tls.crt"])
	if block == nil {
		t.Fatal("tls.crt holds no PEM block")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tls.X509KeyPair(s.Data["tls.crt"], s.Data["tls.key"]); err != nil {
		t.Errorf("tls.crt and tls.key: %v", err)
	}
	for _, name := range []string{"orion.orion.svc", "orion.orion.svc.cluster.local", "orion-active.orion.svc",
		"orion-scheduler-1.orion-scheduler-headless.orion.svc.cluster.local", "localhost", "127.0.0.1"} {
		if _, err := cert.Verify(x509.VerifyOptions{DNSName: name, Roots: pool}); err != nil {
			t.Errorf("the certificate for %s: %v", name, err)
		}
	}
	sts := r.StatefulSet(schedSTS)
	c := container(&sts.Spec.Template.Spec, "scheduler")
	for _, p := range []*corev1.Probe{c.ReadinessProbe, c.LivenessProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Scheme != corev1.URISchemeHTTPS {
			t.Errorf("probe %+v: want HTTPS", p)
		}
	}
	cfg := renderedConfig(t, r)
	for _, k := range []string{"tls_cert_file", "tls_key_file", "tls_ca_file"} {
		if f, _ := cfg[k].(string); !mountedReadOnly(c, f) {
			t.Errorf("%s %q is not in a read-only mount of the scheduler", k, f)
		}
	}
}
