#!/bin/sh
# fixer.sh: a deterministic stand-in for a coding agent, for converge build's feature-loop example
# and tests: `converge build inventory-export tasks.md --agent-cli "sh fixer.sh"`. Run through the
# agent-cli executor in the task's worktree, it reads the task's prompt on stdin and applies a known
# patch per task: task 1 writes an export.sh that leaves F2 (location column) and F3 (empty
# inventory) failing; the fix tasks of iteration 2 ("fix-F2", "fix-F3") check that their prompt
# carries the failure details and patch export.sh. Run as oscillating.sh or regressing.sh (symbolic
# links to this file) it misbehaves instead:
#   oscillating  task 1 leaves only F2 failing; fix-F2 fixes it and breaks F3, fix-F3 fixes F3 and
#                breaks F2 again (A → B → A: STUCK)
#   regressing   fix-F2 also breaks F1, which passed (REGRESSION)
set -eu
prompt=$(cat)
variant=good
case "$0" in *oscillating*) variant=oscillating ;; *regressing*) variant=regressing ;; esac

need() { # the fix task's prompt must carry the failure details
	for want in "$@"; do
		case "$prompt" in *"$want"*) ;; *) echo "fixer: the prompt lacks \"$want\"" >&2; exit 1 ;; esac
	done
}

case "${CONVERGE_TASK_ID:-}" in
1)
	cat > export.sh <<'SH'
#!/bin/sh
# export.sh [file]: prints the inventory as CSV.
file=${1:-data/items.csv}
# empty-check
echo "item_id,name,sku,quantity"
tail -n +2 "$file" | cut -d, -f1-4
SH
	if [ "$variant" = oscillating ]; then
		sed -i 's/^# empty-check$/[ "$(wc -l < "$file")" -gt 1 ] || { echo "No items to export"; exit 0; }/' export.sh
	fi
	;;
2)
	mkdir -p docs
	printf '# Export\n\nRun `sh export.sh` to print the inventory as CSV.\n' > docs/export.md
	;;
fix-F2)
	need "Fix done-criterion F2" "Expected:" "Actual:"
	sed -i 's/"item_id,name,sku,quantity"/"item_id,name,sku,quantity,location"/; s/-f1-4/-f1-5/' export.sh
	case "$variant" in
	oscillating) sed -i 's/^\[ .*No items to export.*$/# empty-check/' export.sh ;;
	regressing) sed -i 's/"item_id,name,sku,quantity,location"/"id,name,sku,quantity,location"/' export.sh ;;
	esac
	;;
fix-F3)
	need "Fix done-criterion F3" "Expected:" "Actual:"
	sed -i 's/^# empty-check$/[ "$(wc -l < "$file")" -gt 1 ] || { echo "No items to export"; exit 0; }/' export.sh
	if [ "$variant" = oscillating ]; then
		sed -i 's/"item_id,name,sku,quantity,location"/"item_id,name,sku,quantity"/; s/-f1-5/-f1-4/' export.sh
	fi
	;;
*)
	echo "fixer: no patch for task ${CONVERGE_TASK_ID:-?}" >&2
	exit 1
	;;
esac
# The model usage a real agent CLI would report (docs/scheduler.md, "Token and cost budgets"):
# converge build --max-tokens / --max-cost count it.
echo "converge-usage: input_tokens=1000 output_tokens=250 cost_usd=0.01"
