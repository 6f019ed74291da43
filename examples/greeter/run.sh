#!/bin/sh
# Builds the greeter example with converge: copies repo/ (the starting point) to a fresh directory
# under .converge/example/ (git-ignored), makes it a git repository with one commit, then runs
#
#   converge run <that dir>/tasks.md --repo <that dir> --criteria examples/greeter/done-criteria.md --agents 3
#
# with the whole suite in this process, on a copy of examples/greeter/tasks.md (git-ignored in the
# copy): converge run writes each task's status back into it as the run goes, and the execution
# tracking table at its end, so after a converged run every task is 🟢 DONE and the rest of the
# file is byte for byte the example's. Extra arguments go to `converge run` (e.g. --json,
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
# The task list the run writes its progress into (not part of the repository).
cp "$example/tasks.md" "$dir/tasks.md"
echo tasks.md >>"$dir/.git/info/exclude"
echo "sample repository: $dir (task list: $dir/tasks.md)" >&2

exec "$converge" run "$dir/tasks.md" --repo "$dir" --criteria "$example/done-criteria.md" --agents 3 "$@"
