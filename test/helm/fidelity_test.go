package helm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// TestFidelity runs what the chart renders (defaults) as local processes:
// the etcd members, the scheduler replicas and the workers, with the
// container args and env exactly as rendered, and checks that they form a
// working cluster that runs DAGs and survives the leader's SIGTERM. It
// proves the chart's wiring matches the flags of the binary in the image.
//
// What Kubernetes would provide is simulated:
//   - $(VAR) in args and env is expanded as the kubelet does; fieldRef env
//     gets the pod's name, namespace and a made-up pod IP; secretKeyRef and
//     configMapKeyRef read the rendered Secret and ConfigMap;
//   - every address a pod would use (pod IP, pod DNS name under its
//     StatefulSet's headless Service, a Service name, 0.0.0.0, 127.0.0.1)
//     becomes a local port: host:port of pod P becomes 127.0.0.1:<free port>
//     (0.0.0.0:<free port> for a wildcard listen); a Service name becomes
//     the first pod it selects, through its targetPort; a name that resolves
//     to nothing fails the test (as DNS would fail in the cluster);
//   - volume mounts become per-pod directories (ConfigMap and Secret volumes
//     hold their rendered files, with the same address and path rewriting);
//   - probes are the rendered httpGet probes, polled on the mapped port.
//
// The binary is ORION_BIN, or the one deploy/Dockerfile's build command
// produces. FIDELITY_KEEP=1 keeps the processes' logs and data. If it lacks a flag the chart passes, the test stops at once and
// names the flag.
func TestFidelity(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a local cluster")
	}
	bin := orionBinary(t)
	r := render(t, "defaults.yaml")
	lc := newLocalCluster(t, r, bin)
	lc.checkFlags()
	lc.startAll()
	lc.waitReady(90 * time.Second)
	api := lc.serverURL()
	t.Logf("cluster up; the API Service maps to %s", api)

	cl := lc.waitCluster(api, 30*time.Second, func(c clusterInfo) error { return lc.checkClusterShape(c) })
	t.Logf("leader %s; replicas %d; workers %d; etcd members %d", cl.Leader, len(cl.Replicas), len(cl.workers()), len(cl.Etcd.Members))

	lc.checkHostNames(api)

	// A DAG through the API, with shell tasks that must run on the workers.
	lc.runDAG(api, "fidelity-1")

	// The helm test pod, as `helm test` would run it.
	lc.runHookPod("orion-test-submit", 90*time.Second)

	// The kubelet's SIGTERM (after the preStop sleep) to the leader: the
	// replica resigns and a standby takes over at once.
	old := lc.byName[cl.Leader]
	if old == nil {
		t.Fatalf("leader %q is not a pod name (--name must be the pod name)", cl.Leader)
	}
	begin := time.Now()
	old.signal(syscall.SIGTERM)
	var other *simPod
	for _, p := range lc.podsOf("StatefulSet", schedSTS) {
		if p != old {
			other = p
			break
		}
	}
	otherURL := "http://" + other.hostPort(8080)
	cl = lc.waitCluster(otherURL, 15*time.Second, func(c clusterInfo) error {
		if c.Leader == "" || c.Leader == old.name {
			return fmt.Errorf("leader %q", c.Leader)
		}
		for _, rp := range c.Replicas {
			if rp.Name == c.Leader && rp.FirstCommitAt == nil {
				return fmt.Errorf("new leader %s has not committed yet", c.Leader)
			}
		}
		return nil
	})
	t.Logf("SIGTERM to leader %s: %s leads and committed after %v", old.name, cl.Leader, time.Since(begin).Round(time.Millisecond))
	grace := time.Duration(*old.spec.TerminationGracePeriodSeconds) * time.Second
	if err := old.waitExit(grace); err != nil {
		t.Fatalf("%s did not exit within terminationGracePeriodSeconds (%v) of SIGTERM: %v", old.name, grace, err)
	}
	lc.runDAG(otherURL, "fidelity-2")

	// The StatefulSet brings the pod back under the same name.
	old.start()
	lc.waitPodReady(old, 60*time.Second)
	lc.waitCluster(otherURL, 30*time.Second, func(c clusterInfo) error { return lc.checkClusterShape(c) })
	t.Logf("%s is back as a standby", old.name)

	// deploy/drill.sh, through a fake kubectl backed by these processes.
	lc.runDrillScript("delete")
	lc.runDrillScript("crash")
}

