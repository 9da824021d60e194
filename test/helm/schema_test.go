package helm

import (
	"strings"
	"testing"
)

// TestSchemaRejects: values.schema.json (or, for rules a JSON schema cannot
// express, the chart's own checks) refuses bad values with a message that
// names the value.
func TestSchemaRejects(t *testing.T) {
	cases := []struct {
		name string
		args []string
		want string // in helm's error
	}{
		{"scheduler replicas 0", []string{"--set", "scheduler.replicas=0"}, "scheduler.replicas"},
		{"negative scheduler replicas", []string{"--set", "scheduler.replicas=-1"}, "scheduler.replicas"},
		{"bad pullPolicy", []string{"--set", "image.pullPolicy=Sometimes"}, "image.pullPolicy"},
		{"bad component pullPolicy", []string{"--set", "workers.image.pullPolicy=Often"}, "workers.image.pullPolicy"},
		{"negative worker slots", []string{"--set", "workers.slots=-1"}, "workers.slots"},
		{"zero worker slots", []string{"--set", "workers.slots=0"}, "workers.slots"},
		{"negative replica slots", []string{"--set", "config.slots=-2"}, "config.slots"},
		{"even etcd members", []string{"--set", "etcd.replicas=2"}, "etcd.replicas"},
		{"etcd replicas as a string", []string{"--set-string", "etcd.replicas=3"}, "etcd.replicas"},
		{"unknown key (typo)", []string{"--set", "scheduler.replica=3"}, "replica"},
		{"unknown top-level key", []string{"--set", "etcdEndpoints=http://x:2379"}, "etcdEndpoints"},
		{"unknown config key", []string{"--set", "config.listen=0.0.0.0:9090"}, "listen"},
		{"bad log format", []string{"--set", "config.log_format=xml"}, "config.log_format"},
		{"bad duration", []string{"--set", "config.retention=forever"}, "config.retention"},
		{"sub-second session ttl", []string{"--set", "config.session_ttl=500ms"}, "config.session_ttl"},
		{"zero rate limit", []string{"--set", "config.rate_limit=0"}, "config.rate_limit"},
		{"short token", []string{"--set", "auth.token=short"}, "auth.token"},
		{"external etcd without endpoints", []string{"--set", "etcd.enabled=false"}, "endpoints"},
		{"endpoint that is not a URL", []string{"--set", "etcd.enabled=false", "--set", "etcd.endpoints={etcd:2379}"}, "endpoints"},
		{"TLS without a Secret", []string{"--set", "etcd.enabled=false", "--set", "etcd.endpoints={https://e:2379}", "--set", "etcd.tls.enabled=true"}, "existingSecret"},
		{"TLS with http endpoints", []string{"--set", "etcd.enabled=false", "--set", "etcd.endpoints={http://e:2379}",
			"--set", "etcd.tls.enabled=true", "--set", "etcd.tls.existingSecret=s"}, "endpoints"},
		{"bad port", []string{"--set", "scheduler.port=70000"}, "scheduler.port"},
		{"bad PVC size", []string{"--set", "etcd.persistence.size=lots"}, "etcd.persistence.size"},
		{"bad service type", []string{"--set", "scheduler.service.type=Ingress"}, "scheduler.service.type"},
		{"bad anti-affinity", []string{"--set", "scheduler.antiAffinity=maybe"}, "scheduler.antiAffinity"},
		{"bad advertise", []string{"--set", "scheduler.advertise=hostname"}, "scheduler.advertise"},
		{"bad compaction mode", []string{"--set", "etcd.autoCompaction.mode=sometimes"}, "etcd.autoCompaction.mode"},
		{"bad HPA target", []string{"--set", "workers.autoscaling.targetCPUUtilizationPercentage=150"}, "targetCPUUtilizationPercentage"},
		{"long fullname", []string{"--set", "fullnameOverride=" + strings.Repeat("o", 41)}, "fullnameOverride"},
		{"bad pod tasks namespace", []string{"--set", "workers.podTasks.namespace=Jobs_1"}, "workers.podTasks.namespace"},
		{"bad pod tasks duration", []string{"--set", "workers.podTasks.deleteFailed=ten minutes"}, "workers.podTasks.deleteFailed"},
		{"unknown pod tasks key", []string{"--set", "workers.podTasks.clusterRole=true"}, "clusterRole"},
		// The chart's own checks (templates/_helpers.tpl orion.validate).
		{"no one runs tasks", []string{"--set", "workers.enabled=false"}, "config.slots"},
		{"txn larger than etcd allows", []string{"--set", "config.max_txn_ops=2048"}, "max_txn_ops"},
		{"election below 5 heartbeats", []string{"--set", "etcd.electionMs=100"}, "electionMs"},
		{"token and existing Secret", []string{"--set", "auth.token=0123456789abcdef0", "--set", "auth.existingSecret=s"}, "not both"},
		{"TLS on the chart's own etcd", []string{"--set", "etcd.tls.enabled=true", "--set", "etcd.tls.existingSecret=s"}, "etcd.tls"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			out, err := helmTemplate(t, c.args...)
			if err == nil {
				t.Fatalf("helm template %v succeeded; want it refused (%d bytes rendered)", c.args, len(out))
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error does not name %q:\n%v", c.want, err)
			}
		})
	}
}

// TestSchemaAccepts: the values a user is expected to set pass.
func TestSchemaAccepts(t *testing.T) {
	for _, args := range [][]string{
		{"--set", "image.digest=sha256:" + strings.Repeat("a", 64)},
		{"--set", "config.retention=0"},
		{"--set-json", "config.rate_limit=2.5"},
		{"--set-json", "config.shutdown_grace=0"},
		{"--set", "etcd.autoCompaction.mode=periodic", "--set", "etcd.autoCompaction.retention=1h"},
		{"--set", "etcd.persistence.enabled=false"},
		{"--set", "etcd.persistence.storageClass=-"},
		{"--set", "scheduler.pdb.maxUnavailable=50%"},
		{"--set", "etcd.replicas=1"},
		{"--set", "etcd.enabled=false", "--set", "etcd.endpoints={http://etcd.db:2379}"},
		{"--set", "etcd.enabled=false", "--set", "etcd.endpoints={https://etcd.db:2379}", "--set", "etcd.tls.enabled=true",
			"--set", "etcd.tls.existingSecret=ca-only", "--set", "etcd.tls.certKey="},
		{"--set", "tests.enabled=false", "--set", "serviceAccount.create=false"},
		{"--set", "etcd.networkPolicy.enabled=false", "--set", "scheduler.preStopSleepSeconds=0"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			t.Parallel()
			out, err := helmTemplate(t, args...)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := decodeAll(out); err != nil {
				t.Fatal(err)
			}
		})
	}
}
