#!/usr/bin/env bash
# deploy/drill.sh: kill-the-leader drills against Orion on Kubernetes (the
# chart in charts/orion, or deploy/manifests).
#
#   deploy/drill.sh [--namespace NS] [--release NAME] [--count N] [--tasks N]
#                   [--mode delete|crash] [--interval SECONDS] [--local-port PORT]
#
# `orion drill kill-leader` cannot do this in a cluster: it kills the leader
# by PID on its own host. This script drives the same drill through kubectl.
# Each drill:
#
#   1. port-forwards to a standby scheduler pod (never to the leader, which is
#      about to die) and reads GET /api/v1/cluster: the leader is a pod name;
#   2. submits a DAG of --tasks sleep tasks (1 s each, chains of 4; sleep
#      tasks need no shell) and waits until one has succeeded and others run;
#   3. kills the leader pod:
#        delete (default): kubectl delete pod LEADER --grace-period=0 --force.
#          The API object goes at once and the StatefulSet recreates the pod;
#          the kubelet still sends SIGTERM first (then SIGKILL about 2 s
#          later), and on SIGTERM the replica resigns: this drill measures a
#          fast, graceful failover, not a crash.
#        crash: an ephemeral container (kubectl debug --target) sends SIGQUIT
#          to the replica's PID 1: the Go runtime exits at once, without
#          resigning, like kill -9 (SIGKILL cannot be sent to PID 1 from
#          inside its PID namespace). The container restarts in place. Needs
#          ephemeral containers and `kubectl debug --custom` (kubectl >= 1.31);
#          each drill leaves one finished ephemeral container in the pod;
#   4. polls the cluster endpoint every 100 ms until another replica leads
#      and has committed: "takeover" is the time from the kill command to
#      that observation, as seen from this machine (port-forward and poll
#      latency included: an upper bound). The new leader's own
#      leader_since -> first_commit_at is printed too;
#   5. waits until the killed pod is Ready again (a new pod, or a restarted
#      container);
#   6. waits for the DAG and accounts it: lost = tasks not succeeded;
#      duplicates = tasks run again after an attempt on a pod that was not
#      killed (the killed pod's own slots may re-run: at-least-once).
#
# The exit code is 0 only if every drill observed a takeover and no task was
# lost or duplicated. Requirements: kubectl (current context), curl, jq.
# The API token comes from ORION_AUTH_TOKEN, or from the Secret the
# scheduler StatefulSet references.
set -euo pipefail

NS=${NAMESPACE:-default}
RELEASE=orion
COUNT=1
TASKS=24
MODE=delete
INTERVAL=5
LOCAL_PORT=18080
TAKEOVER_TIMEOUT=30 # seconds
READY_TIMEOUT=300   # seconds for the killed pod to be Ready again
SETTLE_TIMEOUT=180  # seconds for a drill DAG to finish
DEBUG_IMAGE=${ORION_DRILL_DEBUG_IMAGE:-busybox:1.36}

die() {
	echo "drill.sh: $*" >&2
	exit 1
}
say() { echo "drill.sh: $*" >&2; }
usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'; }

while (($#)); do
	case $1 in
	-n | --namespace) NS=$2 && shift ;;
	-r | --release) RELEASE=$2 && shift ;;
	-c | --count) COUNT=$2 && shift ;;
	--tasks) TASKS=$2 && shift ;;
	--mode) MODE=$2 && shift ;;
	--interval) INTERVAL=$2 && shift ;;
	--local-port) LOCAL_PORT=$2 && shift ;;
	-h | --help)
		usage
		exit 0
		;;
	*) die "unknown argument $1 (see --help)" ;;
	esac
	shift
done
[[ $COUNT =~ ^[1-9][0-9]*$ ]] || die "--count $COUNT: want a positive number"
[[ $TASKS =~ ^[1-9][0-9]*$ ]] || die "--tasks $TASKS: want a positive number"
[[ $MODE == delete || $MODE == crash ]] || die "--mode $MODE: want delete or crash"
for c in kubectl curl jq; do command -v "$c" >/dev/null || die "$c is required"; done

