#!/bin/sh
# make load: 1,000 WatchExecution streams and 50 agent processes on one run of a production-shaped
# deployment (Postgres at 127.0.0.1:5432 and Redis at 127.0.0.1:6379, or CONVERGE_TEST_POSTGRES_URL
# and CONVERGE_TEST_REDIS_URL); prints the table and rewrites bench/load/RESULTS.md.
# Flags pass through, e.g. sh bench/load/run.sh --streams 200 --agents 10.
set -eu
cd "$(dirname "$0")"
exec go run . --streams 1000 --agents 50 --tasks 300 --width 50 --conns 4 --results RESULTS.md "$@"
