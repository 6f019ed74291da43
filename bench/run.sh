#!/bin/sh
# make bench: run every benchmark side by side with its peer and rewrite bench/RESULTS.md.
# make bench-growth (sh bench/run.sh growth): only the growth benchmark (BenchmarkFanout at
# FANOUT_SIZES, default 100,1000,10000,100000, embedded and Postgres); prints its table and keeps
# its outputs in $BENCH_OUT for a later `FANOUT_FROM=<that dir> make bench`.
#
# Needs Go, git, ninja, make, redis-server and redis-benchmark on PATH (Debian: ninja-build,
# redis-tools, redis-server), Postgres at $CONVERGE_TEST_POSTGRES_URL (default
# postgres://postgres@127.0.0.1:5432/postgres, allowed to create databases) and Redis at
# $CONVERGE_TEST_REDIS_URL (default redis://127.0.0.1:6379/0).
#
# Sizes (environment), defaults as in issue 17's table: AGENTS (2: converge agents, ninja/make -j),
# CHAIN_TASKS (300), DAG_TASKS (1000), DAG_EDGES (5000), DAG_SEED (1), PEER_ROUNDS (3),
# DAG_ROUNDS (3: bench/dag runs each graph in this many rounds, each running ninja and make
# PEER_ROUNDS times and every converge configuration once, and reports each side's median round),
# REGISTRY_CLIENTS (50), REGISTRY_DURATION (5s), REGISTRY_ROUNDS (3), REGISTRY_SET_REQUESTS
# (100000), KNOWLEDGE_ITEMS (1000000), KNOWLEDGE_QUERIES (20000), PLAN_BENCHTIME (3x),
# VERIFY_BENCHTIME (5x), FANOUT_SIZES (100,1000,10000; growth: 100,1000,10000,100000),
# FANOUT_MAX_PARALLEL (1024), FANOUT_STARTED_REPORT (empty: the fan-out's agents send TASK_STARTED
# with the completion, as converge-agent does for a short task; non-empty: in a report of its own),
# LOAD_STREAMS (1000), LOAD_AGENTS (50), LOAD_TASKS (300), LOAD_ROUNDS (5), DAG_PREFETCH (off:
# bench/dag's agents without --prefetch; off,on runs every converge configuration both ways, side
# by side).
# BENCH_ONLY (space-separated, default all): plan fanout verifier registry knowledge dag load; also
# floor (not in the default: about 3 min): bench/dag --floor --mode postgres, the Postgres deployment's
# floor of a no-op task beside ninja and the real P1 Postgres run, and --floor --mode sqlite, the
# embedded deployment's with agent processes beside the real P1 embedded run with agent processes,
# PEER_ROUNDS rounds each.
# FANOUT_FROM: the output directory of an earlier `make bench-growth` (or several, space-separated),
# whose growth figures RESULTS.md then shows (with each run's date, commit and command) instead of
# running it again.
# The outputs stay in $BENCH_OUT (default a temporary directory, printed at the end).
set -u
cd "$(dirname "$0")/.."
root=$(pwd)

mode=${1:-all}
case $mode in
all) FANOUT_SIZES=${FANOUT_SIZES:-100,1000,10000} ;;
growth)
	BENCH_ONLY=fanout
	FANOUT_SIZES=${FANOUT_SIZES:-100,1000,10000,100000}
	;;
*)
	echo "usage: sh bench/run.sh [all|growth]" >&2
	exit 2
	;;
