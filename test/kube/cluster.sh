#!/usr/bin/env bash
# A real single-node Kubernetes cluster on this machine, for the chart's
# live tests (make kube-up / kube-test / kube-down; docs/kubernetes.md).
#
#   test/kube/cluster.sh build    build (or reuse) the pinned binaries and images
#   test/kube/cluster.sh up       build, then start etcd, containerd, the control
#                                 plane, kubelet, kube-proxy, CoreDNS and storage
#   test/kube/cluster.sh down     stop everything it started and undo its
#                                 kernel state (bridge, netns, iptables, sysctl)
#   test/kube/cluster.sh check    exit 0 if the machine can run it, else say why
#   test/kube/cluster.sh cached   exit 0 if the pinned binaries are already built
#   test/kube/cluster.sh env      print the KUBECONFIG/KUBECTL/... exports
#
# Nothing is downloaded but Go modules and Debian packages: Kubernetes and
# CoreDNS are built from their Go modules at pinned versions, containerd,
# runc, the CNI plugins and etcd come from Debian, and the images (orion,
# orion worker, pause, CoreDNS) are written locally with go-containerregistry
# (test/kube/imagebuild) and imported with `ctr images import`. Binaries and
# images are cached by version under $ORION_KUBE_CACHE (/var/cache/orion-kube),
# outside the checkout, so a warm `up` takes about 20 s.
#
# Network: every listener is on 127.0.0.1 or on the cluster's own bridge
# (okube0, 10.244.0.1/24, the node's address); the Service range
# 10.96.0.0/24 exists only in this machine's iptables. A FORWARD rule drops
# anything the pods send off the bridge. Root only.
set -Eeuo pipefail

KUBE_VERSION=${KUBE_VERSION:-v1.35.4}
COREDNS_VERSION=${COREDNS_VERSION:-v1.14.7}
CACHE=${ORION_KUBE_CACHE:-/var/cache/orion-kube}
STATE=${ORION_KUBE_STATE:-/var/lib/orion-kube}
RUN=/run/orion-kube
REPO=$(cd "$(dirname "$0")/../.." && pwd)
HERE=$REPO/test/kube

NODE=orion-kube
BRIDGE=okube0
NODE_IP=10.244.0.1
POD_CIDR=10.244.0.0/24
SVC_CIDR=10.96.0.0/24
API_SVC_IP=10.96.0.1
DNS_IP=10.96.0.10
ETCD_CLIENT=127.0.0.1:23790
ETCD_PEER=127.0.0.1:23800
SOCK=$RUN/containerd/containerd.sock
KBIN=$CACHE/kubernetes-$KUBE_VERSION/bin
COREDNS_BIN=$CACHE/coredns-$COREDNS_VERSION-min/coredns
IMAGES=$CACHE/images
ORION_IMAGE=orion.local/orion:kube
PAUSE_IMAGE=orion.local/pause:kube
COREDNS_IMAGE=orion.local/coredns:$COREDNS_VERSION
KUBECONFIG_ADMIN=$STATE/pki/admin.kubeconfig
PV_COUNT=${ORION_KUBE_PVS:-8}

