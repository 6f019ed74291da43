#!/bin/sh
# smoke.sh — `make deploy-smoke`: the images, run with podman against this machine's Postgres and
# Redis (host network), build examples/greeter through the containerised Scheduler with
# `converge run --server`, and expect CONVERGED; then stop every container with SIGTERM and expect
# each to exit 0 within its grace period (a clean drain). One agent is stopped that way in the
# middle of the run, which must converge all the same (no task lost). The containers run as the Kubernetes
# manifests run them: non-root, read-only root filesystem, no capabilities.
#
# The greeter's validations and checks run `go`: the agents and the Verifier get the host's Go
# toolchain mounted read-only at /usr/local/go (GOTOOLCHAIN=local, GOPROXY=off: nothing is
# downloaded). A team would extend the images instead (docs/deploy.md).
#
# Environment:
#   CONVERGE_SMOKE_POSTGRES_URL  an admin URL of the machine's Postgres (default: CONVERGE_TEST_POSTGRES_URL,
#                                else postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable);
#                                the smoke creates and drops a database of its own
#   CONVERGE_SMOKE_REDIS_URL     default redis://127.0.0.1:6379/7
#   CONVERGE_SMOKE_PORT          first of six consecutive loopback ports (default 27071)
#   CONVERGE_SMOKE_SKIP_IMAGES   1: use the images already built (default: run build.sh first)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
tag=${CONVERGE_IMAGE_TAG:-dev}
admin=${CONVERGE_SMOKE_POSTGRES_URL:-${CONVERGE_TEST_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable}}
redis=${CONVERGE_SMOKE_REDIS_URL:-redis://127.0.0.1:6379/7}
port=${CONVERGE_SMOKE_PORT:-27071}
token=smoke-$$-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')
run=converge-smoke-$$
db=converge_smoke_$$

if [ "${CONVERGE_SMOKE_SKIP_IMAGES:-}" != 1 ]; then
	CONVERGE_IMAGES="knowledge registry converge scheduler verifier agent" sh "$here/images/build.sh"
fi

work=$(mktemp -d)
chmod 755 "$work"
. "$here/images/podman-env.sh"
podman_env "$work"
containers=""
cleanup() {
	for c in $containers; do podman rm -f -t 0 "$c" >/dev/null 2>&1 || true; done
	psql "$admin" -qc "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1 || true
	rm -rf "$work"
}
trap cleanup EXIT INT TERM
log() { printf 'deploy-smoke: %s\n' "$*"; }
fail() {
	log "FAIL: $*"
	for c in $containers; do echo "--- logs of $c"; podman logs --tail 40 "$c" 2>&1 || true; done
	exit 1
}

psql "$admin" -qc "CREATE DATABASE $db" >/dev/null
dburl=$(printf '%s' "$admin" | sed -E "s|/[^/?]*(\?\|$)|/$db\1|")
log "database $db; migrating with the converge image"
podman run --rm --network=host -e CONVERGE_POSTGRES_URL="$dburl" "localhost/converge:$tag" migrate >/dev/null

# The greeter's repository, owned by the containers' user (65532): the Scheduler resolves its base
# ref, the agents clone it and push their branches back. The Scheduler checks run branches out for
# the Verifier under $work/verify, which both see at the same path.
repo=$work/greeter
mkdir -p "$repo" "$work/verify" "$work/home"
cp -R "$root/examples/greeter/repo/." "$repo/"
git -C "$repo" init -q
git -C "$repo" add -A
git -C "$repo" -c user.name="converge smoke" -c user.email=smoke@converge.invalid commit -q -m "greeter: the starting point"
# The task list and the criteria, where the run's user can read them (a checkout's own directory
# may be private to its owner, as a mktemp -d clone is).
mkdir -p "$work/spec"
cp "$root/examples/greeter/tasks.md" "$root/examples/greeter/done-criteria.md" "$work/spec/"
chown -R 65532:65532 "$repo" "$work/verify" "$work/home" "$work/spec"

goroot=$(go env GOROOT)
# As the Kubernetes manifests run them: read-only root filesystem with writable /tmp and $HOME
# (emptyDir there), no capabilities, no privilege escalation.
common="--network=host --read-only --read-only-tmpfs=false --tmpfs /tmp:rw,mode=1777 --mount type=tmpfs,destination=/home/converge,U=true
	--cap-drop=ALL --security-opt=no-new-privileges
	-e CONVERGE_AUTH_TOKENS=$token -e CONVERGE_TOKEN=$token -e CONVERGE_LOG_LEVEL=info"
gomount="-v $goroot:/usr/local/go:ro -e PATH=/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin -e GOTOOLCHAIN=local -e GOPROXY=off -e GOFLAGS=-mod=mod"
start() { # start <name> <image> <podman args...>
	name=$run-$1 image=$2
	shift 2
	# shellcheck disable=SC2086 # word splitting of the option lists is intended
	podman run -d --name "$name" $common "$@" "$image" >/dev/null
	containers="$containers $name"
}
healthy() { # healthy <container>: wait up to 60 s for its gRPC health to answer SERVING
	for _ in $(seq 1 120); do
		podman exec "$1" /usr/local/bin/converge-healthcheck >/dev/null 2>&1 && return 0
		[ "$(podman inspect -f '{{.State.Running}}' "$1")" = true ] || fail "$1 exited"
		sleep 0.5
	done
	fail "$1 did not become healthy"
}

log "starting the services on 127.0.0.1:$port-$((port + 5))"
start registry "localhost/converge-registry:$tag" -e CONVERGE_LISTEN=127.0.0.1:$((port + 1)) \
	-e CONVERGE_POSTGRES_URL="$dburl" -e CONVERGE_REDIS_URL="$redis"
start knowledge "localhost/converge-knowledge:$tag" -e CONVERGE_LISTEN=127.0.0.1:$((port + 2)) \
	-e CONVERGE_POSTGRES_URL="$dburl"
# shellcheck disable=SC2086
start verifier "localhost/converge-verifier:$tag" -e CONVERGE_LISTEN=127.0.0.1:$((port + 3)) \
	-e CONVERGE_POSTGRES_URL="$dburl" -e CONVERGE_VERIFIER_ALLOWED_ROOTS="$work/verify" \
	-v "$work/verify:$work/verify" -v "$repo:$repo" $gomount
for c in registry knowledge verifier; do healthy "$run-$c"; done
start scheduler "localhost/converge-scheduler:$tag" -e CONVERGE_LISTEN=127.0.0.1:$port \
	-e CONVERGE_POSTGRES_URL="$dburl" -e CONVERGE_REGISTRY_ADDR=127.0.0.1:$((port + 1)) \
	-e CONVERGE_VERIFIER_ADDR=127.0.0.1:$((port + 3)) -e CONVERGE_SCHEDULER_WORK_DIR="$work/verify" \
	-v "$work/verify:$work/verify" -v "$repo:$repo"
healthy "$run-scheduler"
for i in 1 2; do
	# shellcheck disable=SC2086
	start agent$i "localhost/converge-agent:$tag" -e CONVERGE_LISTEN=127.0.0.1:$((port + 3 + i)) \
		-e CONVERGE_SCHEDULER_ADDR=127.0.0.1:$port -e CONVERGE_REGISTRY_ADDR=127.0.0.1:$((port + 1)) \
		-e CONVERGE_KNOWLEDGE_ADDR=127.0.0.1:$((port + 2)) -e CONVERGE_INSTANCE_ID=$run-agent$i \
		-e CONVERGE_AGENT_DRAIN_TIMEOUT=30s -e CONVERGE_ALLOWED_ROOTS="$repo" -v "$repo:$repo" $gomount
	healthy "$run-agent$i"
done

log "converge run examples/greeter --server 127.0.0.1:$port"
(cd "$root/cmd/converge" && CGO_ENABLED=0 go build -o "$work/converge" .)
# converge run reads the repository with git too: as the user that owns it.
out=$work/run.out
setpriv --reuid 65532 --regid 65532 --clear-groups env HOME="$work/home" CONVERGE_TOKEN="$token" \
	"$work/converge" run "$work/spec/tasks.md" --no-write-back --server 127.0.0.1:$port \
	--repo "$repo" --criteria "$work/spec/done-criteria.md" >"$out" 2>&1 &
runpid=$!
# A drain in the middle of the run: once agent1 has completed an assignment, SIGTERM it. It stops
# claiming, finishes what it holds and exits 0; agent2 takes the rest, and the run still converges.
for _ in $(seq 1 240); do
	podman logs "$run-agent1" 2>&1 | grep -q "assignment completed" && break
	kill -0 "$runpid" 2>/dev/null || break
	sleep 0.5
done
if kill -0 "$runpid" 2>/dev/null; then
	log "SIGTERM to agent1 while the run goes on"
	podman stop -t 60 "$run-agent1" >/dev/null
	code=$(podman inspect -f '{{.State.ExitCode}}' "$run-agent1")
	[ "$code" = 0 ] || fail "agent1 exited $code after SIGTERM in the middle of the run"
else
	log "the run ended before agent1 completed an assignment: no drain in the middle of the run"
fi
if ! wait "$runpid"; then
	cat "$out"
	fail "converge run did not converge"
fi
# converge run exits 0 only when Verify Done answered CONVERGED.
grep CONVERGED "$out" || { cat "$out"; fail "converge run exited 0 without saying CONVERGED"; }

log "stopping: SIGTERM, every container must exit 0 within its grace period"
for c in $containers; do
	case $c in *agent*) grace=60 ;; *) grace=25 ;; esac
	podman stop -t "$grace" "$c" >/dev/null
	code=$(podman inspect -f '{{.State.ExitCode}}' "$c")
	[ "$code" = 0 ] || fail "$c exited $code after SIGTERM (killed at the grace period: 137)"
done
log "ok: greeter CONVERGED through the containers; $(echo $containers | wc -w) containers drained and exited 0"