K=(kubectl --namespace "$NS")
SEL="app.kubernetes.io/instance=$RELEASE,app.kubernetes.io/component=scheduler"

# Milliseconds since the epoch (GNU date; whole seconds elsewhere).
now_ms() {
	local t
	t=$(date +%s%3N)
	[[ $t =~ ^[0-9]+$ ]] || t=$(($(date +%s) * 1000))
	echo "$t"
}

# The scheduler StatefulSet: its container, port and token Secret.
STS_JSON=$("${K[@]}" get statefulsets -l "$SEL" -o json) || die "kubectl get statefulsets failed"
[[ $(jq '.items | length' <<<"$STS_JSON") == 1 ]] || die "want one scheduler StatefulSet with labels $SEL in namespace $NS"
CONTAINER=$(jq -r '.items[0].spec.template.spec.containers[0].name' <<<"$STS_JSON")
PORT=$(jq -r '.items[0].spec.template.spec.containers[0].ports[] | select(.name == "http") | .containerPort' <<<"$STS_JSON")
[[ -n $PORT ]] || die "the scheduler container has no port named http"
if [[ -z ${ORION_AUTH_TOKEN:-} ]]; then
	ref=$(jq -c '.items[0].spec.template.spec.containers[0].env[] | select(.name == "ORION_AUTH_TOKEN") | .valueFrom.secretKeyRef' <<<"$STS_JSON")
	[[ -n $ref && $ref != null ]] || die "no ORION_AUTH_TOKEN secretKeyRef in the StatefulSet; set ORION_AUTH_TOKEN"
	secret=$(jq -r .name <<<"$ref")
	key=$(jq -r .key <<<"$ref")
	ORION_AUTH_TOKEN=$("${K[@]}" get secret "$secret" -o json | jq -r --arg k "$key" '.data[$k] // empty' | base64 -d) ||
		die "cannot read the token from Secret $secret (set ORION_AUTH_TOKEN)"
	[[ -n $ORION_AUTH_TOKEN ]] || die "Secret $secret has no key $key"
fi
API=http://127.0.0.1:$LOCAL_PORT

PF_PID=""
PF_POD=""
stop_forward() {
	if [[ -n $PF_PID ]]; then
		kill "$PF_PID" 2>/dev/null || true
		wait "$PF_PID" 2>/dev/null || true
	fi
	PF_PID=""
	PF_POD=""
}
trap stop_forward EXIT

