#!/bin/sh
# new-env.sh — print a .env for compose.yaml with fresh random values: `sh new-env.sh >.env`.
# One token is both what the services accept (CONVERGE_AUTH_TOKENS) and what they and the clients
# send (CONVERGE_TOKEN); rotate it as docs/deploy.md says.
#
#   --debian-infra   also use the Postgres and Redis images `make infra-images` builds from Debian
#                    packages (for a host with no container registry) instead of docker.io's
set -eu
rand() { od -An -N"$1" -tx1 /dev/urandom | tr -d ' \n'; }
token=$(rand 24)
echo "# made by new-env.sh; keep it secret (chmod 600)"
echo "CONVERGE_TOKEN=$token"
echo "CONVERGE_AUTH_TOKENS=$token"
echo "POSTGRES_PASSWORD=$(rand 16)"
for arg in "$@"; do
	case $arg in
	--debian-infra)
		echo "POSTGRES_IMAGE=localhost/converge-dev-postgres:bookworm"
		echo "REDIS_IMAGE=localhost/converge-dev-redis:bookworm"
		;;
	*) echo "new-env.sh: unknown argument $arg (want --debian-infra)" >&2; exit 2 ;;
	esac
done