// tail is the end of b, at most max bytes, from a line start.
func tail(b []byte, max int) string {
	if len(b) > max {
		b = b[len(b)-max:]
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	return string(b)
}

// simPod is one pod of a rendered workload, run as a local process.
type simPod struct {
	lc           *localCluster
	name         string
	workload     string // StatefulSet/NAME or Deployment/NAME or Pod/NAME
	ip           string
	labels       map[string]string
	spec         *corev1.PodSpec
	claims       []corev1.PersistentVolumeClaim
	dir          string
	ports        map[int32]int // container port -> local port
	argv         []string
	env          []string
	workdir      string
	logPath      string
	cmd          *exec.Cmd
	done         chan struct{}
	exitErr      error
	pendingFiles []pendingFile // ConfigMap and Secret volumes, written by prepare

	mu       sync.Mutex // guards cmd, done, exitErr and the fields below (fake kubectl)
	uid      string
	restarts int
	deleted  bool // deleted through the fake kubectl, not yet recreated
}

type localCluster struct {
	t       *testing.T
	r       *Rendered
	bin     string
	root    string
	pods    []*simPod // workload pods, started by startAll
	byName  map[string]*simPod
	hosts   map[string]*simPod           // pod IP and pod DNS names
	svcs    map[string]*corev1.Service   // Service DNS names
	svcPods map[string][]*simPod         // Service name -> selected pods
	secrets map[string]map[string][]byte // rendered Secrets
	token   string
}

func newLocalCluster(t *testing.T, r *Rendered, bin string) *localCluster {
	root, err := os.MkdirTemp("", "orion-fidelity-")
	if err != nil {
		t.Fatal(err)
	}
	lc := &localCluster{t: t, r: r, bin: bin, root: root, byName: map[string]*simPod{}, hosts: map[string]*simPod{},
		svcs: map[string]*corev1.Service{}, svcPods: map[string][]*simPod{}, secrets: map[string]map[string][]byte{}}
	t.Cleanup(lc.stopAll)
	t.Cleanup(func() {
		logs, _ := filepath.Glob(filepath.Join(root, "*.log"))
		if t.Failed() {
			// CI keeps only this output: the scheduler and worker logs say
			// who led, who was connected to whom, and why not.
			for _, l := range logs {
				if b, err := os.ReadFile(l); err == nil && !strings.Contains(l, "etcd") {
					t.Logf("--- last lines of %s:\n%s", filepath.Base(l), tail(b, 4000))
				}
			}
		}
		if len(logs) > 0 && (t.Failed() || os.Getenv("FIDELITY_KEEP") != "") {
			t.Logf("logs and data kept in %s", root)
			return
		}
		os.RemoveAll(root)
	})
	for _, o := range r.All("Secret") {
		s := o.(*corev1.Secret)
		lc.secrets[s.Name] = map[string][]byte{}
		for k, v := range s.Data {
			lc.secrets[s.Name][k] = v
		}
		for k, v := range s.StringData {
			lc.secrets[s.Name][k] = []byte(v)
		}
	}
	// Pods of the workloads: StatefulSets name them NAME-0..N-1;
	// Deployments NAME-<hash>-<suffix> (here NAME-fid-N).
	n := 0
	add := func(name, workload string, tpl *corev1.PodTemplateSpec, claims []corev1.PersistentVolumeClaim, replicas int32) {
		for i := range replicas {
			podName := fmt.Sprintf("%s-%d", name, i)
			if strings.HasPrefix(workload, "Deployment/") {
				podName = fmt.Sprintf("%s-fid-%d", name, i)
			}
			n++
			p := &simPod{lc: lc, name: podName, workload: workload, ip: fmt.Sprintf("10.244.0.%d", 10+n),
				labels: tpl.Labels, spec: tpl.Spec.DeepCopy(), claims: claims, dir: filepath.Join(root, podName), ports: map[int32]int{}}
			lc.pods = append(lc.pods, p)
			lc.byName[podName] = p
			lc.hosts[p.ip] = p
		}
	}
	for _, o := range r.All("StatefulSet") {
		s := o.(*appsv1.StatefulSet)
		add(s.Name, "StatefulSet/"+s.Name, &s.Spec.Template, s.Spec.VolumeClaimTemplates, *s.Spec.Replicas)
	}
	for _, o := range r.All("Deployment") {
		d := o.(*appsv1.Deployment)
		add(d.Name, "Deployment/"+d.Name, &d.Spec.Template, nil, *d.Spec.Replicas)
	}
	// DNS: Services (ClusterIP and headless), and StatefulSet pods under
	// their serviceName when that is a headless Service selecting them.
	for _, o := range r.All("Service") {
		svc := o.(*corev1.Service)
		sel := labels.SelectorFromSet(svc.Spec.Selector)
		var sp []*simPod
		for _, p := range lc.pods {
			if sel.Matches(labels.Set(p.labels)) {
				sp = append(sp, p)
			}
		}
		lc.svcPods[svc.Name] = sp
		for _, h := range dnsNames(svc.Name, svc.Namespace) {
			lc.svcs[h] = svc
		}
	}
	for _, o := range r.All("StatefulSet") {
		s := o.(*appsv1.StatefulSet)
		hs := r.Service(s.Spec.ServiceName)
		if hs == nil || hs.Spec.ClusterIP != corev1.ClusterIPNone {
			continue // no pod DNS records without a headless governing Service
		}
		for _, p := range lc.podsOf("StatefulSet", s.Name) {
			if !slices.Contains(lc.svcPods[hs.Name], p) {
				continue
			}
			for _, h := range dnsNames(p.name+"."+hs.Name, hs.Namespace) {
				lc.hosts[h] = p
			}
		}
	}
	// Ports: every declared container port of every pod gets a local one.
	for _, p := range lc.pods {
		for _, c := range p.spec.Containers {
			for _, cp := range c.Ports {
				p.ports[cp.ContainerPort] = freePort(t)
			}
		}
	}
	for _, p := range lc.pods {
		p.prepare()
	}
	return lc
}

// dnsNames: NAME, NAME.NS, NAME.NS.svc, NAME.NS.svc.cluster.local.
func dnsNames(name, ns string) []string {
	return []string{name, name + "." + ns, name + "." + ns + ".svc", name + "." + ns + ".svc." + domain}
}

// portsGiven are the ports freePort has handed out in this test binary. The
// kernel may offer a port that was just closed again; two processes given
// the same one would fight over it (seen: two replicas on one API port).
var (
	portsMu    sync.Mutex
	portsGiven = map[int]bool{}
)

// freePort returns a loopback port that is free now and that no other call
// in this test binary has returned.
func freePort(t *testing.T) int {
	t.Helper()
	for range 1000 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		portsMu.Lock()
		seen := portsGiven[port]
		portsGiven[port] = true
		portsMu.Unlock()
		if !seen {
			return port
		}
	}
	t.Fatal("no loopback port left that was not handed out already")
	return 0
}

