#!/bin/sh
# Runs the two stop-rule examples with converge run, each in a fresh git repository under
# .converge/example/ (git-ignored), on a copy of its task list (converge run writes each task's
# status back into it):
#
#   converge run max-failed-tasks.md --max-failed-tasks 1 --max-retries 0 --agents 2
#   converge run critical-phase.md --max-retries 0 --agents 1
#
# Both end FAILED (exit status 1), each by its own stop rule; the script exits 0 when both did.
# CONVERGE names a converge binary to use (default: built from this checkout).
set -eu

root=$(cd "$(dirname "$0")/../.." && pwd)
example="$root/examples/stop-rules"
converge=${CONVERGE:-}
if [ -z "$converge" ]; then
	converge="$root/.converge/bin/converge"
	echo "building converge into $converge" >&2
	(cd "$root/cmd/converge" && go build -o "$converge" .)
fi

run() { # run <tasks file> <flags...>: converge run in a new repository; prints its summary
	name=$1
	shift
	dir="$root/.converge/example/stop-rules-$name-$(date +%Y%m%d-%H%M%S)-$$"
	mkdir -p "$dir"
	git -C "$dir" init -q
	echo "# $name" >"$dir/README.md"
	git -C "$dir" add -A
	git -C "$dir" -c user.name="converge example" -c user.email=example@converge.invalid commit -q -m "stop-rules: the starting point"
	cp "$example/$name.md" "$dir/tasks.md"
	echo tasks.md >>"$dir/.git/info/exclude"
	echo "== converge run $name.md $* (repository $dir)" >&2
	if "$converge" run "$dir/tasks.md" --repo "$dir" "$@"; then
		echo "run.sh: $name.md converged, but a stop rule should have ended it FAILED" >&2
		return 1
	fi
}

run max-failed-tasks --max-failed-tasks 1 --max-retries 0 --agents 2
run critical-phase --max-retries 0 --agents 1
echo "both runs ended FAILED by their stop rule" >&2
