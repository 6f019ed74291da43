#!/bin/sh
# build.sh — `make images`: build converge's six images with podman on a machine with no container
# registry. Static CGO_ENABLED=0 binaries are built on the host; knowledge, registry and the
# converge CLI go FROM scratch (Containerfile), scheduler, verifier and agent FROM a Debian base
# with git (Containerfile.git). Nothing is pulled: every podman command runs in a network
# namespace of its own with no interface but loopback (unshare --net), so a registry could not be
# reached if anything tried.
#
# The git base, localhost/converge-base-git:bookworm, is made once (and kept) with mmdebstrap: a
# Debian minbase with git and ca-certificates from apt's own sources (the host's
# /etc/apt/sources.list.d/debian.sources), imported with `podman import`.
#
# Environment:
#   CONVERGE_IMAGE_TAG  tag of the six images (default dev): localhost/converge-<name>:<tag>
#   CONVERGE_BASE       missing (default): make the git base when it is not there; rebuild: make it
#                       again; keep: use the one there (e.g. built from Containerfile.base-debian)
#   CONVERGE_IMAGES     which images (default: "knowledge registry converge scheduler verifier agent")
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
tag=${CONVERGE_IMAGE_TAG:-dev}
base_mode=${CONVERGE_BASE:-missing}
images=${CONVERGE_IMAGES:-knowledge registry converge scheduler verifier agent}
base=localhost/converge-base-git:bookworm

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
need() { # need <command> <debian packages...>
	cmd=$1; shift
	command -v "$cmd" >/dev/null 2>&1 && return 0
	echo "images: installing $* from Debian"
	as_root apt-get update -qq
	as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}
need podman podman
need runc runc
need mmdebstrap mmdebstrap

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT INT TERM
# podman on this machine: cgroupfs, runc, no default ulimits; and no registry to search.
. "$here/podman-env.sh"
podman_env "$work"
offline() { as_root unshare --net "$@"; }

# The build context: binaries, the host's CA bundle, an empty /tmp.
ctx=$work/context
mkdir -p "$ctx/bin" "$ctx/etc/ssl/certs" "$ctx/tmp" "$ctx/work"
chmod 1777 "$ctx/tmp"
cp /etc/ssl/certs/ca-certificates.crt "$ctx/etc/ssl/certs/ca-certificates.crt"
build() { # build <module dir> <package> <output name>
	(cd "$root/$1" && CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$ctx/bin/$3" "$2")
}
echo "images: building static binaries"
build cmd/converge . converge
for s in scheduler agent verifier knowledge registry; do
	build "services/$s" "./cmd/converge-$s" "converge-$s"
done
build deploy ./cmd/converge-healthcheck converge-healthcheck
build platform ./proc/cmd/converge-sandbox-init converge-sandbox-init
for b in "$ctx"/bin/*; do # static: built with cgo off (FROM scratch has no libc)
	go version -m "$b" | grep -q 'CGO_ENABLED=0' || { echo "images: $b was not built with CGO_ENABLED=0" >&2; exit 1; }
done

needs_git=false
for i in $images; do case $i in scheduler | verifier | agent) needs_git=true ;; esac; done
if $needs_git; then
	if [ "$base_mode" = rebuild ] || { [ "$base_mode" = missing ] && ! podman image exists "$base"; }; then
		echo "images: making $base with mmdebstrap (Debian minbase + git, from apt's sources)"
		as_root mmdebstrap --quiet --variant=minbase --include=git,ca-certificates \
			--aptopt='Acquire::Languages "none"' \
			--dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
			--dpkgopt='path-exclude=/usr/share/locale/*' \
			--customize-hook='chroot "$1" groupadd --gid 65532 converge' \
			--customize-hook='chroot "$1" useradd -K UID_MAX=65535 --uid 65532 --gid 65532 --create-home --home-dir /home/converge --shell /bin/sh converge' \
			bookworm "$work/base.tar" - </etc/apt/sources.list.d/debian.sources
		offline podman import --change 'CMD ["/bin/bash"]' "$work/base.tar" "$base" >/dev/null
		rm -f "$work/base.tar"
	fi
	podman image exists "$base" || { echo "images: $base is missing (CONVERGE_BASE=$base_mode)" >&2; exit 1; }
fi

for i in $images; do
	case $i in
	knowledge | registry | converge) file=Containerfile ;;
	scheduler | verifier | agent) file=Containerfile.git ;;
	*) echo "images: unknown image $i" >&2; exit 1 ;;
	esac
	name=localhost/converge-$i:$tag
	[ "$i" = converge ] && name=localhost/converge:$tag
	echo "images: $name"
	offline podman build --quiet --pull=never --network=none --target "$i" -f "$here/$file" -t "$name" "$ctx" >/dev/null
done
podman images --filter reference='localhost/converge*' --format '{{.Repository}}:{{.Tag}}  {{.Size}}'