esac
BENCH_ONLY=${BENCH_ONLY:-plan fanout verifier registry knowledge dag load}
AGENTS=${AGENTS:-2}
CHAIN_TASKS=${CHAIN_TASKS:-300}
DAG_TASKS=${DAG_TASKS:-1000}
DAG_EDGES=${DAG_EDGES:-5000}
DAG_SEED=${DAG_SEED:-1}
DAG_PREFETCH=${DAG_PREFETCH:-off}
PEER_ROUNDS=${PEER_ROUNDS:-3}
DAG_ROUNDS=${DAG_ROUNDS:-3}
REGISTRY_CLIENTS=${REGISTRY_CLIENTS:-50}
REGISTRY_DURATION=${REGISTRY_DURATION:-5s}
REGISTRY_ROUNDS=${REGISTRY_ROUNDS:-3}
REGISTRY_SET_REQUESTS=${REGISTRY_SET_REQUESTS:-100000}
KNOWLEDGE_ITEMS=${KNOWLEDGE_ITEMS:-1000000}
KNOWLEDGE_QUERIES=${KNOWLEDGE_QUERIES:-20000}
PLAN_BENCHTIME=${PLAN_BENCHTIME:-3x}
VERIFY_BENCHTIME=${VERIFY_BENCHTIME:-5x}
CHAIN_NOTE=${CHAIN_NOTE:-}
FANOUT_MAX_PARALLEL=${FANOUT_MAX_PARALLEL:-1024}
FANOUT_FROM=${FANOUT_FROM:-}
FANOUT_STARTED_REPORT=${FANOUT_STARTED_REPORT:-}
LOAD_STREAMS=${LOAD_STREAMS:-1000}
LOAD_AGENTS=${LOAD_AGENTS:-50}
LOAD_TASKS=${LOAD_TASKS:-300}
LOAD_ROUNDS=${LOAD_ROUNDS:-5}

out=${BENCH_OUT:-$(mktemp -d "${TMPDIR:-/tmp}/converge-bench-XXXXXX")}
mkdir -p "$out"
failed=""

step() { echo "== $(date -u +%H:%M:%S) $*" >&2; }

# want NAME: NAME is in BENCH_ONLY.
want() {
	case " $BENCH_ONLY " in
	*" $1 "*) return 0 ;;
	esac
	return 1
}

# The load average every 30 s while the benchmarks run (load.txt: "HH:MM:SS 1min 5min 15min").
(
	while :; do
		echo "$(date -u +%H:%M:%S) $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/load.txt"
		sleep 30
	done
) &
sampler=$!
trap 'kill "$sampler" 2>/dev/null' EXIT

# run NAME DIR CMD...: CMD's stdout to $out/NAME, its stderr to $out/NAME.err (and the terminal).
run() {
	name=$1 dir=$2
	shift 2
	step "$name: $*"
	if ! (cd "$dir" && "$@") >"$out/$name" 2>"$out/$name.err"; then
		failed="$failed $name"
		echo "   $name failed; last lines of its stderr:" >&2
		tail -n 5 "$out/$name.err" >&2
	fi
}

# The machine.
pgurl=${CONVERGE_TEST_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/postgres}
{
	echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
	echo "cores: $(nproc)"
	echo "CPU: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)"
	echo "memory: $(awk '/^MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo)"
	echo "kernel: $(uname -sr)"
	echo "Go: $(go version | cut -d' ' -f3-)"
	echo "ninja: $(ninja --version 2>/dev/null || echo missing)"
	echo "make: $(make --version 2>/dev/null | head -n 1)"
	echo "Redis: $(redis-server --version 2>/dev/null | sed 's/^Redis server //; s/ sha=.*//' || echo missing)"
	echo "redis-benchmark: $(command -v redis-benchmark >/dev/null && echo present || echo missing)"
	echo "Postgres: $(psql "$pgurl" -tAc 'SHOW server_version' 2>/dev/null || echo '?')"
	echo "git: $(git --version | cut -d' ' -f3)"
	echo "commit: $(git rev-parse --short HEAD) ($(git status --porcelain --untracked-files=no | wc -l) files with uncommitted changes)"
	echo "load average at start (1, 5, 15 min): $(cut -d' ' -f1-3 /proc/loadavg)"
} >"$out/env.txt"
{
	echo "agents: $AGENTS"
	echo "chain tasks: $CHAIN_TASKS"
	echo "chain note: $CHAIN_NOTE"
	echo "seed: $DAG_SEED"
	echo "peer rounds: $PEER_ROUNDS"
	echo "dag rounds: $DAG_ROUNDS"
	echo "registry duration: $REGISTRY_DURATION"
	echo "knowledge items: $KNOWLEDGE_ITEMS"
	echo "benchmarks: $BENCH_ONLY"
	echo "command: $(env | grep -E '^(AGENTS|CHAIN_TASKS|DAG_[A-Z]+|PEER_ROUNDS|REGISTRY_[A-Z_]+|KNOWLEDGE_[A-Z]+|PLAN_BENCHTIME|VERIFY_BENCHTIME|FANOUT_[A-Z_]+|LOAD_[A-Z]+|BENCH_ONLY)=' |
		sort | sed "s/=\(.* .*\)\$/='\1'/" | tr '\n' ' ')sh bench/run.sh $mode"
} >"$out/settings.txt"
cat "$out/env.txt" >&2
# The figures this run replaces: RESULTS.md keeps them next to the new ones.
[ "$mode" = growth ] || cp bench/RESULTS.md "$out/previous-RESULTS.md" 2>/dev/null

