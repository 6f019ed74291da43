#!/bin/sh
# make bench: run every benchmark side by side with its peer and rewrite bench/RESULTS.md.
#
# Needs Go, git, ninja, make, redis-server and redis-benchmark on PATH (Debian: ninja-build,
# redis-tools, redis-server), Postgres at $CONVERGE_TEST_POSTGRES_URL (default
# postgres://postgres@127.0.0.1:5432/postgres, allowed to create databases) and Redis at
# $CONVERGE_TEST_REDIS_URL (default redis://127.0.0.1:6379/0).
#
# Sizes (environment): AGENTS (4: converge agents, ninja/make -j), CHAIN_TASKS (1000), DAG_TASKS
# (1000), DAG_EDGES (5000), DAG_SEED (1), PEER_ROUNDS (3), REGISTRY_CLIENTS (50),
# REGISTRY_DURATION (5s), REGISTRY_ROUNDS (3), REGISTRY_SET_REQUESTS (100000), KNOWLEDGE_ITEMS (1000000), KNOWLEDGE_QUERIES (20000),
# PLAN_BENCHTIME (3x), VERIFY_BENCHTIME (5x), FANOUT_SIZES (100,1000,10000; add 100000 for the full growth run). The outputs stay in $BENCH_OUT (default a temporary
# directory, printed at the end).
set -u
cd "$(dirname "$0")/.."
root=$(pwd)

AGENTS=${AGENTS:-4}
CHAIN_TASKS=${CHAIN_TASKS:-1000}
DAG_TASKS=${DAG_TASKS:-1000}
DAG_EDGES=${DAG_EDGES:-5000}
DAG_SEED=${DAG_SEED:-1}
PEER_ROUNDS=${PEER_ROUNDS:-3}
REGISTRY_CLIENTS=${REGISTRY_CLIENTS:-50}
REGISTRY_DURATION=${REGISTRY_DURATION:-5s}
REGISTRY_ROUNDS=${REGISTRY_ROUNDS:-3}
REGISTRY_SET_REQUESTS=${REGISTRY_SET_REQUESTS:-100000}
KNOWLEDGE_ITEMS=${KNOWLEDGE_ITEMS:-1000000}
KNOWLEDGE_QUERIES=${KNOWLEDGE_QUERIES:-20000}
PLAN_BENCHTIME=${PLAN_BENCHTIME:-3x}
VERIFY_BENCHTIME=${VERIFY_BENCHTIME:-5x}
CHAIN_NOTE=${CHAIN_NOTE:-}

out=${BENCH_OUT:-$(mktemp -d "${TMPDIR:-/tmp}/converge-bench-XXXXXX")}
mkdir -p "$out"
failed=""

step() { echo "== $(date -u +%H:%M:%S) $*" >&2; }

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
	echo "registry duration: $REGISTRY_DURATION"
} >"$out/settings.txt"
cat "$out/env.txt" >&2

run plan.txt services/scheduler go test -run '^$' -bench BenchmarkPlan100k -benchtime "$PLAN_BENCHTIME" ./plan
# P1b: the Scheduler's cost per task as the fan-out grows (FANOUT_SIZES, default 100,1000,10000).
CONVERGE_FANOUT_SIZES=${FANOUT_SIZES:-100,1000,10000} run fanout.txt services/scheduler go test -run '^$' -bench BenchmarkFanout -benchtime 1x -timeout 60m .
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

run registry.json bench/registry env GOWORK=off go run . --json --clients "$REGISTRY_CLIENTS" \
	--duration "$REGISTRY_DURATION" --rounds "$REGISTRY_ROUNDS" --set-requests "$REGISTRY_SET_REQUESTS"
run knowledge.json bench/knowledge env GOWORK=off go run . --json --items "$KNOWLEDGE_ITEMS" --queries "$KNOWLEDGE_QUERIES"
run dag.json bench/dag go run . --json --agents "$AGENTS" --chain-tasks "$CHAIN_TASKS" --tasks "$DAG_TASKS" \
	--edges "$DAG_EDGES" --seed "$DAG_SEED" --peer-rounds "$PEER_ROUNDS"

echo "load average at end (1, 5, 15 min): $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/env.txt"
step "writing bench/RESULTS.md"
(cd bench/report && go run . --dir "$out") >"$root/bench/RESULTS.md.tmp" && mv "$root/bench/RESULTS.md.tmp" "$root/bench/RESULTS.md"
echo "bench/RESULTS.md written; raw outputs in $out" >&2
if [ -n "$failed" ]; then
	echo "failed:$failed (see $out/*.err)" >&2
	exit 1
fi