func (lc *localCluster) podsOf(kind, name string) []*simPod {
	var out []*simPod
	for _, p := range lc.pods {
		if p.workload == kind+"/"+name {
			out = append(out, p)
		}
	}
	return out
}

// hostPort maps one of the pod's container ports to its local address.
func (p *simPod) hostPort(port int32) string {
	lp, ok := p.ports[port]
	if !ok {
		p.lc.t.Fatalf("%s has no containerPort %d", p.name, port)
	}
	return fmt.Sprintf("127.0.0.1:%d", lp)
}

var addrRE = regexp.MustCompile(`([A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*):([0-9]{1,5})\b`)

// rewriteAddrs replaces every host:port the pod would use with the local
// address it maps to.
func (p *simPod) rewriteAddrs(s string) (string, error) {
	var errs []string
	out := addrRE.ReplaceAllStringFunc(s, func(m string) string {
		sub := addrRE.FindStringSubmatch(m)
		host := sub[1]
		port64, _ := strconv.ParseInt(sub[2], 10, 32)
		port := int32(port64)
		switch {
		case host == "0.0.0.0" || host == p.ip || p.lc.hosts[host] == p:
			// The pod's own external address: a declared containerPort.
			lp, ok := p.ports[port]
			if !ok {
				errs = append(errs, fmt.Sprintf("%s uses port %d of itself (%q) but declares no such containerPort", p.name, port, m))
				return m
			}
			if host == "0.0.0.0" {
				return fmt.Sprintf("0.0.0.0:%d", lp)
			}
			return fmt.Sprintf("127.0.0.1:%d", lp)
		case host == "127.0.0.1" || host == "localhost":
			// Loopback inside the pod: any port, declared or not.
			lp, ok := p.ports[port]
			if !ok {
				lp = freePort(p.lc.t)
				p.ports[port] = lp
			}
			return fmt.Sprintf("127.0.0.1:%d", lp)
		case p.lc.hosts[host] != nil:
			other := p.lc.hosts[host]
			lp, ok := other.ports[port]
			if !ok {
				errs = append(errs, fmt.Sprintf("%s: %q: pod %s declares no containerPort %d", p.name, m, other.name, port))
				return m
			}
			return fmt.Sprintf("127.0.0.1:%d", lp)
		case p.lc.svcs[host] != nil:
			svc := p.lc.svcs[host]
			target, err := p.lc.serviceTarget(svc, port)
			if err != nil {
				errs = append(errs, fmt.Sprintf("%s: %q: %v", p.name, m, err))
				return m
			}
			return target
		}
		if strings.Contains(host, ".svc") || strings.HasPrefix(host, releaseName) || net.ParseIP(host) != nil {
			errs = append(errs, fmt.Sprintf("%s: %q: %s resolves to nothing the chart renders", p.name, m, host))
		}
		return m
	})
	if len(errs) > 0 {
		return out, fmt.Errorf("%s", strings.Join(errs, "\n"))
	}
	return out, nil
}

// serviceTarget: a Service port goes to the targetPort of the first pod
// the Service selects.
func (lc *localCluster) serviceTarget(svc *corev1.Service, port int32) (string, error) {
	pods := lc.svcPods[svc.Name]
	if len(pods) == 0 {
		return "", fmt.Errorf("Service %s selects no pod", svc.Name)
	}
	for _, sp := range svc.Spec.Ports {
		if sp.Port != port {
			continue
		}
		p := pods[0]
		tp := sp.TargetPort
		if tp.Type == intstr.Int && tp.IntVal == 0 {
			tp = intstr.FromInt32(sp.Port)
		}
		for _, c := range p.spec.Containers {
			for _, cp := range c.Ports {
				if (tp.Type == intstr.String && cp.Name == tp.StrVal) || (tp.Type == intstr.Int && cp.ContainerPort == tp.IntVal) {
					return p.hostPort(cp.ContainerPort), nil
				}
			}
		}
		return "", fmt.Errorf("Service %s port %d: targetPort %s is not a port of pod %s", svc.Name, port, tp.String(), p.name)
	}
	return "", fmt.Errorf("Service %s has no port %d", svc.Name, port)
}

