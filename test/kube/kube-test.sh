#!/usr/bin/env bash
# make kube-test: bring the test cluster up (cluster.sh), install the chart,
# run `helm test` and the drills (kube_test.go, TestKube), print every figure
# and the timings, and tear everything down again, whatever happened.
#
#   ORION_KUBE_DRILLS=full|ci|tls  full (default): every drill; ci: without
#                               the scale, helm-upgrade and TLS-CA-move drills;
#                               tls: only the TLS install and its checks
#                               (tls_test.go), which the other two end with
#   ORION_KUBE_KILLS=N          run each install's leader kill -9 drill N
#                               times (default 1)
#   ORION_KUBE_TIMEOUT=SECONDS  bound on the whole run (default 2400; the
#                               cold build alone takes 6-20 minutes)
#   ORION_KUBE_SKIP_ON_ENV=1    a machine that cannot run the cluster (not
#                               root, no cgroups, a kernel that refuses a
#                               bridge or a netns, a cluster that does not
#                               come up) is a skip with exit 0, not a failure;
#                               a chart or drill failure still fails
#   HELM=...                    the helm binary (the Makefile passes its own)
set -uo pipefail
cd "$(dirname "$0")/../.."
HERE=test/kube
MODE=${ORION_KUBE_DRILLS:-full}
BOUND=${ORION_KUBE_TIMEOUT:-2400}
T0=$(date +%s)
say() { printf 'kube-test: %s\n' "$*"; }
skip() {
  say "SKIP: $*"
  if [ "${ORION_KUBE_SKIP_ON_ENV:-0}" = 1 ]; then exit 0; fi
  exit 1
}

[ -n "${HELM:-}" ] && [ -x "$HELM" ] || { say "HELM is not set to a helm binary (use make kube-test)"; exit 1; }
$HERE/cluster.sh check
rc=$?
[ $rc = 0 ] || skip "this machine cannot run the test cluster (see above)"

# One run at a time on a machine: a live kube-test.sh whose PID is recorded
# here owns the cluster, which is not ours to tear down. (A PID file rather
# than a lock held open: the cluster's daemons would inherit a lock's file
# descriptor and outlive a killed run.)
OWNER=/run/orion-kube-owner.pid
if [ -f "$OWNER" ]; then
  owner=$(cat "$OWNER" 2>/dev/null)
  if [ -n "$owner" ] && [ "$owner" != $$ ] && tr '\0' ' ' < "/proc/$owner/cmdline" 2>/dev/null | grep -q kube-test.sh; then
    say "another make kube-test (pid $owner) is running on this machine: its cluster is not torn down; try again when it ends"
    if [ "${ORION_KUBE_SKIP_ON_ENV:-0}" = 1 ]; then exit 0; fi
    exit 1
  fi
fi
echo $$ > "$OWNER"

# A cluster left up (an earlier run that was killed, or make kube-up): this
# run owns it.
if [ -d /run/orion-kube/pids ]; then
  say "a test cluster is already up: tearing it down first"
  $HERE/cluster.sh down >/dev/null 2>&1 || true
fi

# Bound everything: the watchdog tears the cluster down and ends the run.
# Its sleep dies with it: a sleep left behind would keep whatever this run
# inherited open for the whole bound (flock /work/.locks/heavy make
# kube-test: the lock, held 25 minutes after a 2-minute run).
(
  trap 'kill "$nap" 2>/dev/null; exit 0' TERM
  sleep "$BOUND" &
  nap=$!
  # Only a sleep that ran its course is the bound: one killed by cleanup
  # (pkill -P below) ends the watchdog quietly. Firing then would TERM this
  # shell in the middle of its teardown and leave the cluster up.
  wait "$nap" || exit 0
  say "FAIL: the whole run exceeded ${BOUND}s; tearing down"
  kill -TERM $$ 2>/dev/null
) &
WATCHDOG=$!
cleanup() {
  # Nothing interrupts the teardown: a cluster left up keeps its daemons
  # (and the CPU) running until the next make kube-down.
  trap '' TERM INT
  # Its sleep first: killed alone, the subshell leaves it running, holding
  # whatever the run inherited (a `flock` on the shared lock, for 40 min).
  pkill -P "$WATCHDOG" 2>/dev/null
  kill "$WATCHDOG" 2>/dev/null
  local t=$(date +%s)
  $HERE/cluster.sh down >/dev/null 2>&1 || say "teardown reported an error (state in /var/lib/orion-kube, /run/orion-kube)"
  say "teardown $(( $(date +%s) - t )) s"
  [ "$(cat "$OWNER" 2>/dev/null)" = $$ ] && rm -f "$OWNER"
}
trap cleanup EXIT
trap 'exit 1' TERM INT

t=$(date +%s)
if ! $HERE/cluster.sh build; then
  skip "building the cluster's binaries failed (see above)"
fi
T_BUILD=$(( $(date +%s) - t ))
t=$(date +%s)
if ! ORION_KUBE_SKIP_BUILD=1 $HERE/cluster.sh up > /tmp/orion-kube-env.$$; then
  tail -n 30 /var/lib/orion-kube/logs/kubelet.log 2>/dev/null | sed 's/^/  kubelet: /'
  skip "the test cluster did not come up on this machine (logs in /var/lib/orion-kube/logs)"
fi
T_UP=$(( $(date +%s) - t ))
# shellcheck disable=SC1090
. /tmp/orion-kube-env.$$; rm -f /tmp/orion-kube-env.$$
export KUBECONFIG KUBECTL ORION_KUBE_STATE ORION_KUBE_IMAGE HELM
export CHART=$PWD/charts/orion ORION_KUBE_DRILLS=$MODE
FIGURES=$(mktemp); export ORION_KUBE_FIGURES=$FIGURES

t=$(date +%s)
( cd $HERE && go test -count=1 -v -timeout "$(( BOUND > 120 ? BOUND - 60 : BOUND ))s" -run '^TestKube$' . ) 2>&1 | tee /tmp/orion-kube-test.log | grep -E '^(=== RUN|--- |FIGURE|PASS|FAIL|ok|\s+kube_test.go)' 
rc=${PIPESTATUS[0]}
T_TEST=$(( $(date +%s) - t ))

echo
say "figures (drills: $MODE):"
sed 's/^FIGURE /  /' "$FIGURES"; rm -f "$FIGURES"
say "timings: build ${T_BUILD} s, cluster up ${T_UP} s, install + helm test + drills ${T_TEST} s, total so far $(( $(date +%s) - T0 )) s (bound ${BOUND} s)"
if [ $rc != 0 ]; then
  say "FAIL (full log: /tmp/orion-kube-test.log)"
  exit 1
fi
say "PASS"