export GOFLAGS=-buildvcs=false
# Say where a step failed (set -e alone exits silently).
trap 'rc=$?; echo "$(date -u +%H:%M:%S) kube: ERROR: \"$BASH_COMMAND\" failed (exit $rc) at line $LINENO" >&2' ERR
log() { printf '%s kube: %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
T0=$(date +%s)
elapsed() { echo $(( $(date +%s) - T0 )); }

# --- can this machine run it? -----------------------------------------------
# Exit 0 when it can; otherwise print why and exit 3 (callers skip on 3).
check() {
  local why=""
  [ "$(id -u)" = 0 ] || why="not root"
  [ -z "$why" ] && [ "$(uname -s)" = Linux ] || why=${why:-"not Linux"}
  if [ -z "$why" ]; then
    [ -d /sys/fs/cgroup/memory ] || [ -f /sys/fs/cgroup/cgroup.controllers ] || why="no memory cgroup"
  fi
  if [ -z "$why" ]; then
    grep -qw overlay /proc/filesystems || why="no overlay filesystem"
  fi
  if [ -z "$why" ]; then
    ip link add okube-probe type bridge 2>/dev/null && ip link del okube-probe || why="cannot create a bridge"
  fi
  if [ -z "$why" ]; then
    if ! ip netns add okube-probe 2>/dev/null; then why="cannot create a network namespace"; else ip netns del okube-probe; fi
  fi
  if [ -z "$why" ]; then
    { [ -w /proc/sys/net/ipv4/ip_forward ] && [ -e /proc/sys/net/bridge/bridge-nf-call-iptables ]; } || why="cannot set ip_forward or no br_netfilter"
  fi
  if [ -n "$why" ]; then
    echo "kube: this machine cannot run the test cluster: $why" >&2
    return 3
  fi
}

# --- build (cached by version) ----------------------------------------------
need_apt() {
  local missing=()
  command -v containerd >/dev/null || missing+=(containerd)
  command -v runc >/dev/null || missing+=(runc)
  [ -x /usr/lib/cni/bridge ] || missing+=(containernetworking-plugins)
  command -v etcd >/dev/null || missing+=(etcd-server)
  command -v conntrack >/dev/null || missing+=(conntrack)
  command -v iptables >/dev/null || missing+=(iptables)
  command -v openssl >/dev/null || missing+=(openssl)
  [ -x /bin/busybox ] || missing+=(busybox-static)
  if [ ${#missing[@]} -gt 0 ]; then
    log "apt-get install ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
  # Debian's containerd package may start its own daemon under an init
  # system; ours runs with its own socket and root, so that one is left alone.
}

build_kubernetes() {
  local want=(kube-apiserver kube-controller-manager kube-scheduler kube-proxy kubelet kubectl) b ok=1
  for b in "${want[@]}"; do [ -x "$KBIN/$b" ] || ok=0; done
  [ $ok = 1 ] && return 0
  local t=$(date +%s) src=$CACHE/kubernetes-$KUBE_VERSION/src minor=${KUBE_VERSION#v1.}
  minor=${minor%%.*}
  log "building Kubernetes $KUBE_VERSION from its Go module (5-16 minutes on 2 cores, once)"
  local dir
  dir=$(cd /tmp && go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" | sed -n 's/^\s*"Dir": "\(.*\)",$/\1/p')
  [ -d "$dir" ] || die "go mod download k8s.io/kubernetes@$KUBE_VERSION failed"
  rm -rf "$src"; mkdir -p "$src"
  cp -r "$dir/." "$src/"; chmod -R u+w "$src"
  # The module zip has no staging/ tree (nested modules are cut out), so its
  # ./staging replaces point nowhere: use the published k8s.io/* v0.<minor>
  # modules instead, and drop vendor/ and go.work which describe the repo.
  sed -i -E "s#^(\s+k8s\.io/[a-z-]+) => \./staging/src/k8s\.io/[a-z-]+#\1 => \1 v0.${KUBE_VERSION#v1.}#" "$src/go.mod"
  rm -rf "$src/vendor" "$src/go.work" "$src/go.work.sum"
  local pkg=k8s.io/component-base/version
  local ld="-s -w -X $pkg.gitVersion=$KUBE_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean -X $pkg.gitCommit=0000000000000000000000000000000000000000 -X $pkg.buildDate=1970-01-01T00:00:00Z"
  mkdir -p "$KBIN.tmp"
  ( cd "$src" && GOWORK=off GOFLAGS="-mod=mod -buildvcs=false" CGO_ENABLED=0 nice -n 5 \
      go build -trimpath -ldflags "$ld" -o "$KBIN.tmp/" \
      ./cmd/kube-apiserver ./cmd/kube-controller-manager ./cmd/kube-scheduler ./cmd/kube-proxy ./cmd/kubelet ./cmd/kubectl )
  rm -rf "$KBIN"; mv "$KBIN.tmp" "$KBIN"; rm -rf "$src"
  log "Kubernetes $KUBE_VERSION built in $(( $(date +%s) - t )) s"
}

build_coredns() {
  [ -x "$COREDNS_BIN" ] && return 0
  local t=$(date +%s)
  log "building CoreDNS $COREDNS_VERSION (test/kube/coredns: the plugins the Corefile uses) from its Go module (once)"
  grep -q "github.com/coredns/coredns $COREDNS_VERSION" "$HERE/coredns/go.mod" || die "test/kube/coredns/go.mod does not pin CoreDNS $COREDNS_VERSION"
  mkdir -p "$(dirname "$COREDNS_BIN")"
  ( cd "$HERE/coredns" && CGO_ENABLED=0 nice -n 5 go build -trimpath -ldflags '-s -w' -o "$COREDNS_BIN" . )
  log "CoreDNS built in $(( $(date +%s) - t )) s"
}

imagebuild() { "$CACHE/tools/imagebuild" "$@"; }

build_images() {
  mkdir -p "$IMAGES" "$CACHE/tools"
  ( cd "$HERE" && CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$CACHE/tools/imagebuild" ./imagebuild \
      && CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$CACHE/tools/pause" ./pause )
  [ -f "$IMAGES/pause.tar" ] || imagebuild -tag "$PAUSE_IMAGE" -out "$IMAGES/pause.tar" \
      -file "$CACHE/tools/pause:/pause:0755" -entrypoint /pause -user 65535:65535
  [ -f "$IMAGES/coredns-$COREDNS_VERSION.tar" ] || imagebuild -tag "$COREDNS_IMAGE" -out "$IMAGES/coredns-$COREDNS_VERSION.tar" \
      -file "$COREDNS_BIN:/coredns:0755" -entrypoint /coredns -user 65532:65532
  # Orion: built from this checkout every time (the Go build cache keeps it
  # quick), the same command as deploy/Dockerfile's build stage.
  local out=$STATE/images
  mkdir -p "$out"
  ( cd "$REPO" && CGO_ENABLED=0 GOOS=linux go build -trimpath -buildvcs=false -ldflags="-s -w" -o "$out/orion" ./cmd/orion )
  # The server image (deploy/Dockerfile's "server" target: the binary alone).
  imagebuild -tag "$ORION_IMAGE" -out "$out/orion.tar" \
      -file "$out/orion:/orion:0755" -dir /tmp -entrypoint /orion -cmd server -user 65532:65532
  # The worker image ("worker" target): a shell for shell tasks. Debian's
  # busybox-static stands in for bookworm-slim.
  local links=() a
  for a in sh sleep cat date echo env hostname id ls mkdir rm touch true false wc grep head tail printf test seq; do
    links+=(-symlink "/bin/$a:busybox")
  done
  imagebuild -tag "${ORION_IMAGE}-worker" -out "$out/orion-worker.tar" \
      -dir /bin -dir /usr -dir /usr/local -dir /usr/local/bin -dir /tmp -dir /work:65532 -dir /var -dir /var/lib -dir /var/lib/orion:65532 \
      -file "/bin/busybox:/bin/busybox:0755" "${links[@]}" \
      -file "$out/orion:/usr/local/bin/orion:0755" -entrypoint /usr/local/bin/orion -cmd worker \
      -user 65532:65532 -workdir /work
}

build() {
  need_apt
  build_kubernetes
  build_coredns
  build_images
  log "build done at $(elapsed) s"
}

# --- certificates -----------------------------------------------------------
pki() {
  local d=$STATE/pki
  [ -f "$d/admin.kubeconfig" ] && return 0
  mkdir -p "$d"; cd "$d"
  openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 30 -subj "/CN=orion-kube-ca" 2>/dev/null
  openssl genrsa -out sa.key 2048 2>/dev/null
  openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
  cert() { # name CN O [SANs]
    local name=$1 cn=$2 o=$3 san=${4:-}
    openssl req -newkey rsa:2048 -nodes -keyout "$name.key" -out "$name.csr" -subj "/CN=$cn${o:+/O=$o}" 2>/dev/null
    { echo "basicConstraints=CA:FALSE"; echo "keyUsage=digitalSignature,keyEncipherment"
      if [ -n "$san" ]; then echo "extendedKeyUsage=serverAuth,clientAuth"; echo "subjectAltName=$san"; else echo "extendedKeyUsage=clientAuth"; fi
    } > "$name.ext"
    openssl x509 -req -in "$name.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -out "$name.crt" -days 30 -extfile "$name.ext" 2>/dev/null
    rm -f "$name.csr" "$name.ext"
  }
  cert apiserver kube-apiserver "" "IP:$NODE_IP,IP:$API_SVC_IP,IP:127.0.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,DNS:$NODE"
  cert apiserver-kubelet-client kube-apiserver-kubelet-client system:masters
  cert admin kubernetes-admin system:masters
  cert controller-manager system:kube-controller-manager ""
  cert scheduler system:kube-scheduler ""
  cert kubelet "system:node:$NODE" system:nodes
  cert kube-proxy system:kube-proxy ""
  local n
  for n in admin controller-manager scheduler kubelet kube-proxy; do
    cat > "$n.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: orion-kube
  cluster:
    certificate-authority: $d/ca.crt
    server: https://$NODE_IP:6443
users:
- name: $n
  user:
    client-certificate: $d/$n.crt
    client-key: $d/$n.key
contexts:
- name: orion-kube
  context: {cluster: orion-kube, user: $n}
current-context: orion-kube
EOF
  done
  cd - >/dev/null
}

# --- processes --------------------------------------------------------------
# start NAME CMD...: run it in its own session, log to $STATE/logs/NAME.log,
# remember its PID in $RUN/pids/NAME.
start() {
  local name=$1; shift
  mkdir -p "$STATE/logs" "$RUN/pids"
  # Only stdin, stdout and stderr go to the daemon: a descriptor inherited
  # from the caller (flock /work/.locks/heavy make kube-up: the lock) would
  # stay open in the daemons for as long as the cluster is up, and a later
  # `flock ... make kube-down` would wait for it forever.
  (
    for fd in /proc/self/fd/*; do
      n=${fd##*/}
      [ "$n" -gt 2 ] && eval "exec $n>&-" 2>/dev/null
    done
    exec setsid "$@" >"$STATE/logs/$name.log" 2>&1 < /dev/null
  ) &
  echo $! > "$RUN/pids/$name"
}

wait_for() { # DESC SECONDS CMD...
  local desc=$1 secs=$2; shift 2
  local deadline=$(( $(date +%s) + secs ))
  until "$@" >/dev/null 2>&1; do
    if [ "$(date +%s)" -ge "$deadline" ]; then
      log "timed out after ${secs}s waiting for $desc"; return 1
    fi
    sleep 0.5
  done
}

kctl() { "$KBIN/kubectl" --kubeconfig "$KUBECONFIG_ADMIN" "$@"; }

up() {
  check || exit $?
  [ -f "$RUN/pids/kube-apiserver" ] && die "a cluster is already up (test/kube/cluster.sh down first)"
  # Leftovers of a run that was killed before its teardown: undo them.
  if ip link show "$BRIDGE" >/dev/null 2>&1 || [ -d "$RUN" ] || grep -qE " ($STATE|$RUN)/" /proc/self/mounts; then
    log "leftovers of an earlier cluster found: tearing them down first"
    down
  fi
  [ "${ORION_KUBE_SKIP_BUILD:-0}" = 1 ] || build
  local t_start=$(date +%s)
  mkdir -p "$STATE" "$RUN/pids"
  rm -rf "${STATE:?}/etcd" "$STATE/kubelet" "$STATE/cni" "$STATE/logs" "$STATE/pki" "$STATE/pv"
  # Kernel state, each piece recorded so that down undoes exactly it.
  cat /proc/sys/net/ipv4/ip_forward > "$RUN/ip_forward.orig"
  cat /proc/sys/net/bridge/bridge-nf-call-iptables > "$RUN/bridge-nf.orig"
  ip netns list 2>/dev/null | awk '{print $1}' | sort > "$RUN/netns.before"
  ip link add "$BRIDGE" type bridge
  ip addr add "$NODE_IP/24" dev "$BRIDGE"
  ip link set "$BRIDGE" up
  # The Service range is virtual (kube-proxy's iptables rules): route it to
  # the bridge so that nothing for it ever takes the default route.
  ip route add "$SVC_CIDR" dev "$BRIDGE" src "$NODE_IP"
  echo 1 > /proc/sys/net/ipv4/ip_forward
  echo 1 > /proc/sys/net/bridge/bridge-nf-call-iptables
  # Pods talk to each other, the node and the Services: nothing else.
  iptables -I FORWARD -i "$BRIDGE" ! -o "$BRIDGE" -m comment --comment orion-kube -j DROP
  touch "$RUN/forward-rule"

  pki
  # etcd (Debian's): the API server's store, on loopback ports of its own.
  start etcd etcd --name orion-kube --data-dir "$STATE/etcd" \
    --listen-client-urls "http://$ETCD_CLIENT" --advertise-client-urls "http://$ETCD_CLIENT" \
    --listen-peer-urls "http://$ETCD_PEER" --initial-advertise-peer-urls "http://$ETCD_PEER" \
    --initial-cluster "orion-kube=http://$ETCD_PEER" --log-level warn --quota-backend-bytes 2147483648
  # containerd with its own root, state and socket.
  mkdir -p "$STATE/containerd" "$RUN/containerd" "$STATE/cni/net.d"
  cat > "$STATE/containerd/config.toml" <<EOF
version = 2
root = "$STATE/containerd/root"
state = "$RUN/containerd/state"
[grpc]
  address = "$SOCK"
[ttrpc]
  address = "$RUN/containerd/containerd.sock.ttrpc"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  # No CAP_SYS_RESOURCE here: lowering a container's oom_score_adj fails.
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$STATE/cni/net.d"
EOF
  cat > "$STATE/cni/net.d/10-orion-kube.conflist" <<EOF
{"cniVersion": "0.4.0", "name": "orion-kube", "plugins": [
  {"type": "bridge", "bridge": "$BRIDGE", "isGateway": true, "ipMasq": false, "hairpinMode": true,
   "ipam": {"type": "host-local", "dataDir": "$STATE/cni/ipam",
            "ranges": [[{"subnet": "$POD_CIDR", "rangeStart": "10.244.0.10", "gateway": "$NODE_IP"}]],
            "routes": [{"dst": "0.0.0.0/0"}]}}]}
EOF
  start containerd containerd --config "$STATE/containerd/config.toml"
  wait_for etcd 30 etcdctl --endpoints "http://$ETCD_CLIENT" endpoint health
  wait_for containerd 30 ctr -a "$SOCK" version
  local img
  for img in "$IMAGES/pause.tar" "$IMAGES/coredns-$COREDNS_VERSION.tar" "$STATE/images/orion.tar" "$STATE/images/orion-worker.tar"; do
    ctr -a "$SOCK" -n k8s.io images import --all-platforms "$img" >/dev/null
  done

  local P=$STATE/pki
  start kube-apiserver "$KBIN/kube-apiserver" \
    --advertise-address="$NODE_IP" --bind-address="$NODE_IP" --secure-port=6443 \
    --etcd-servers="http://$ETCD_CLIENT" \
    --service-cluster-ip-range="$SVC_CIDR" --service-node-port-range=30000-30100 \
    --client-ca-file="$P/ca.crt" --tls-cert-file="$P/apiserver.crt" --tls-private-key-file="$P/apiserver.key" \
    --kubelet-client-certificate="$P/apiserver-kubelet-client.crt" --kubelet-client-key="$P/apiserver-kubelet-client.key" \
    --kubelet-preferred-address-types=InternalIP \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="$P/sa.pub" --service-account-signing-key-file="$P/sa.key" \
    --authorization-mode=Node,RBAC --allow-privileged=true \
    --enable-admission-plugins=NodeRestriction \
    --profiling=false --v=1
  wait_for kube-apiserver 90 kctl get --raw /readyz
  start kube-controller-manager "$KBIN/kube-controller-manager" \
    --kubeconfig="$P/controller-manager.kubeconfig" --authentication-kubeconfig="$P/controller-manager.kubeconfig" \
    --authorization-kubeconfig="$P/controller-manager.kubeconfig" --bind-address=127.0.0.1 \
    --service-account-private-key-file="$P/sa.key" --root-ca-file="$P/ca.crt" \
    --cluster-signing-cert-file="$P/ca.crt" --cluster-signing-key-file="$P/ca.key" \
    --use-service-account-credentials=true --service-cluster-ip-range="$SVC_CIDR" \
    --leader-elect=false --profiling=false --v=1
  start kube-scheduler "$KBIN/kube-scheduler" \
    --kubeconfig="$P/scheduler.kubeconfig" --authentication-kubeconfig="$P/scheduler.kubeconfig" \
    --authorization-kubeconfig="$P/scheduler.kubeconfig" --bind-address=127.0.0.1 \
    --leader-elect=false --profiling=false --v=1

  printf 'nameserver %s\nsearch cluster.local\n' "$DNS_IP" > "$STATE/resolv.conf"
  printf '# no upstream: pods resolve only cluster names\n' > "$STATE/resolv-host.conf"
  cat > "$STATE/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $NODE_IP
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $P/ca.crt}
authorization: {mode: Webhook}
cgroupDriver: cgroupfs
# This machine has cgroup v1 (hybrid); v1.35's kubelet refuses it by default.
failCgroupV1: false
# No CAP_SYS_RESOURCE: the kubelet cannot lower its own oom_score_adj.
oomScoreAdj: 0
clusterDomain: cluster.local
clusterDNS: [$DNS_IP]
resolvConf: $STATE/resolv-host.conf
containerRuntimeEndpoint: unix://$SOCK
failSwapOn: false
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%}
maxPods: 150
podPidsLimit: 4096
EOF
  start kubelet "$KBIN/kubelet" --config="$STATE/kubelet.yaml" --kubeconfig="$P/kubelet.kubeconfig" \
    --root-dir="$STATE/kubelet" --hostname-override="$NODE" --node-ip="$NODE_IP" --v=1
  cat > "$STATE/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $P/kube-proxy.kubeconfig}
mode: iptables
clusterCIDR: $POD_CIDR
bindAddress: 127.0.0.1
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
nodePortAddresses: ["$NODE_IP/32"]
oomScoreAdj: 0
conntrack: {maxPerCore: 0}
EOF
  start kube-proxy "$KBIN/kube-proxy" --config="$STATE/kube-proxy.yaml" --hostname-override="$NODE"
  wait_for "node $NODE to register" 90 kctl get node "$NODE"
  wait_for "node $NODE Ready" 120 kctl wait --for=condition=Ready "node/$NODE" --timeout=2s

  # CoreDNS, the storage class and local PersistentVolumes.
  mkdir -p "$STATE/pv"
  local i pvs=""
  for i in $(seq 0 $((PV_COUNT - 1))); do
    mkdir -p "$STATE/pv/pv$i"; chown 65532:65532 "$STATE/pv/pv$i"
    pvs+="---
apiVersion: v1
kind: PersistentVolume
metadata: {name: orion-kube-pv$i}
spec:
  capacity: {storage: 10Gi}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: orion-local
  hostPath: {path: $STATE/pv/pv$i, type: Directory}
"
  done
  sed -e "s#@COREDNS_IMAGE@#$COREDNS_IMAGE#" -e "s#@DNS_IP@#$DNS_IP#" "$HERE/manifests/coredns.yaml" | kctl apply -f - >/dev/null
  printf '%s' "$pvs" | kctl apply -f - >/dev/null
  kctl apply -f "$HERE/manifests/storage.yaml" >/dev/null
  wait_for "CoreDNS" 120 kctl -n kube-system rollout status deploy/coredns --timeout=2s
  log "cluster up: $KUBE_VERSION, node $NODE Ready, CoreDNS ready; start to ready $(( $(date +%s) - t_start )) s (total with build $(elapsed) s)"
  printenv_
}

printenv_() {
  echo "export KUBECONFIG=$KUBECONFIG_ADMIN"
  echo "export KUBECTL=$KBIN/kubectl"
  echo "export ORION_KUBE_STATE=$STATE"
  echo "export ORION_KUBE_IMAGE=$ORION_IMAGE"
}

# --- teardown ---------------------------------------------------------------
stop_pid() { # NAME: SIGTERM, then SIGKILL after 10 s
  local f=$RUN/pids/$1 pid
  [ -f "$f" ] || return 0
  pid=$(cat "$f")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$f"
}

down() {
  [ "$(id -u)" = 0 ] || die "not root"
  log "tearing down"
  stop_pid kubelet
  stop_pid kube-proxy
  stop_pid kube-scheduler
  stop_pid kube-controller-manager
  # Every container of ours: the shims that name our containerd socket.
  local pid
  for pid in $(grep -lsF -- "$SOCK" /proc/[0-9]*/cmdline | cut -d/ -f3); do
    [ -f "$RUN/pids/containerd" ] && [ "$pid" = "$(cat "$RUN/pids/containerd")" ] && continue
    # A shim's children are the containers: kill them, then the shim.
    pkill -KILL -P "$pid" 2>/dev/null || true
    kill -KILL "$pid" 2>/dev/null || true
  done
  stop_pid containerd
  stop_pid kube-apiserver
  stop_pid etcd
  # Network namespaces made by CNI for our pods (new since up), the bridge.
  if [ -f "$RUN/netns.before" ]; then
    local ns
    for ns in $(comm -13 "$RUN/netns.before" <(ip netns list 2>/dev/null | awk '{print $1}' | sort) | grep '^cni-' || true); do
      ip netns delete "$ns" 2>/dev/null || true
    done
  fi
  if ip link show "$BRIDGE" >/dev/null 2>&1; then ip link del "$BRIDGE"; fi
  # iptables: our FORWARD rule, kube-proxy's and the kubelet's KUBE-* chains.
  if [ -f "$RUN/forward-rule" ]; then
    iptables -D FORWARD -i "$BRIDGE" ! -o "$BRIDGE" -m comment --comment orion-kube -j DROP 2>/dev/null || true
  fi
  [ -x "$KBIN/kube-proxy" ] && "$KBIN/kube-proxy" --cleanup >/dev/null 2>&1 || true
  local t ipt
  for ipt in iptables ip6tables; do
    command -v $ipt >/dev/null || continue
    for t in filter nat mangle; do
      { $ipt -t $t -S 2>/dev/null | grep -E '^-A .*KUBE-' | sed 's/^-A/-D/' | while read -r rule; do
          eval "$ipt -t $t $rule" 2>/dev/null || true
        done; } || true
      { $ipt -t $t -S 2>/dev/null | awk '/^-N KUBE-/{print $2}' | while read -r c; do $ipt -t $t -F "$c" 2>/dev/null || true; done; } || true
      { $ipt -t $t -S 2>/dev/null | awk '/^-N KUBE-/{print $2}' | while read -r c; do $ipt -t $t -X "$c" 2>/dev/null || true; done; } || true
    done
  done
  # Mounts under our directories (pod volumes, containerd's rootfs and shm).
  local m
  for m in $(awk '{print $2}' /proc/self/mounts | grep -E "^($STATE|$RUN)/" | sort -r || true); do
    umount -l "$m" 2>/dev/null || true
  done
  [ -f "$RUN/ip_forward.orig" ] && cat "$RUN/ip_forward.orig" > /proc/sys/net/ipv4/ip_forward
  [ -f "$RUN/bridge-nf.orig" ] && cat "$RUN/bridge-nf.orig" > /proc/sys/net/bridge/bridge-nf-call-iptables
  rm -rf "$RUN"
  # Cluster data goes too (the caches stay); containerd's root is removed
  # last, after its mounts are gone.
  rm -rf "${STATE:?}/etcd" "$STATE/kubelet" "$STATE/cni" "$STATE/pv" "$STATE/containerd" "$STATE/pki" "$STATE/images"
  log "down"
}

# cached: exit 0 if the pinned Kubernetes and CoreDNS binaries are built.
cached() {
  local b
  for b in kube-apiserver kube-controller-manager kube-scheduler kube-proxy kubelet kubectl; do
    [ -x "$KBIN/$b" ] || return 1
  done
  [ -x "$COREDNS_BIN" ]
}

case "${1:-}" in
  check) check ;;
  cached) cached ;;
  build) build ;;
  up) up ;;
  down) down ;;
  env) printenv_ ;;
  *) echo "usage: $0 check|cached|build|up|down|env" >&2; exit 2 ;;
esac
