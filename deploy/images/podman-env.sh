# podman-env.sh — sourced by build.sh and the smoke test: `podman_env <dir>` writes a
# containers.conf and a registries.conf into <dir> and points podman at them. podman on the
# development machines and CI needs the cgroupfs cgroup manager, the runc runtime and no default
# ulimits; and no registry is searched for unqualified names.
podman_env() {
	cat >"$1/containers.conf" <<'CONF'
[containers]
default_ulimits = []

[engine]
cgroup_manager = "cgroupfs"
runtime = "runc"
CONF
	printf 'unqualified-search-registries = []\n' >"$1/registries.conf"
	CONTAINERS_CONF=$1/containers.conf
	CONTAINERS_REGISTRIES_CONF=$1/registries.conf
	export CONTAINERS_CONF CONTAINERS_REGISTRIES_CONF
}