// mounts maps each mount path of the pod's first container to a local
// directory (or file, for a subPath), longest path first.
type mount struct{ path, local string }

func (p *simPod) mounts(c *corev1.Container) []mount {
	t := p.lc.t
	var out []mount
	for _, vm := range c.VolumeMounts {
		local := filepath.Join(p.dir, "volumes", vm.Name)
		var vol *corev1.Volume
		for i := range p.spec.Volumes {
			if p.spec.Volumes[i].Name == vm.Name {
				vol = &p.spec.Volumes[i]
			}
		}
		if err := os.MkdirAll(local, 0o700); err != nil {
			t.Fatal(err)
		}
		switch {
		case vol == nil:
			if !slices.ContainsFunc(p.claims, func(c corev1.PersistentVolumeClaim) bool { return c.Name == vm.Name }) {
				t.Fatalf("%s mounts %s, which is neither a volume nor a claim", p.name, vm.Name)
			}
		case vol.EmptyDir != nil:
		case vol.ConfigMap != nil:
			cm := p.lc.r.ConfigMap(vol.ConfigMap.Name)
			if cm == nil {
				t.Fatalf("%s: ConfigMap %s is not rendered", p.name, vol.ConfigMap.Name)
			}
			files := map[string]string{}
			for k, v := range cm.Data {
				files[k] = v
			}
			if len(vol.ConfigMap.Items) > 0 {
				files = map[string]string{}
				for _, it := range vol.ConfigMap.Items {
					files[it.Path] = cm.Data[it.Key]
				}
			}
			p.pendingFiles = append(p.pendingFiles, pendingFile{local, files})
		case vol.Secret != nil:
			data, ok := p.lc.secrets[vol.Secret.SecretName]
			if !ok {
				t.Fatalf("%s: Secret %s is not rendered (the fidelity test runs with the chart's own Secrets)", p.name, vol.Secret.SecretName)
			}
			files := map[string]string{}
			for k, v := range data {
				files[k] = string(v)
			}
			p.pendingFiles = append(p.pendingFiles, pendingFile{local, files})
		default:
			t.Fatalf("%s: volume %s: kind not simulated", p.name, vm.Name)
		}
		if vm.SubPath != "" {
			local = filepath.Join(local, vm.SubPath)
		}
		out = append(out, mount{vm.MountPath, local})
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i].path) > len(out[j].path) })
	return out
}

type pendingFile struct {
	dir   string
	files map[string]string
}

// rewritePaths replaces mount paths (at path boundaries) with local ones,
// in one pass (a replacement is never rewritten again).
func rewritePaths(s string, ms []mount) string {
	isPathChar := func(c byte) bool {
		return c == '-' || c == '_' || c == '.' || c == '/' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		replaced := false
		if i == 0 || !isPathChar(s[i-1]) {
			for _, m := range ms { // longest first
				end := i + len(m.path)
				if strings.HasPrefix(s[i:], m.path) && (end == len(s) || s[end] == '/' || !isPathChar(s[end])) {
					b.WriteString(m.local)
					i = end
					replaced = true
					break
				}
			}
		}
		if !replaced {
			b.WriteByte(s[i])
			i++
		}
	}
	return b.String()
}

