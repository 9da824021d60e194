#!/usr/bin/env bash
# test/cluster.sh: a local Orion cluster on 127.0.0.1 for demos and failover
# drills: 3 etcd members (`orion etcd`), 3 scheduler replicas (`orion server`)
# and 2 workers (`orion worker`).
#
#   test/cluster.sh up                 start what is not running (idempotent)
#   test/cluster.sh down [--purge]     stop everything; --purge also deletes data, logs, commands
#   test/cluster.sh status             name, pid, alive/dead/stopped, etcd health, server roles
#                                      (exit 0 if every process is alive, 3 otherwise)
#   test/cluster.sh restart NAME       stop NAME (if alive) and start it with its original command
#   test/cluster.sh logs NAME [-f]     the last 200 lines of NAME's log (-f: follow)
#
# NAME is e1 e2 e3 (etcd), n1 n2 n3 (servers) or w1 w2 (workers).
#
# Ports, from BASE = ORION_CLUSTER_BASE_PORT (default 24000):
#   etcd eN   client http://127.0.0.1:BASE+N      (24001 24002 24003)
#             peer   http://127.0.0.1:BASE+10+N   (24011 24012 24013)
#   server nN API    http://127.0.0.1:BASE+80+N   (24081 24082 24083)
#   workers listen on nothing.
#
# Everything lives in one directory, DIR = ORION_CLUSTER_DIR (default ./.cluster):
#   DIR/logs/NAME.log   stdout and stderr of NAME (appended across restarts)
#   DIR/pids/NAME.pid   pid of the running NAME (removed by down)
#   DIR/cmd/NAME.cmd    NAME's command line, shell-quoted; restart (and a later up)
#                       reuse it, so a cluster keeps the ports it was created with
#   DIR/data/NAME/      NAME's data dir, and its working directory
#
# Other settings: ORION_BIN (default bin/orion of this repository, built with
# `go build` when missing), ORION_SERVER_SLOTS (default 0: servers only
# schedule), ORION_WORKER_SLOTS (default 16).
#
# Processes run in their own session (Ctrl-C here does not reach them), with
# every other ORION_* variable removed from their environment. The script only
# ever signals pids from its own pid files, and only when /proc/PID/cmdline is
# an orion process with the expected --name.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DIR=${ORION_CLUSTER_DIR:-./.cluster}
[[ $DIR == /* ]] || DIR="$PWD/${DIR#./}"
BASE=${ORION_CLUSTER_BASE_PORT:-24000}
BIN=${ORION_BIN:-$REPO/bin/orion}
[[ $BIN == /* ]] || BIN="$PWD/$BIN"
SERVER_SLOTS=${ORION_SERVER_SLOTS:-0}
WORKER_SLOTS=${ORION_WORKER_SLOTS:-16}
HOST=127.0.0.1
STOP_TIMEOUT=10  # seconds between SIGTERM and SIGKILL
START_TIMEOUT=60 # seconds to wait for etcd health and server readiness

ETCD_NAMES=(e1 e2 e3)
SERVER_NAMES=(n1 n2 n3)
WORKER_NAMES=(w1 w2)
ALL_NAMES=("${ETCD_NAMES[@]}" "${SERVER_NAMES[@]}" "${WORKER_NAMES[@]}")

die() {
	echo "cluster.sh: $*" >&2
	exit 1
}
warn() { echo "cluster.sh: WARNING: $*" >&2; }
say() { echo "cluster.sh: $*"; }

if ! [[ $BASE =~ ^[0-9]+$ ]] || ((BASE < 1024 || BASE + 83 > 65535)); then
	die "ORION_CLUSTER_BASE_PORT=$BASE: want a number between 1024 and 65452"
fi
[[ $SERVER_SLOTS =~ ^[0-9]+$ ]] || die "ORION_SERVER_SLOTS=$SERVER_SLOTS: want a number"
[[ $WORKER_SLOTS =~ ^[0-9]+$ ]] || die "ORION_WORKER_SLOTS=$WORKER_SLOTS: want a number"

idx() { echo "${1:1}"; } # e2 -> 2
client_port() { echo $((BASE + $(idx "$1"))); }
peer_port() { echo $((BASE + 10 + $(idx "$1"))); }
api_port() { echo $((BASE + 80 + $(idx "$1"))); }
client_url() { echo "http://$HOST:$(client_port "$1")"; }
peer_url() { echo "http://$HOST:$(peer_port "$1")"; }
api_url() { echo "http://$HOST:$(api_port "$1")"; }

# comma_list CMD NAME... joins "CMD NAME" for every NAME with commas.
comma_list() {
	local f=$1 out="" n
	shift
	for n in "$@"; do out+="${out:+,}$($f "$n")"; done
	echo "$out"
}
cluster_entry() { echo "$1=$(peer_url "$1")"; }
ETCD_ENDPOINTS=$(comma_list client_url "${ETCD_NAMES[@]}")
INITIAL_CLUSTER=$(comma_list cluster_entry "${ETCD_NAMES[@]}")
API_URLS=$(comma_list api_url "${SERVER_NAMES[@]}")

known() {
	local n
	for n in "${ALL_NAMES[@]}"; do [[ $n == "$1" ]] && return 0; done
	return 1
}
kind() {
	case $1 in
	e*) echo etcd ;;
	n*) echo server ;;
	w*) echo worker ;;
	esac
}

pidfile() { echo "$DIR/pids/$1.pid"; }
cmdfile() { echo "$DIR/cmd/$1.cmd"; }
logfile() { echo "$DIR/logs/$1.log"; }

# pid_of NAME prints the pid recorded for NAME, if any.
pid_of() {
	local f pid
	f=$(pidfile "$1")
	[[ -f $f ]] || return 1
	pid=$(<"$f")
	[[ $pid =~ ^[0-9]+$ ]] || return 1
	echo "$pid"
}

# running PID: the process exists and is not a zombie.
running() {
	local stat
	kill -0 "$1" 2>/dev/null || return 1
	stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
	stat=${stat##*) } # the fields after "pid (comm) "; the first is the state
	[[ ${stat%% *} != Z ]]
}

# ours NAME PID: PID is an orion process started as NAME (guards against a
# recycled pid).
ours() {
	local args
	args=$(tr '\0' '\n' 2>/dev/null <"/proc/$2/cmdline") || return 1
	grep -q orion <<<"$args" || return 1
	grep -qxF -- "--name" <<<"$args" && grep -qxF -- "$1" <<<"$args"
}

# alive NAME: NAME's recorded pid is running and is ours.
alive() {
	local pid
	pid=$(pid_of "$1") || return 1
	running "$pid" && ours "$1" "$pid"
}

# argv_for NAME prints NAME's command line, one argument per line.
argv_for() {
	local n=$1
	case $(kind "$n") in
	etcd)
		printf '%s\n' "$BIN" etcd --name "$n" --data-dir "$DIR/data/$n" \
			--listen-client-url "$(client_url "$n")" --listen-peer-url "$(peer_url "$n")" \
			--initial-cluster "$INITIAL_CLUSTER" --initial-cluster-state new
		;;
	server)
		printf '%s\n' "$BIN" server --name "$n" --etcd-endpoints "$ETCD_ENDPOINTS" \
			--listen "$HOST:$(api_port "$n")" --data-dir "$DIR/data/$n" \
			--slots "$SERVER_SLOTS" --log-format json
		;;
	worker)
		printf '%s\n' "$BIN" worker --server "$API_URLS" --slots "$WORKER_SLOTS" --name "$n"
		;;
	esac
}

# load_cmd NAME sets CMD to NAME's stored command line (writing it first if
# NAME has none yet).
load_cmd() {
	local n=$1 f
	f=$(cmdfile "$n")
	if [[ ! -f $f ]]; then
		local -a argv
		mapfile -t argv < <(argv_for "$n")
		printf '%q ' "${argv[@]}" >"$f"
		echo >>"$f"
	fi
	eval "CMD=( $(<"$f") )"
}

port_busy() { (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null; }

# start NAME starts NAME in the background unless it is alive.
start() {
	local n=$1 port pid
	if alive "$n"; then
		say "$n already running (pid $(pid_of "$n"))"
		return 0
	fi
	rm -f "$(pidfile "$n")"
	load_cmd "$n"
	for port in $(ports_of "$n"); do
		port_busy "$port" && die "$n: port $port on $HOST is already in use by another process"
	done
	mkdir -p "$DIR/data/$n"
	chmod 700 "$DIR/data/$n" # etcd warns about anything more open
	local -a unset_env=()
	local v
	for v in $(compgen -e); do
		[[ $v == ORION_* ]] && unset_env+=(-u "$v")
	done
	{
		echo
		echo "=== $(date '+%F %T') cluster.sh start $n: ${CMD[*]}"
	} >>"$(logfile "$n")"
	# The subshell execs setsid, env and then orion: $! is orion's pid.
	(cd "$DIR/data/$n" && exec setsid env "${unset_env[@]}" "${CMD[@]}") \
		</dev/null >>"$(logfile "$n")" 2>&1 &
	pid=$!
	echo "$pid" >"$(pidfile "$n")"
	say "started $n (pid $pid)"
}

ports_of() {
	case $(kind "$1") in
	etcd) echo "$(client_port "$1") $(peer_port "$1")" ;;
	server) api_port "$1" ;;
	esac
}

tail_log() {
	echo "--- last lines of $(logfile "$1"):" >&2
	tail -n 20 "$(logfile "$1")" >&2 || true
}

# check_alive NAME...: fail with the log of the first one that died.
check_alive() {
	local n
	for n in "$@"; do
		if ! alive "$n"; then
			tail_log "$n"
			die "$n exited; see $(logfile "$n")"
		fi
	done
}

etcd_healthy() { curl -sf --max-time 2 "$(client_url "$1")/health" 2>/dev/null | grep -q '"health":"true"'; }
# A replica started with --tls-cert-file serves https: readiness is asked
# either way (-k: this only asks whether it answers, not whom to trust).
server_ready() {
	local u; u=$(api_url "$1")
	curl -sf --max-time 2 -o /dev/null "$u/readyz" 2>/dev/null || curl -sfk --max-time 2 -o /dev/null "${u/http:/https:}/readyz"
}

# wait_for PROBE WHAT NAME...: poll PROBE NAME for every NAME until all pass.
wait_for() {
	local probe=$1 what=$2
	shift 2
	local deadline=$((SECONDS + START_TIMEOUT)) n pending
	while :; do
		pending=()
		for n in "$@"; do
			$probe "$n" || pending+=("$n")
		done
		((${#pending[@]} == 0)) && return 0
		check_alive "${pending[@]}"
		((SECONDS < deadline)) || die "not $what after ${START_TIMEOUT}s: ${pending[*]}"
		sleep 0.2
	done
}

cluster_json() {
	local u; u=$(api_url "$1")
	curl -sf --max-time 3 "$u/api/v1/cluster" 2>/dev/null || curl -sfk --max-time 3 "${u/http:/https:}/api/v1/cluster" 2>/dev/null
}

# json_field FIELD reads JSON on stdin: FIELD is "leader" or "role" (this
# replica's role).
json_field() {
	if command -v python3 >/dev/null; then
		python3 -c '
import json, sys
d = json.load(sys.stdin)
if sys.argv[1] == "role":
    print(next((r.get("role", "") for r in d.get("replicas") or [] if r.get("name") == d.get("node")), ""))
else:
    print(d.get(sys.argv[1], ""))' "$1" 2>/dev/null || true
	elif [[ $1 == role ]]; then # without python: the first replica listed is this one
		{ grep -o '"role":"[^"]*"' | head -n1 | cut -d'"' -f4; } || true
	else
		{ grep -o "\"$1\":\"[^\"]*\"" | head -n1 | cut -d'"' -f4; } || true
	fi
}

leader() {
	local n l
	for n in "${SERVER_NAMES[@]}"; do
		l=$(cluster_json "$n" | json_field leader) || true
		[[ -n $l ]] && echo "$l" && return 0
	done
	return 1
}

wait_leader() {
	local deadline=$((SECONDS + START_TIMEOUT))
	until leader >/dev/null; do
		check_alive "${SERVER_NAMES[@]}"
		((SECONDS < deadline)) || die "no scheduler leader after ${START_TIMEOUT}s"
		sleep 0.2
	done
}

ensure_bin() {
	if [[ ! -x $BIN ]]; then
		[[ -z ${ORION_BIN:-} ]] || die "ORION_BIN=$BIN is not an executable"
		say "building $BIN"
		(cd "$REPO" && go build -o "$BIN" ./cmd/orion)
	fi
	if ! "$BIN" etcd --help >/dev/null 2>&1; then
		[[ -z ${ORION_BIN:-} ]] || die "$BIN has no 'etcd' command"
		say "$BIN has no 'etcd' command; rebuilding"
		(cd "$REPO" && go build -o "$BIN" ./cmd/orion)
		"$BIN" etcd --help >/dev/null 2>&1 || die "$BIN has no 'etcd' command even after a rebuild"
	fi
}

have_workers() { "$BIN" worker --help >/dev/null 2>&1; }

# expected NAME...: the names up should run (workers only when the binary has them).
expected() {
	echo "${ETCD_NAMES[@]}" "${SERVER_NAMES[@]}"
	have_workers && echo "${WORKER_NAMES[@]}"
	return 0
}

summary() {
	local l bin=${BIN#"$PWD"/}
	l=$(leader) || l="(none yet)"
	cat <<EOF

Orion cluster in $DIR
  scheduler leader  $l
  etcd clients      $ETCD_ENDPOINTS
  API servers       $API_URLS
  logs              $DIR/logs/NAME.log   (test/cluster.sh logs NAME)

Try:
  $bin --server $API_URLS submit -f test/fixtures/etl.yaml --wait
  $bin --server $API_URLS cluster
  ETCDCTL_API=3 etcdctl --endpoints $ETCD_ENDPOINTS elect -l /orion/v1/election
  ETCDCTL_API=3 etcdctl --endpoints $ETCD_ENDPOINTS member list -w table
  $bin drill kill-leader --server $API_URLS --count 5
  $bin drill --fault node --server $API_URLS --count 5     (the leader and etcd's raft leader together)
  test/cluster.sh status | restart n1 | down [--purge]
EOF
}

cmd_up() {
	command -v curl >/dev/null || die "curl is required"
	command -v setsid >/dev/null || die "setsid (util-linux) is required"
	ensure_bin
	mkdir -p "$DIR/logs" "$DIR/pids" "$DIR/cmd" "$DIR/data"

	local n all_up=1
	for n in $(expected); do
		alive "$n" || all_up=0
	done
	if ((all_up)); then
		say "already up"
		summary
		return 0
	fi

	# Check every port before starting anything, so that a busy port does not
	# leave half a cluster behind.
	local port busy=()
	for n in $(expected); do
		alive "$n" && continue
		for port in $(ports_of "$n"); do
			port_busy "$port" && busy+=("$port ($n)")
		done
	done
	((${#busy[@]} == 0)) || die "ports in use by other processes on $HOST: ${busy[*]} (set ORION_CLUSTER_BASE_PORT to move the cluster)"

	for n in "${ETCD_NAMES[@]}"; do start "$n"; done
	say "waiting for etcd health on $ETCD_ENDPOINTS"
	wait_for etcd_healthy "healthy" "${ETCD_NAMES[@]}"

	for n in "${SERVER_NAMES[@]}"; do start "$n"; done
	say "waiting for the servers' /readyz on $API_URLS"
	wait_for server_ready "ready" "${SERVER_NAMES[@]}"
	wait_leader

	if have_workers; then
		for n in "${WORKER_NAMES[@]}"; do start "$n"; done
		sleep 1
		check_alive "${WORKER_NAMES[@]}"
	else
		warn "$BIN has no 'worker' command: starting no workers (tasks run only if ORION_SERVER_SLOTS > 0)"
	fi
	summary
}

# stop_group NAME...: SIGTERM every live one, wait up to STOP_TIMEOUT, then
# SIGKILL the rest; pid files are removed.
stop_group() {
	local n pid
	local -a pids=() names=()
	for n in "$@"; do
		pid=$(pid_of "$n") || continue
		if running "$pid" && ours "$n" "$pid"; then
			say "stopping $n (pid $pid)"
			kill -TERM "$pid" 2>/dev/null || true
			pids+=("$pid")
			names+=("$n")
		elif running "$pid"; then
			warn "pid $pid of $n is not an orion process started as $n (pid reused?); not signalling it"
			rm -f "$(pidfile "$n")"
		else
			rm -f "$(pidfile "$n")"
		fi
	done
	local deadline=$((SECONDS + STOP_TIMEOUT)) i left
	while :; do
		left=0
		for i in "${!pids[@]}"; do
			running "${pids[$i]}" && left=1
		done
		((left == 0 || SECONDS >= deadline)) && break
		sleep 0.1
	done
	for i in "${!pids[@]}"; do
		if running "${pids[$i]}" && ours "${names[$i]}" "${pids[$i]}"; then
			warn "${names[$i]} (pid ${pids[$i]}) still running ${STOP_TIMEOUT}s after SIGTERM; sending SIGKILL"
			kill -KILL "${pids[$i]}" 2>/dev/null || true
		fi
		rm -f "$(pidfile "${names[$i]}")"
	done
}

# etcd_leader prints the name of the etcd member that leads, if it can tell.
etcd_leader() {
	command -v python3 >/dev/null || return 1
	local e
	for e in "${ETCD_NAMES[@]}"; do
		alive "$e" || continue
		curl -sf --max-time 2 -X POST -d '{}' "$(client_url "$e")/v3/maintenance/status" 2>/dev/null |
			python3 -c 'import json,sys; d=json.load(sys.stdin); sys.exit(0 if d["leader"] == d["header"]["member_id"] else 1)' \
				2>/dev/null && echo "$e" && return 0
	done
	return 1
}

cmd_down() {
	local purge=0
	case ${1:-} in
	"") ;;
	--purge) purge=1 ;;
	*) die "down: unknown argument $1 (want --purge or nothing)" ;;
	esac
	if [[ -d $DIR/pids ]]; then
		stop_group "${WORKER_NAMES[@]}"
		stop_group "${SERVER_NAMES[@]}"
		# The etcd leader first, while its followers can take over quickly;
		# then the others together.
		local l rest=() e
		if l=$(etcd_leader); then
			stop_group "$l"
		fi
		for e in "${ETCD_NAMES[@]}"; do [[ $e == "${l:-}" ]] || rest+=("$e"); done
		stop_group "${rest[@]}"
		rmdir "$DIR/pids" 2>/dev/null || true
	fi
	if ((purge)); then
		# Only what this script creates, never DIR itself if it holds more.
		rm -rf "$DIR/data" "$DIR/logs" "$DIR/cmd" "$DIR/pids"
		rmdir "$DIR" 2>/dev/null || true
		say "stopped; purged $DIR"
	else
		say "stopped; data and logs kept in $DIR (down --purge deletes them)"
	fi
}

cmd_status() {
	[[ -d $DIR ]] || {
		say "no cluster in $DIR"
		return 3
	}
	local n pid state extra all=0 role l
	printf '%-4s %-8s %-7s %s\n' NAME PID STATE INFO
	for n in "${ALL_NAMES[@]}"; do
		[[ -f $(cmdfile "$n") || -f $(pidfile "$n") ]] || continue
		pid=$(pid_of "$n") || pid=-
		extra=""
		if alive "$n"; then
			state=alive
			case $(kind "$n") in
			etcd)
				extra="$(client_url "$n")"
				if etcd_healthy "$n"; then extra+="  healthy"; else extra+="  unhealthy"; fi
				;;
			server)
				local js
				js=$(cluster_json "$n") || js=""
				role=$(json_field role <<<"$js")
				l=$(json_field leader <<<"$js")
				extra="$(api_url "$n")  role=${role:-?}  leader=${l:-?}"
				;;
			worker) extra="--server $API_URLS" ;;
			esac
		elif [[ $pid == - ]]; then
			state=stopped
			all=3
		else
			state=dead
			all=3
		fi
		printf '%-4s %-8s %-7s %s\n' "$n" "$pid" "$state" "$extra"
	done
	return $all
}

cmd_restart() {
	local n=${1:-}
	known "$n" || die "restart: want one of ${ALL_NAMES[*]}, got '${n}'"
	[[ -f $(cmdfile "$n") ]] || die "restart: $n was never started in $DIR (no $(cmdfile "$n"))"
	command -v setsid >/dev/null || die "setsid (util-linux) is required"
	stop_group "$n"
	start "$n"
	case $(kind "$n") in
	etcd) wait_for etcd_healthy "healthy" "$n" ;;
	server) wait_for server_ready "ready" "$n" ;;
	worker)
		sleep 1
		check_alive "$n"
		;;
	esac
	say "$n is back"
}

cmd_logs() {
	local n=${1:-}
	known "$n" || die "logs: want one of ${ALL_NAMES[*]}, got '${n}'"
	[[ -f $(logfile "$n") ]] || die "logs: no $(logfile "$n")"
	case ${2:-} in
	"") tail -n 200 "$(logfile "$n")" ;;
	-f) tail -n 200 -f "$(logfile "$n")" ;;
	*) die "logs: unknown argument $2 (want -f or nothing)" ;;
	esac
}

usage() {
	sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'
}

case ${1:-} in
up) cmd_up ;;
down) cmd_down "${2:-}" ;;
status) cmd_status ;;
restart) cmd_restart "${2:-}" ;;
logs) cmd_logs "${2:-}" "${3:-}" ;;
-h | --help | help) usage ;;
*)
	usage >&2
	exit 2
	;;
esac
