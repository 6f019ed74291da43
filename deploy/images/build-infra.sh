#!/bin/sh
# build-infra.sh — `make infra-images`: Postgres and Redis images for deploy/compose/compose.yaml on
# a machine with no container registry, made like the git base (build.sh): a Debian bookworm
# minbase with postgresql and redis-server from apt's own sources (mmdebstrap), `podman import`ed
# twice with different entrypoints:
#
#   localhost/converge-dev-postgres:bookworm  POSTGRES_USER, POSTGRES_PASSWORD, POSTGRES_DB and
#                                             /var/lib/postgresql/data as the official image has them
#   localhost/converge-dev-redis:bookworm     redis-server, redis-cli
#
# deploy/compose/new-env.sh --debian-infra points Compose at them (POSTGRES_IMAGE, REDIS_IMAGE).
# With a registry, use the official images (Compose's defaults) instead.
#
# Environment: CONVERGE_BASE=rebuild makes them again (default: only when missing).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
pg=localhost/converge-dev-postgres:bookworm
redis=localhost/converge-dev-redis:bookworm
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
for cmd in podman runc mmdebstrap; do
	command -v "$cmd" >/dev/null 2>&1 && continue
	echo "infra-images: installing $cmd from Debian"
	as_root apt-get update -qq
	as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$cmd" >/dev/null
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT INT TERM
. "$here/podman-env.sh"
podman_env "$work"
if [ "${CONVERGE_BASE:-missing}" != rebuild ] && podman image exists "$pg" && podman image exists "$redis"; then
	echo "infra-images: $pg and $redis are there (CONVERGE_BASE=rebuild to make them again)"
	exit 0
fi
echo "infra-images: Debian minbase + postgresql + redis-server with mmdebstrap"
as_root mmdebstrap --quiet --variant=minbase --include=postgresql,redis-server,redis-tools,util-linux \
	--aptopt='Acquire::Languages "none"' \
	--dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
	--dpkgopt='path-exclude=/usr/share/locale/*' \
	--customize-hook="copy-in $here/infra/postgres-entrypoint $here/infra/redis-entrypoint /usr/local/bin" \
	--customize-hook='chroot "$1" sh -c "ln -sf \$(ls -d /usr/lib/postgresql/*/bin | tail -n 1)/pg_isready /usr/local/bin/pg_isready"' \
	--customize-hook='rm -rf "$1"/var/lib/postgresql/*/main "$1"/etc/postgresql/*/main' \
	bookworm "$work/infra.tar" - </etc/apt/sources.list.d/debian.sources
as_root unshare --net podman import --change 'ENTRYPOINT ["/usr/local/bin/postgres-entrypoint"]' \
	--change 'CMD ["postgres"]' --change 'STOPSIGNAL SIGINT' --change 'EXPOSE 5432' \
	--change 'ENV PGDATA=/var/lib/postgresql/data' "$work/infra.tar" "$pg" >/dev/null
as_root unshare --net podman import --change 'ENTRYPOINT ["/usr/local/bin/redis-entrypoint"]' \
	--change 'CMD ["redis-server"]' --change 'EXPOSE 6379' "$work/infra.tar" "$redis" >/dev/null
podman images --filter reference='localhost/converge-dev-*' --format '{{.Repository}}:{{.Tag}}  {{.Size}}'