// expand applies the kubelet's $(VAR) expansion ($$ escapes a $).
func expand(s string, vars map[string]string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '$' && i+1 < len(s) {
			if s[i+1] == '$' {
				b.WriteByte('$')
				i++
				continue
			}
			if s[i+1] == '(' {
				if j := strings.IndexByte(s[i:], ')'); j > 0 {
					if v, ok := vars[s[i+2:i+j]]; ok {
						b.WriteString(v)
						i += j
						continue
					}
				}
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// prepare resolves the pod's command line, environment, working directory
// and files.
func (p *simPod) prepare() {
	t := p.lc.t
	if len(p.spec.Containers) != 1 {
		t.Fatalf("%s: the fidelity test runs one container per pod, got %d", p.name, len(p.spec.Containers))
	}
	c := &p.spec.Containers[0]
	ms := p.mounts(c)
	fail := func(err error) {
		if err != nil {
			t.Fatalf("%s: %v", p.name, err)
		}
	}
	rewrite := func(s string) string {
		out, err := p.rewriteAddrs(rewritePaths(s, ms))
		fail(err)
		return out
	}
	vars := map[string]string{}
	var env []string
	for _, e := range c.Env {
		val := e.Value
		if vf := e.ValueFrom; vf != nil {
			switch {
			case vf.FieldRef != nil:
				switch vf.FieldRef.FieldPath {
				case "metadata.name":
					val = p.name
				case "metadata.namespace":
					val = namespace
				case "status.podIP":
					val = p.ip
				case "spec.nodeName":
					val = "fidelity-node" // one machine runs every pod
				default:
					t.Fatalf("%s: fieldRef %s not simulated", p.name, vf.FieldRef.FieldPath)
				}
			case vf.SecretKeyRef != nil:
				data, ok := p.lc.secrets[vf.SecretKeyRef.Name][vf.SecretKeyRef.Key]
				if !ok {
					t.Fatalf("%s: env %s: Secret %s has no key %s", p.name, e.Name, vf.SecretKeyRef.Name, vf.SecretKeyRef.Key)
				}
				val = string(data)
			case vf.ConfigMapKeyRef != nil:
				cm := p.lc.r.ConfigMap(vf.ConfigMapKeyRef.Name)
				if cm == nil {
					t.Fatalf("%s: env %s: no ConfigMap %s", p.name, e.Name, vf.ConfigMapKeyRef.Name)
				}
				val = cm.Data[vf.ConfigMapKeyRef.Key]
			default:
				t.Fatalf("%s: env %s: valueFrom not simulated", p.name, e.Name)
			}
		} else {
			val = expand(val, vars)
		}
		vars[e.Name] = val
		env = append(env, e.Name+"="+rewrite(val))
	}
	if len(c.Command) > 0 {
		t.Fatalf("%s: command %v: the chart must rely on the image's ENTRYPOINT", p.name, c.Command)
	}
	for _, a := range c.Args {
		p.argv = append(p.argv, rewrite(expand(a, vars)))
	}
	for _, pf := range p.pendingFiles {
		for name, content := range pf.files {
			fail(os.WriteFile(filepath.Join(pf.dir, name), []byte(rewrite(content)), 0o600))
		}
	}
	p.workdir = p.dir
	if c.WorkingDir != "" {
		p.workdir = rewritePaths(c.WorkingDir, ms)
	}
	fail(os.MkdirAll(p.workdir, 0o700))
	// A clean environment: PATH for tasks' shells, nothing ORION_* from the
	// test's own environment.
	p.env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + p.dir, "TMPDIR=" + rewritePaths("/tmp", ms)}, env...)
	p.logPath = filepath.Join(p.lc.root, p.name+".log")
}

// checkFlags: every --flag the chart passes exists in the binary.
func (lc *localCluster) checkFlags() {
	t := lc.t
	known := map[string]map[string]bool{}
	helpFlags := func(sub string) map[string]bool {
		if known[sub] == nil {
			out, _ := exec.Command(lc.bin, sub, "--help").CombinedOutput()
			m := map[string]bool{}
			for _, f := range regexp.MustCompile(`(?m)^\s+(?:-\w, )?--([a-z0-9-]+)`).FindAllStringSubmatch(string(out), -1) {
				m[f[1]] = true
			}
			known[sub] = m
		}
		return known[sub]
	}
	var missing []string
	all := append([]*simPod{}, lc.pods...)
	for _, o := range lc.r.All("Pod") {
		all = append(all, lc.hookPod(o.(*corev1.Pod).Name))
	}
	for _, p := range all {
		sub := ""
		for _, a := range p.argv {
			if !strings.HasPrefix(a, "-") {
				sub = a
				break
			}
		}
		flags := helpFlags(sub)
		for _, a := range p.argv {
			name, ok := strings.CutPrefix(a, "--")
			if !ok {
				continue
			}
			name, _, _ = strings.Cut(name, "=")
			if !flags[name] {
				missing = append(missing, fmt.Sprintf("`orion %s --%s` (%s)", sub, name, p.workload))
			}
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		t.Fatalf("the chart passes flags that %s does not have:\n  %s\nThe chart is rendered for these flags (see the product changes in charts/README.md); add them to orion, or point ORION_BIN at a binary that has them.",
			lc.bin, strings.Join(slices.Compact(missing), "\n  "))
	}
}

func (p *simPod) start() {
	if err := p.startProcess(); err != nil {
		p.lc.t.Fatalf("%s: %v", p.name, err)
	}
}

// startProcess may run outside the test goroutine (the fake kubectl).
func (p *simPod) startProcess() error {
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	fmt.Fprintf(logf, "=== %s %s\n", p.lc.bin, strings.Join(p.argv, " "))
	cmd := exec.Command(p.lc.bin, p.argv...)
	cmd.Dir = p.workdir
	cmd.Env = p.env
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	done := make(chan struct{})
	p.mu.Lock()
	p.cmd, p.done, p.exitErr = cmd, done, nil
	if p.uid == "" {
		p.uid = fmt.Sprintf("uid-%s-%d", p.name, time.Now().UnixNano())
	}
	p.mu.Unlock()
	go func() {
		err := cmd.Wait()
		logf.Close()
		p.mu.Lock()
		p.exitErr = err
		p.mu.Unlock()
		close(done)
	}()
	return nil
}

func (p *simPod) proc() (*exec.Cmd, chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd, p.done
}

func (p *simPod) running() bool {
	cmd, done := p.proc()
	if cmd == nil {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}

func (p *simPod) exitError() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exitErr
}

func (p *simPod) signal(sig syscall.Signal) {
	if cmd, _ := p.proc(); cmd != nil && p.running() {
		_ = cmd.Process.Signal(sig)
	}
}

func (p *simPod) waitExit(d time.Duration) error {
	cmd, done := p.proc()
	if cmd == nil {
		return nil
	}
	select {
	case <-done:
		return nil
	case <-time.After(d):
		return fmt.Errorf("still running after %v", d)
	}
}

func (p *simPod) logTail() string {
	b, _ := os.ReadFile(p.logPath)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 30 {
		lines = lines[len(lines)-30:]
	}
	return strings.Join(lines, "\n")
}

func (lc *localCluster) startAll() {
	for _, p := range lc.pods {
		p.start()
	}
}

// stopAll stops every process it started, by PID, workload by workload in
// the reverse order of their start (workers, replicas, then etcd, as
// test/cluster.sh down does): SIGTERM, then SIGKILL after 15 s.
func (lc *localCluster) stopAll() {
	var order []string
	groups := map[string][]*simPod{}
	for _, p := range lc.pods {
		if groups[p.workload] == nil {
			order = append(order, p.workload)
		}
		groups[p.workload] = append(groups[p.workload], p)
	}
	for _, p := range lc.byName {
		if strings.HasPrefix(p.workload, "Pod/") {
			p.signal(syscall.SIGKILL)
		}
	}
	slices.Reverse(order)
	for _, wl := range order {
		for _, p := range groups[wl] {
			p.signal(syscall.SIGTERM)
		}
		deadline := time.Now().Add(15 * time.Second)
		for _, p := range groups[wl] {
			if err := p.waitExit(time.Until(deadline)); err != nil {
				lc.t.Logf("%s: no exit 15s after SIGTERM; SIGKILL", p.name)
				p.signal(syscall.SIGKILL)
				_ = p.waitExit(5 * time.Second)
			}
		}
	}
}

// probeURL: the local URL of an httpGet probe.
func (p *simPod) probeURL(pr *corev1.Probe) string {
	if pr == nil || pr.HTTPGet == nil {
		return ""
	}
	c := &p.spec.Containers[0]
	port := pr.HTTPGet.Port
	for _, cp := range c.Ports {
		if (port.Type == intstr.String && cp.Name == port.StrVal) || (port.Type == intstr.Int && cp.ContainerPort == port.IntVal) {
			return "http://" + p.hostPort(cp.ContainerPort) + pr.HTTPGet.Path
		}
	}
	p.lc.t.Fatalf("%s: probe port %s is not a container port", p.name, port.String())
	return ""
}

func (lc *localCluster) waitPodReady(p *simPod, d time.Duration) {
	t := lc.t
	c := &p.spec.Containers[0]
	probes := []*corev1.Probe{c.StartupProbe, c.ReadinessProbe, c.LivenessProbe}
	deadline := time.Now().Add(d)
	for _, pr := range probes {
		u := p.probeURL(pr)
		if u == "" {
			continue
		}
		for {
			if !p.running() {
				t.Fatalf("%s exited (%v) before %s answered:\n%s", p.name, p.exitError(), u, p.logTail())
			}
			resp, err := http.Get(u)
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode >= 200 && resp.StatusCode < 400 {
					break
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: probe %s not passing after %v (last: %v %v):\n%s", p.name, u, d, resp, err, p.logTail())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	if p.probeURL(c.ReadinessProbe) == "" {
		// No probe (workers): alive for a second is all we can check here;
		// the cluster endpoint must list them.
		time.Sleep(time.Second)
		if !p.running() {
			t.Fatalf("%s exited (%v):\n%s", p.name, p.exitError(), p.logTail())
		}
	}
}

func (lc *localCluster) waitReady(d time.Duration) {
	for _, p := range lc.pods {
		lc.waitPodReady(p, d)
	}
}

// serverURL: the API URL the workers are given (the API Service), mapped.
func (lc *localCluster) serverURL() string {
	for _, p := range lc.pods {
		if v, ok := flagValue(p.argv, "server"); ok && strings.HasPrefix(p.workload, "Deployment/") {
			return strings.Split(v, ",")[0]
		}
	}
	lc.t.Fatal("no worker with --server")
	return ""
}

type clusterInfo struct {
	Leader   string `json:"leader"`
	Replicas []struct {
		Name          string     `json:"name"`
		Role          string     `json:"role"`
		APIURL        string     `json:"api_url"`
		Reachable     bool       `json:"reachable"`
		FirstCommitAt *time.Time `json:"first_commit_at"`
	} `json:"replicas"`
	Workers []struct {
		ID        string `json:"id"`
		Replica   string `json:"replica"`
		Slots     int    `json:"slots"`
		Connected bool   `json:"connected"`
	} `json:"workers"`
	Etcd struct {
		Members []struct {
			Name       string   `json:"name"`
			ClientURLs []string `json:"client_urls"`
			PeerURLs   []string `json:"peer_urls"`
		} `json:"members"`
	} `json:"etcd"`
}

func (c clusterInfo) workers() []string {
	var out []string
	for _, w := range c.Workers {
		if w.Replica == "" && w.Connected {
			out = append(out, w.ID)
		}
	}
	return out
}

// checkHostNames: the processes are reached on 127.0.0.1, but a pod in the
// cluster sends the names it dialled as Host. Every name of every Service
// that selects the replicas, and each replica's headless name, must be
// served; a name the chart does not own gets 421 (DNS rebinding).
func (lc *localCluster) checkHostNames(api string) {
	lc.t.Helper()
	var names []string
	for host, svc := range lc.svcs {
		for _, p := range lc.svcPods[svc.Name] {
			if p.workload == "StatefulSet/"+schedSTS {
				names = append(names, host)
				break
			}
		}
	}
	get := func(host string) int {
		req, _ := http.NewRequest(http.MethodGet, api+"/api/v1/cluster/self", nil)
		req.Host = host + ":8080"
		req.Header.Set("Authorization", "Bearer "+lc.apiToken())
		resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
		if err != nil {
			lc.t.Fatalf("Host %s: %v", host, err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, h := range names {
		if code := get(h); code != http.StatusOK {
			lc.t.Errorf("Host %s (a name the chart's clients use): %d, want 200", h, code)
		}
	}
	// With scheduler.advertise=dns each replica advertises (and is dialled
	// by) its own name behind the headless Service; another replica's name
	// is misdirected here.
	var self struct {
		Name string `json:"name"`
	}
	if code, body, err := lc.call(http.MethodGet, api+"/api/v1/cluster/self", nil); err != nil || code != http.StatusOK || json.Unmarshal(body, &self) != nil {
		lc.t.Fatalf("cluster/self: %d %v", code, err)
	}
	for _, p := range lc.podsOf("StatefulSet", schedSTS) {
		for _, h := range []string{p.name + "." + schedHeadles + "." + namespace + ".svc." + domain, p.name + "." + schedHeadles + "." + namespace} {
			want := http.StatusOK
			if p.name != self.Name {
				want = http.StatusMisdirectedRequest
			} else {
				names = append(names, h)
			}
			if code := get(h); code != want {
				lc.t.Errorf("Host %s at replica %s: %d, want %d", h, self.Name, code, want)
			}
		}
	}
	if code := get("rebind.example"); code != http.StatusMisdirectedRequest {
		lc.t.Errorf("Host rebind.example: %d, want 421", code)
	}
	lc.t.Logf("%d Service and pod names are served; a foreign name gets 421", len(names))
}

func (lc *localCluster) call(method, url string, body []byte) (int, []byte, error) {
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+lc.apiToken())
	cl := &http.Client{Timeout: 5 * time.Second}
	resp, err := cl.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// apiToken: the rendered Secret's token, as the replicas get it (the
// cluster token: the workers hold a worker token of their own).
func (lc *localCluster) apiToken() string {
	if lc.token == "" {
		for _, p := range lc.pods {
			if !strings.Contains(p.name, "scheduler") {
				continue
			}
			for _, e := range p.env {
				if v, ok := strings.CutPrefix(e, "ORION_AUTH_TOKEN="); ok {
					lc.token = v
				}
			}
		}
		if lc.token == "" {
			lc.t.Fatal("no pod gets ORION_AUTH_TOKEN")
		}
	}
	return lc.token
}

func (lc *localCluster) waitCluster(base string, d time.Duration, ok func(clusterInfo) error) clusterInfo {
	t := lc.t
	deadline := time.Now().Add(d)
	var last error
	for {
		code, b, err := lc.call("GET", base+"/api/v1/cluster", nil)
		if err == nil && code == http.StatusOK {
			var c clusterInfo
			if err = json.Unmarshal(b, &c); err == nil {
				if err = ok(c); err == nil {
					return c
				}
			}
		} else if err == nil {
			err = fmt.Errorf("HTTP %d: %s", code, b)
		}
		last = err
		if time.Now().After(deadline) {
			t.Fatalf("cluster (via %s) not as expected after %v: %v", base, d, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// checkClusterShape: a leader; every replica registered under its pod name,
// reachable at the address it advertises (the pod's); every worker
// connected; every etcd member under its pod name and advertised peer URL.
func (lc *localCluster) checkClusterShape(c clusterInfo) error {
	if c.Leader == "" {
		return fmt.Errorf("no leader yet")
	}
	sched := lc.podsOf("StatefulSet", schedSTS)
	if len(c.Replicas) != len(sched) {
		return fmt.Errorf("%d replicas registered, want %d", len(c.Replicas), len(sched))
	}
	for _, rp := range c.Replicas {
		p := lc.byName[rp.Name]
		if p == nil || !strings.HasPrefix(p.workload, "StatefulSet/"+schedSTS) {
			return fmt.Errorf("replica %q is not a scheduler pod name", rp.Name)
		}
		if want := "http://" + p.hostPort(8080); rp.APIURL != want || !rp.Reachable {
			return fmt.Errorf("replica %s advertises %q (reachable %v), want its pod address %s", rp.Name, rp.APIURL, rp.Reachable, want)
		}
	}
	workers := lc.podsOf("Deployment", workerDeploy)
	if got := c.workers(); len(got) != len(workers) {
		return fmt.Errorf("%d workers connected (%v), want %d", len(got), got, len(workers))
	}
	members := lc.podsOf("StatefulSet", etcdSTS)
	if len(c.Etcd.Members) != len(members) {
		return fmt.Errorf("%d etcd members, want %d", len(c.Etcd.Members), len(members))
	}
	for _, m := range c.Etcd.Members {
		p := lc.byName[m.Name]
		if p == nil {
			return fmt.Errorf("etcd member %q is not an etcd pod name", m.Name)
		}
		if want := "http://" + p.hostPort(2380); !slices.Contains(m.PeerURLs, want) {
			return fmt.Errorf("etcd member %s peer URLs %v, want %s (its advertised, stable name)", m.Name, m.PeerURLs, want)
		}
	}
	return nil
}

// runDAG submits a DAG with shell tasks and waits until it succeeds; the
// shell tasks must have run on the worker pods.
func (lc *localCluster) runDAG(base, id string) {
	t := lc.t
	dag := map[string]any{
		"id":   id,
		"name": "chart fidelity " + id,
		"tasks": []map[string]any{
			{"id": "hello", "kind": "shell", "command": `echo "hello from $ORION_TASK_ID of $ORION_DAG_ID"`},
			{"id": "noop", "kind": "noop", "depends_on": []string{"hello"}},
			{"id": "nap", "kind": "sleep", "duration": "300ms", "depends_on": []string{"hello"}},
			{"id": "check", "kind": "shell", "command": `test -n "$ORION_DAG_ID" && pwd`, "depends_on": []string{"noop", "nap"}},
		},
	}
	body, _ := json.Marshal(dag)
	deadline := time.Now().Add(60 * time.Second)
	for {
		code, b, err := lc.call("POST", base+"/api/v1/dags", body)
		if err == nil && (code == http.StatusCreated || code == http.StatusOK) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("POST /api/v1/dags: %d %s %v", code, b, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	var view struct {
		Status string `json:"status"`
		Tasks  []struct {
			ID         string `json:"id"`
			Status     string `json:"status"`
			Worker     string `json:"worker"`
			OutputTail string `json:"output_tail"`
		} `json:"tasks"`
	}
	for {
		code, b, err := lc.call("GET", base+"/api/v1/dags/"+id, nil)
		if err == nil && code == http.StatusOK {
			if err := json.Unmarshal(b, &view); err != nil {
				t.Fatal(err)
			}
			if view.Status == "succeeded" {
				break
			}
			if view.Status == "failed" || view.Status == "cancelled" {
				t.Fatalf("DAG %s %s: %s", id, view.Status, b)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("DAG %s not succeeded after 60s: %d %s %v", id, code, b, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, task := range view.Tasks {
		if task.ID != "hello" && task.ID != "check" {
			continue
		}
		name, _, _ := strings.Cut(task.Worker, "/")
		if p := lc.byName[name]; p == nil || !strings.HasPrefix(p.workload, "Deployment/"+workerDeploy) {
			t.Errorf("DAG %s task %s ran on %q, not on a worker pod", id, task.ID, task.Worker)
		}
	}
	t.Logf("DAG %s succeeded", id)
}

// hookPod prepares a bare Pod (the helm test) like a workload pod.
func (lc *localCluster) hookPod(name string) *simPod {
	if p := lc.byName[name]; p != nil {
		return p
	}
	pod, _ := lc.r.Get("Pod", name).(*corev1.Pod)
	if pod == nil {
		lc.t.Fatalf("no Pod %s rendered", name)
	}
	p := &simPod{lc: lc, name: name, workload: "Pod/" + name, ip: "10.244.1.1", labels: pod.Labels,
		spec: pod.Spec.DeepCopy(), dir: filepath.Join(lc.root, name), ports: map[int32]int{}}
	lc.byName[name] = p
	p.prepare()
	return p
}

// runHookPod runs a helm test pod to completion: it must exit 0.
func (lc *localCluster) runHookPod(name string, d time.Duration) {
	p := lc.hookPod(name)
	p.start()
	if err := p.waitExit(d); err != nil {
		p.signal(syscall.SIGKILL)
		lc.t.Fatalf("helm test pod %s: %v:\n%s", name, err, p.logTail())
	}
	if err := p.exitError(); err != nil {
		lc.t.Fatalf("helm test pod %s failed: %v:\n%s", name, err, p.logTail())
	}
	lc.t.Logf("helm test pod %s passed", name)
}