api() { # api METHOD PATH [BODY]
	local args=(-sS --max-time 5 -H "Authorization: Bearer $ORION_AUTH_TOKEN" -X "$1")
	[[ $# -ge 3 ]] && args+=(-H 'Content-Type: application/json' --data-binary "$3")
	curl "${args[@]}" -f "$API$2"
}

# forward_to POD: a port-forward to POD, replacing the current one.
forward_to() {
	[[ $PF_POD == "$1" ]] && api GET /healthz >/dev/null 2>&1 && return 0
	stop_forward
	"${K[@]}" port-forward "pod/$1" "$LOCAL_PORT:$PORT" >/dev/null 2>&1 &
	PF_PID=$!
	PF_POD=$1
	for _ in $(seq 100); do
		api GET /healthz >/dev/null 2>&1 && return 0
		kill -0 "$PF_PID" 2>/dev/null || break
		sleep 0.1
	done
	die "port-forward to pod/$1 port $PORT does not answer"
}

pods() { "${K[@]}" get pods -l "$SEL" -o json | jq -r '.items[].metadata.name' | sort; }

# pod_state POD: "UID RESTARTS READY" or nothing when the pod does not exist.
pod_state() {
	"${K[@]}" get pod "$1" -o json 2>/dev/null |
		jq -r '"\(.metadata.uid) \([.status.containerStatuses[]?.restartCount] | add // 0) \(any(.status.conditions[]?; .type == "Ready" and .status == "True"))"' 2>/dev/null || true
}

# cluster: GET /api/v1/cluster through the current port-forward.
cluster() { api GET /api/v1/cluster; }

# a standby to talk through: a scheduler pod that is not LEADER and answers.
standby_pod() {
	local p
	for p in $(pods); do
		[[ $p == "$1" ]] && continue
		[[ $(pod_state "$p") == *" true" ]] || continue
		echo "$p"
		return 0
	done
	return 1
}

dag_json() { # dag_json ID: TASKS sleep tasks in chains of 4
	jq -nc --arg id "$1" --argjson n "$TASKS" '{
		id: $id, name: "drill \($id)",
		tasks: [range($n) | {id: "t\(.)", kind: "sleep", duration: "1s",
			depends_on: (if . % 4 == 0 then [] else ["t\(. - 1)"] end)}]}'
}

declare -a TAKEOVERS=()
FAILED=0
TOTAL_LOST=0
TOTAL_DUP=0

drill() {
	local n=$1 id leader pod state kill_ms t_ms js newleader took info
	# 1. Who leads; talk through someone else.
	pod=$(pods | head -n1)
	[[ -n $pod ]] || die "no scheduler pods with labels $SEL"
	forward_to "$pod"
	leader=$(cluster | jq -r '.leader // empty')
	[[ -n $leader ]] || die "no leader (GET /api/v1/cluster through $pod)"
	pod=$(standby_pod "$leader") || die "no ready standby besides the leader $leader"
	forward_to "$pod"

	# 2. A DAG that is running.
	id="drill-$(date +%Y%m%d-%H%M%S)-$n"
	api POST /api/v1/dags "$(dag_json "$id")" >/dev/null || die "submitting $id failed"
	local deadline=$((SECONDS + 60))
	while :; do
		js=$(api GET "/api/v1/dags/$id") || js='{}'
		if jq -e '([.tasks[]? | select(.status == "succeeded")] | length) >= 1 and ([.tasks[]? | select(.status == "running")] | length) >= 1' <<<"$js" >/dev/null; then
			break
		fi
		((SECONDS < deadline)) || die "$id does not run (is there a worker?)"
		sleep 0.2
	done

	# 3. Kill the leader.
	state=$(pod_state "$leader")
	kill_ms=$(now_ms)
	case $MODE in
	delete)
		"${K[@]}" delete pod "$leader" --grace-period=0 --force --wait=false >/dev/null 2>&1 ||
			die "kubectl delete pod $leader failed"
		;;
	crash)
		local custom
		custom=$(mktemp)
		echo '{"securityContext":{"runAsUser":65532,"runAsGroup":65532,"runAsNonRoot":true,"allowPrivilegeEscalation":false,"capabilities":{"drop":["ALL"]}}}' >"$custom"
		"${K[@]}" debug "pod/$leader" --image="$DEBUG_IMAGE" --target="$CONTAINER" --profile=restricted --custom="$custom" \
			--container="drill-$n-$RANDOM" --quiet -- kill -QUIT 1 >/dev/null 2>&1 ||
			{
				rm -f "$custom"
				die "kubectl debug pod/$leader failed (ephemeral containers, kubectl >= 1.31 needed for --mode crash)"
			}
		rm -f "$custom"
		;;
	esac

	# 4. Takeover, as seen from here.
	newleader=""
	deadline=$((SECONDS + TAKEOVER_TIMEOUT))
	while ((SECONDS < deadline)); do
		js=$(cluster 2>/dev/null) || js='{}'
		newleader=$(jq -r --arg old "$leader" '.leader as $l | if ($l // "") != "" and $l != $old
			and any(.replicas[]?; .name == $l and .first_commit_at != null) then $l else empty end' <<<"$js")
		[[ -n $newleader ]] && break
		sleep 0.1
	done
	t_ms=$(now_ms)
	if [[ -z $newleader ]]; then
		say "drill $n/$COUNT: killed $leader ($MODE); no new leader with a committed write within ${TAKEOVER_TIMEOUT}s"
		FAILED=$((FAILED + 1))
		return 0
	fi
	took=$((t_ms - kill_ms))
	TAKEOVERS+=("$took")
	# Both times come from the new leader's clock (same zone): their
	# difference is the orion_last_takeover_seconds of this term.
	info=$(jq -r --arg l "$newleader" '
		def secs: capture("^(?<b>[0-9-]+T[0-9:]+)(\\.(?<f>[0-9]+))?") | ((.b + "Z") | fromdateiso8601) + ("0." + (.f // "0") | tonumber);
		.replicas[] | select(.name == $l and .leader_since != null and .first_commit_at != null)
		| "election to first commit \(((.first_commit_at | secs) - (.leader_since | secs)) * 1000 | round) ms"' <<<"$js" 2>/dev/null || true)

	# 5. The killed pod comes back.
	deadline=$((SECONDS + READY_TIMEOUT))
	local old_uid old_restarts cur
	read -r old_uid old_restarts _ <<<"$state"
	old_restarts=${old_restarts:-0}
	while :; do
		cur=$(pod_state "$leader")
		if [[ -n $cur && $cur == *" true" ]]; then
			local uid restarts
			read -r uid restarts _ <<<"$cur"
			[[ $uid != "$old_uid" || ${restarts:-0} -gt $old_restarts ]] && break
		fi
		((SECONDS < deadline)) || die "$leader not Ready again after ${READY_TIMEOUT}s"
		sleep 0.5
	done

	# 6. The DAG finishes; account it.
	deadline=$((SECONDS + SETTLE_TIMEOUT))
	while :; do
		js=$(api GET "/api/v1/dags/$id" 2>/dev/null) || js='{}'
		jq -e '.status == "succeeded" or .status == "failed" or .status == "cancelled"' <<<"$js" >/dev/null 2>&1 && break
		if ((SECONDS >= deadline)); then
			say "drill $n/$COUNT: $id not finished after ${SETTLE_TIMEOUT}s"
			FAILED=$((FAILED + 1))
			return 0
		fi
		sleep 0.5
	done
	local lost dup
	lost=$(jq '[.tasks[] | select(.status != "succeeded")] | length' <<<"$js")
	dup=$(jq --arg killed "$leader" '[.tasks[] | select(any(.history[]?; (.worker // "" | split("/")[0]) != $killed))] | length' <<<"$js")
	TOTAL_LOST=$((TOTAL_LOST + lost))
	TOTAL_DUP=$((TOTAL_DUP + dup))
	((lost == 0 && dup == 0)) || FAILED=$((FAILED + 1))
	echo "drill $n/$COUNT: $MODE $leader -> $newleader leads; takeover ${took} ms as seen here${info:+ ($info)}; DAG $id $(jq -r .status <<<"$js"); lost $lost; duplicates $dup"
}

say "namespace $NS, release $RELEASE, $COUNT drill(s), mode $MODE, $TASKS tasks each"
for n in $(seq "$COUNT"); do
	drill "$n"
	((n < COUNT)) && sleep "$INTERVAL"
done
stop_forward

summary=$(printf '%s\n' "${TAKEOVERS[@]:-}" | sort -n | awk 'NF { a[n++] = $1 } END {
	if (n == 0) { print "no takeover measured"; exit }
	printf "takeover as seen here over %d drills: p50 %d ms, max %d ms", n, a[int((n - 1) / 2)], a[n - 1] }')
echo "$summary"
echo "totals: $COUNT drills, $FAILED failed, $TOTAL_LOST tasks lost, $TOTAL_DUP duplicated"
if ((FAILED == 0)); then
	echo "verdict: PASS"
else
	echo "verdict: FAIL"
	exit 1
fi