want plan && run plan.txt services/scheduler go test -run '^$' -bench BenchmarkPlan100k -benchtime "$PLAN_BENCHTIME" ./plan

# P1b, the growth benchmark: the Scheduler's cost and memory per task as the fan-out grows, the
# claim path converge-agent takes (fused complete-and-claim), embedded and on Postgres.
if [ -n "$FANOUT_FROM" ] || want fanout; then
	if [ -n "$FANOUT_FROM" ]; then
		# Several directories (space-separated) join their figures, each row marked with its run.
		step "fanout: the figures of $FANOUT_FROM"
		: >"$out/fanout.txt"
		: >"$out/fanout-meta.txt"
		for d in $FANOUT_FROM; do
			{ sed -n 's/^date: /run: /p' "$d/fanout-meta.txt" && cat "$d/fanout.txt"; } >>"$out/fanout.txt" &&
				{ cat "$d/fanout-meta.txt" && echo; } >>"$out/fanout-meta.txt" || failed="$failed fanout.txt"
		done
	else
		{
			echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
			echo "commit: $(git rev-parse --short HEAD)"
			echo "command: ${FANOUT_STARTED_REPORT:+FANOUT_STARTED_REPORT=$FANOUT_STARTED_REPORT }FANOUT_SIZES=$FANOUT_SIZES FANOUT_MAX_PARALLEL=$FANOUT_MAX_PARALLEL sh bench/run.sh $mode"
			echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
		} >"$out/fanout-meta.txt"
		CONVERGE_FANOUT_SIZES=$FANOUT_SIZES CONVERGE_FANOUT_MAX_PARALLEL=$FANOUT_MAX_PARALLEL \
			CONVERGE_FANOUT_STARTED_REPORT=$FANOUT_STARTED_REPORT run fanout.txt services/scheduler \
			go test -run '^$' -bench 'BenchmarkFanout/(sqlite|postgres)/fused=true/' -benchtime 1x -timeout 180m .
		echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/fanout-meta.txt"
	fi
fi

if want verifier; then
	run verifier.txt services/verifier go test -run '^$' -bench BenchmarkVerifyParallelCommands -benchtime "$VERIFY_BENCHTIME" .
	# The verifier's measured peer: the same 100 checks of `sleep 0.1` under xargs -P 8, 3 times.
	step "verifier peer: xargs -P 8"
	: >"$out/verifier-peer.txt"
	for _ in 1 2 3; do
		t0=$(date +%s%N)
		seq 100 | xargs -P 8 -n 1 sh -c 'sleep 0.1' sh
		t1=$(date +%s%N)
		echo "$t0 $t1" | awk '{printf "%.4f\n", ($2 - $1) / 1e9}' >>"$out/verifier-peer.txt"
	done
	# Its floor: the same 100 `sleep 0.1` from 8 goroutines with os/exec, nothing else.
	run verifier-floor.txt services/verifier go test -run '^$' -bench BenchmarkSpawnFloor -benchtime "$VERIFY_BENCHTIME" .
