#!/bin/sh
# Builds the greeter example with converge: copies repo/ (the starting point) to a fresh directory
# under .converge/example/ (git-ignored), makes it a git repository with one commit, then runs
#
#   converge run examples/greeter/tasks.md --repo <that dir> --criteria examples/greeter/done-criteria.md --agents 3
#
# with the whole suite in this process. Extra arguments go to `converge run` (e.g. --json,
# --max-parallel 2). CONVERGE names a converge binary to use (default: built from this checkout);
# CONVERGE_EXAMPLE_DIR the directory to build in (default: a new one under .converge/example/).
# The exit status is converge run's: 0 only when Verify Done answered CONVERGED.
set -eu

root=$(cd "$(dirname "$0")/../.." && pwd)
example="$root/examples/greeter"

converge=${CONVERGE:-}
if [ -z "$converge" ]; then
	converge="$root/.converge/bin/converge"
	echo "building converge into $converge" >&2
	(cd "$root/cmd/converge" && go build -o "$converge" .)
fi

dir=${CONVERGE_EXAMPLE_DIR:-"$root/.converge/example/greeter-$(date +%Y%m%d-%H%M%S)-$$"}
if [ -e "$dir" ] && [ -n "$(ls -A "$dir" 2>/dev/null)" ]; then
	echo "run.sh: $dir exists and is not empty; give an empty or new CONVERGE_EXAMPLE_DIR" >&2
	exit 2
fi
mkdir -p "$dir"
cp -R "$example/repo/." "$dir/"
git -C "$dir" init -q
git -C "$dir" add -A
git -C "$dir" -c user.name="converge example" -c user.email=example@converge.invalid \
	commit -q -m "greeter: the starting point"
# Under converge's checkout, go would take converge's go.work for this module's: a go.work of its
# own (not committed) keeps `go run .` working in the copy.
printf 'go 1.22\n\nuse .\n' >"$dir/go.work"
echo go.work >>"$dir/.git/info/exclude"
echo "sample repository: $dir" >&2

exec "$converge" run "$example/tasks.md" --repo "$dir" --criteria "$example/done-criteria.md" --agents 3 "$@"
