#!/bin/sh
# The fault suite (faults/): real binaries, a private Postgres and Redis, one fault at a time.
#   sh faults/run.sh full   # 200 tasks per scenario; rewrites faults/RESULTS.md
#   sh faults/run.sh ci     # every scenario on 30 tasks (make faults-ci)
# The failure-path scenarios (agent-kill-after-claim, agent-restart-same-id, task-always-fails,
# verifier-refuses) run on smaller lists with production-like timing: full mode the defaults (30 s
# heartbeat, 30 s stale window), ci mode a 5 s heartbeat and a 12 s stale window.
# CONVERGE_FAULTS_ONLY=agent-kill,postgres-restart runs only those scenarios; CONVERGE_TEST_BIN=dir (or
# CONVERGE_FAULTS_BIN) uses prebuilt converge-<service> binaries instead of building them. The
# processes, Postgres, Redis and the fault proxies are platform/clustertest's.
set -eu
mode=${1:-ci}
case "$mode" in full|ci) ;; *) echo "usage: $0 full|ci" >&2; exit 2 ;; esac
cd "$(dirname "$0")"
work=$(mktemp -d "${TMPDIR:-/tmp}/converge-faults-XXXXXX")
trap 'rm -rf "$work/bin"' EXIT
mkdir -p "$work/bin" "$work/logs"
bin=${CONVERGE_TEST_BIN:-${CONVERGE_FAULTS_BIN:-}}
if [ -z "$bin" ]; then
	bin=$work/bin
	for s in scheduler registry knowledge verifier agent; do
		go build -C "../services/$s" -o "$bin/converge-$s" "./cmd/converge-$s"
	done
	# The sandbox's init beside them, as make build and the images ship it.
	go build -C ../platform -o "$bin/converge-sandbox-init" ./proc/cmd/converge-sandbox-init
fi
timeout=20m
[ "$mode" = full ] && timeout=90m
start=$(date +%s)
status=0
CONVERGE_FAULTS=$mode CONVERGE_TEST_BIN=$bin CONVERGE_FAULTS_LOGS=$work/logs CONVERGE_FAULTS_RESULTS=$work/results.md \
	go test -count=1 -timeout "$timeout" -run 'TestFaults' -v . 2>&1 | tee "$work/test.log" | grep -E '^(=== RUN|--- |    --- |PASS|FAIL|ok|\s+faults_test.go|\s+[a-z_]+_test.go:[0-9]+:)' || true
grep -q '^ok' "$work/test.log" || status=1
wall=$(( $(date +%s) - start ))
echo
if [ -f "$work/results.md" ]; then
	cat "$work/results.md"
	echo
	if [ "$mode" = full ]; then
		{
			echo "# Fault suite results"
			echo
			echo "\`make faults\` ($mode mode: 200 tasks per scenario, 5 agents, two Scheduler replicas, a private Postgres and Redis), $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, ${wall}s in all."
			echo "Each scenario checks: the run converges; every task is committed exactly once on the run branch;"
			echo "no lock is left held; the event stream read with a cursor across forced disconnects and the paged log"
			echo "hold every seq once; death→requeue is from the agent's kill -9 (or SIGSTOP, or cut) to its task's TASK_REQUEUED event;"
			echo "death→running again is from the kill to the task leased again and its file lock held by the new holder, as the suite saw them"
			echo "(polled every 50 ms). Timing \"suite\" is the suite's short heartbeat (1 s full, 0.5 s ci); the failure-path scenarios"
			echo "run with production-like timing, and a task that fails or a Verifier that refuses where their names say so."
			echo
			cat "$work/results.md"
		} > RESULTS.md
	fi
fi
echo "fault suite ($mode): $( [ $status = 0 ] && echo PASS || echo FAIL ) in ${wall}s; logs in $work (test.log, logs/)"
exit $status