fi

want registry && run registry.json bench/registry go run . --json --clients "$REGISTRY_CLIENTS" \
	--duration "$REGISTRY_DURATION" --rounds "$REGISTRY_ROUNDS" --set-requests "$REGISTRY_SET_REQUESTS"
want knowledge && run knowledge.json bench/knowledge go run . --json --items "$KNOWLEDGE_ITEMS" --queries "$KNOWLEDGE_QUERIES"
want dag && run dag.json bench/dag go run . --json --agents "$AGENTS" --chain-tasks "$CHAIN_TASKS" --tasks "$DAG_TASKS" \
	--edges "$DAG_EDGES" --seed "$DAG_SEED" --peer-rounds "$PEER_ROUNDS" --rounds "$DAG_ROUNDS" --prefetch "$DAG_PREFETCH"
want floor && run dag-floor.json bench/dag go run . --floor --mode postgres --json --agents "$AGENTS" \
	--tasks "$(( DAG_TASKS < 1024 ? DAG_TASKS : 1024 ))" --peer-rounds "$PEER_ROUNDS"
want floor && run dag-floor-sqlite.json bench/dag go run . --floor --mode sqlite --json --agents "$AGENTS" \
	--tasks "$DAG_TASKS" --peer-rounds "$PEER_ROUNDS"
# R8: the same run of LOAD_AGENTS agents without WatchExecution streams (the peer), with
# LOAD_STREAMS of them taking up to 100 entries per message (the client reading each entry's seq
# and time), the same with the client decoding every field, and with as many taking one entry per
# message (as clients did before max_entries_per_message, decoded in full), one after the other.
if want load; then
	# LOAD_ROUNDS alternated rounds of the four (50 agent processes starting make one run's wall
	# vary more than the streams cost); bench/report takes each kind's median.
	for r in $(seq "$LOAD_ROUNDS"); do
		run "load-0.$r.json" bench/load go run . --json --streams 0 --agents "$LOAD_AGENTS" --tasks "$LOAD_TASKS" --width 50 --conns 4
		run "load-streams.$r.json" bench/load go run . --json --streams "$LOAD_STREAMS" --batch 100 --agents "$LOAD_AGENTS" --tasks "$LOAD_TASKS" --width 50 --conns 4
		run "load-streams-full.$r.json" bench/load go run . --json --streams "$LOAD_STREAMS" --batch 100 --decode full --agents "$LOAD_AGENTS" --tasks "$LOAD_TASKS" --width 50 --conns 4
		run "load-streams-single.$r.json" bench/load go run . --json --streams "$LOAD_STREAMS" --batch 1 --decode full --agents "$LOAD_AGENTS" --tasks "$LOAD_TASKS" --width 50 --conns 4
	done
fi

{
	echo "finished: $(date -u '+%Y-%m-%d %H:%M UTC')"
	echo "load average at end (1, 5, 15 min): $(cut -d' ' -f1-3 /proc/loadavg)"
} >>"$out/env.txt"
if [ "$mode" = growth ]; then
	(cd bench/report && go run . --dir "$out" --only fanout) | tee "$out/GROWTH.md"
	echo "growth figures in $out/GROWTH.md; for RESULTS.md: FANOUT_FROM=$out make bench" >&2
else
	step "writing bench/RESULTS.md"
	(cd bench/report && go run . --dir "$out") >"$root/bench/RESULTS.md.tmp" && mv "$root/bench/RESULTS.md.tmp" "$root/bench/RESULTS.md"
	echo "bench/RESULTS.md written; raw outputs in $out" >&2
fi
if [ -n "$failed" ]; then
	echo "failed:$failed (see $out/*.err)" >&2
	exit 1
fi
